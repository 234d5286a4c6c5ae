package bench

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"time"
)

// proc is one process as /proc shows it.
type proc struct {
	ppid  int64
	ticks int64 // user and system CPU time, in USER_HZ ticks of 10 ms
}

// readProcs reads every process's parent and CPU time from /proc.
func readProcs() map[int64]proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := map[int64]proc{}
	for _, e := range ents {
		var p int64
		if _, err := fmt.Sscan(e.Name(), &p); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: the fields after the
		// comm, which may hold spaces, from its last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 13 {
			continue
		}
		var ppid, ut, st int64
		_, err1 := fmt.Sscan(f[1], &ppid)
		_, err2 := fmt.Sscan(f[11], &ut)
		_, err3 := fmt.Sscan(f[12], &st)
		if err1 == nil && err2 == nil && err3 == nil {
			procs[p] = proc{ppid, ut + st}
		}
	}
	return procs
}

// cmdline is a process's arguments, or nil.
func cmdline(pid int64) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// treeCPU is the CPU time (user and system) of process pid and of its
// descendants alive now; the kernel's network work is in it only where
// it ran on their behalf.
func treeCPU(pid int) time.Duration {
	var all time.Duration
	for _, d := range treeCPUBy(pid, func([][]string) string { return "" }) {
		all += d
	}
	return all
}

// treeCPUBy is treeCPU split by part: part names the part of each process
// from its command line and its ancestors', up to pid's (chain[0] is its
// own; pid itself has an empty chain).
func treeCPUBy(pid int, part func(chain [][]string) string) map[string]time.Duration {
	procs := readProcs()
	out := map[string]time.Duration{}
	args := map[int64][]string{}
	argsOf := func(p int64) []string {
		a, ok := args[p]
		if !ok {
			a = cmdline(p)
			args[p] = a
		}
		return a
	}
	for p, pr := range procs {
		var chain [][]string
		for q := p; ; {
			if q == int64(pid) {
				out[part(chain)] += time.Duration(pr.ticks) * 10 * time.Millisecond
				break
			}
			up, ok := procs[q]
			if !ok || up.ppid == q || up.ppid == 0 {
				break
			}
			chain = append(chain, argsOf(q))
			q = up.ppid
		}
	}
	return out
}
