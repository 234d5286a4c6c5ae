package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
)

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux architecture hoard builds for.
const userHZ = 100

// processCPU is the CPU time (user and system, every thread's) that
// process pid used so far, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	t, err := statCPU(b)
	if err != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	return t, nil
}

// statCPU is the user and system CPU time in a /proc/<pid>/stat line.
func statCPU(b []byte) (time.Duration, error) {
	// The command name (field 2) is in parentheses and may hold spaces:
	// fields are counted from its closing one.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := bytes.Fields(b[i+1:])
	// After the name: state (3), ..., utime (14), stime (15).
	const utime = 14 - 3
	if len(f) <= utime+1 {
		return 0, fmt.Errorf("%d fields", len(f)+2)
	}
	var ticks int64
	for _, s := range f[utime : utime+2] {
		n, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// cpuWindow reads a server process's CPU time as a point's timed window
// opens and closes (loadgen.ClosedConfig.Window). The zero value (pid 0:
// a target that is no process of its own) measures nothing.
type cpuWindow struct {
	pid int

	mu         sync.Mutex
	start, end time.Duration
	opened, ok bool
}

// serverCPU is the window reader of target's server process.
func (r *throughputRig) serverCPU(target string) *cpuWindow {
	w := &cpuWindow{}
	switch target {
	case TPLocal:
		if h := r.hoards[string(cachelet.ReadLocal)]; h != nil {
			w.pid = h.cmd.Process.Pid
		}
	case TPStrongHot, TPStrongMany:
		if h := r.hoards[string(cachelet.ReadVersionCheck)]; h != nil {
			w.pid = h.cmd.Process.Pid
		}
	case TPBareProc:
		if r.bareProc != nil {
			w.pid = r.bareProc.cmd.Process.Pid
		}
	case TPMinIO:
		if r.minio != nil {
			w.pid = r.minio.PID()
		}
	}
	return w
}

// window is the point's loadgen.ClosedConfig.Window, nil when there is
// no process to read.
func (w *cpuWindow) window(open bool) {
	if w.pid == 0 {
		return
	}
	t, err := processCPU(w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case err != nil:
		w.opened, w.ok = false, false
	case open:
		w.start, w.opened = t, true
	case w.opened:
		w.end, w.ok = t, true
	}
}

// perOp is the window's CPU time over ops, in nanoseconds, or nil when
// it was not measured.
func (w *cpuWindow) perOp(ops int) *float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ok || ops <= 0 {
		return nil
	}
	v := float64((w.end - w.start).Nanoseconds()) / float64(ops)
	return &v
}
