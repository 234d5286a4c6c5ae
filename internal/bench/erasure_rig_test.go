package bench

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// burn spins until this process's rusage grew by d.
func burn(d time.Duration) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for start := rusage(); rusage()-start < d; {
	}
}

// TestTreeCPUHelper is not a test: TestTreeCPU runs it as a child that
// burns 300 ms of CPU, says so and waits to be killed.
func TestTreeCPUHelper(t *testing.T) {
	if os.Getenv("HOARD_TREECPU_HELPER") != "1" {
		return
	}
	burn(300 * time.Millisecond)
	os.Stdout.WriteString("burnt\n")
	time.Sleep(time.Minute)
	os.Exit(0)
}

// TestTreeCPU counts the CPU time of this process and of a child that
// burns some, each read from its own rusage.
func TestTreeCPU(t *testing.T) {
	before := treeCPU(os.Getpid())
	burn(300 * time.Millisecond)
	child := exec.Command(os.Args[0], "-test.run=^TestTreeCPUHelper$")
	child.Env = append(os.Environ(), "HOARD_TREECPU_HELPER=1")
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Wait()
	defer child.Process.Kill()
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf[:5]) != "burnt" {
		t.Fatalf("child: %q %v", buf, err)
	}
	if got := treeCPU(os.Getpid()) - before; got < 550*time.Millisecond {
		t.Errorf("treeCPU grew by %v; this process and its child burnt at least 600 ms", got)
	}
	if got := treeCPU(child.Process.Pid); got < 300*time.Millisecond || got > 5*time.Second {
		t.Errorf("treeCPU(child) = %v; it burnt 300 ms and then slept", got)
	}
	by := treeCPUBy(os.Getpid(), func(chain [][]string) string {
		switch {
		case len(chain) == 0:
			return "self"
		case len(chain) == 1 && slices.Contains(chain[0], "-test.run=^TestTreeCPUHelper$"):
			return "helper"
		}
		return "other"
	})
	if by["self"] < 300*time.Millisecond || by["helper"] < 300*time.Millisecond {
		t.Errorf("treeCPUBy: %v; want 300 ms or more for this process and for the helper", by)
	}
}

func TestECRigPart(t *testing.T) {
	agent := func(id string) []string {
		return []string{"/bin/hoard", "agent", "--id", id, "--listen", "10.0.0.1:7000"}
	}
	serve := []string{"/x/bin/hoard", "serve", "--document", "/tmp/c.json"}
	for _, tc := range []struct {
		chain [][]string
		want  string
	}{
		{nil, ecRigParts[0]},
		{[][]string{serve, agent("node-0")}, ecRigParts[1]},
		{[][]string{serve, agent("node-10")}, ecRigParts[2]},
		{[][]string{serve, agent("node-1")}, ecRigParts[2]},
		{[][]string{agent("node-0")}, ecRigParts[3]},
		{[][]string{{"/opt/minio", "server"}}, ecRigParts[4]},
		{[][]string{{"python", "-m", "hoard_worker"}, serve, agent("node-0")}, ecRigParts[4]},
	} {
		if got := ecRigPart(tc.chain); got != tc.want {
			t.Errorf("ecRigPart(%q) = %q, want %q", tc.chain, got, tc.want)
		}
	}
}
