package rig

import (
	"crypto/sha256"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestCPUTimes: the agent's CPU time (here this process's) grows with
// work done, and the machine's counters read.
func TestCPUTimes(t *testing.T) {
	p, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	a := &NodeAgent{cmd: &exec.Cmd{Process: p}}
	before, ok := a.CPUTime()
	if !ok {
		t.Skip("no /proc here")
	}
	// Work until the kernel has counted some: a tick is 10 ms.
	b := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); ; {
		for range 50 {
			sum := sha256.Sum256(b)
			b[0] = sum[0]
		}
		if now, _ := a.CPUTime(); now > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU time stayed at %v", before)
		}
	}
	busy, total, ok := hostCPU()
	if !ok || busy <= 0 || busy > total {
		t.Fatalf("hostCPU: busy %d of %d (%v)", busy, total, ok)
	}
	if l := loadAverage(); l < 0 {
		t.Fatalf("load average %v", l)
	}
	if _, ok := (&NodeAgent{}).CPUTime(); ok {
		t.Fatal("an agent without a process has a CPU time")
	}
}
