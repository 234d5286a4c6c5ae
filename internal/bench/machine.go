package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// Machine describes where a run happened.
type Machine struct {
	NumCPU       int    `json:"nproc"`
	GOMAXPROCS   int    `json:"gomaxprocs"`
	MemoryBytes  int64  `json:"memory_bytes"`
	CPUModel     string `json:"cpu_model,omitempty"`
	GoVersion    string `json:"go_version"`
	OS           string `json:"os"`
	Arch         string `json:"arch"`
	Kernel       string `json:"kernel,omitempty"`
	MinIOVersion string `json:"minio_version,omitempty"`
	RedisVersion string `json:"redis_version,omitempty"`
	Python       string `json:"python,omitempty"`
}

// DescribeMachine gathers what it can; missing pieces are left empty.
func DescribeMachine() Machine {
	m := Machine{
		NumCPU:     runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		GoVersion:  runtime.Version(),
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.MemoryBytes = procField("/proc/meminfo", "MemTotal:", func(v string) (int64, bool) {
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb << 10, err == nil
	})
	procField("/proc/cpuinfo", "model name", func(v string) (int64, bool) {
		m.CPUModel = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
		return 0, true
	})
	return m
}

// procField finds the first line of path starting with prefix and parses
// the rest with parse.
func procField(path, prefix string, parse func(string) (int64, bool)) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			if v, ok := parse(rest); ok {
				return v
			}
		}
	}
	return 0
}

// commandVersion runs `binary args...` and returns its first output line.
func commandVersion(binary string, args ...string) string {
	out, err := exec.Command(binary, args...).Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(line)
}
