package rig

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the clock ticks a second of /proc's CPU times (USER_HZ,
// 100 on every Linux architecture hoard builds for).
const userHZ = 100

// CPUTime is the CPU time (user and system) the agent's process has
// used so far, from /proc/PID/stat; false when it cannot be read (the
// process ended, no /proc). The agent's instances (cachelets, workers)
// are processes of their own and not counted.
func (a *NodeAgent) CPUTime() (time.Duration, bool) {
	if a.cmd == nil || a.cmd.Process == nil {
		return 0, false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, field 2, may hold spaces: fields count from
	// after its closing parenthesis (field 3, the state).
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * time.Second / userHZ, true
}

// hostCPU returns the machine's busy and total CPU ticks so far (all
// cores, from /proc/stat's first line; busy is all but idle and
// iowait).
func hostCPU() (busy, total int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		if i >= 8 { // guest times are counted in user already
			break
		}
		total += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, total, true
}

// loadAverage is the machine's one-minute load average (0 when unknown).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
