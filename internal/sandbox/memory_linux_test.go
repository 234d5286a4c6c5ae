//go:build linux

package sandbox

import (
	"errors"
	"testing"
	"time"
)

// The working set counts what a process allocated, and no more than Usage.
func TestWorkingSet(t *testing.T) {
	m := cgroupManager(t)
	s := create(t, m, "ws", 128<<20)
	h := startHelper(t, 32)
	if err := s.Add(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	h.release()
	if !h.allocated() {
		t.Fatalf("the helper died allocating 32 MiB: %v", h.wait())
	}
	ws, err := s.WorkingSet()
	if err != nil {
		t.Fatal(err)
	}
	u, _ := s.Usage()
	if ws < 32<<20 || ws > u {
		t.Errorf("WorkingSet = %d, Usage = %d; want 32 MiB <= working set <= usage", ws, u)
	}
	t.Logf("%s: usage %d, working set %d", m.Mode(), u, ws)
}

// A usage threshold wakes the receiver when a process allocates past it
// (cgroup v1); cgroup v2 has none.
func TestNotifyUsage(t *testing.T) {
	m := cgroupManager(t)
	s := create(t, m, "notify", 128<<20)
	ch, stop, err := s.NotifyUsage(16 << 20)
	if m.Mode() == ModeCgroup2 {
		if !errors.Is(err, ErrNotSupported) {
			t.Fatalf("NotifyUsage on cgroup v2: %v, want ErrNotSupported", err)
		}
		t.Skip("cgroup v2: no usage thresholds")
	}
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("notified before anything ran")
	case <-time.After(50 * time.Millisecond):
	}
	h := startHelper(t, 32)
	if err := s.Add(h.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	h.release()
	select {
	case <-ch:
		t.Logf("notified %v after the release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("no notification after allocating 32 MiB past a 16 MiB threshold")
	}
	if !h.allocated() {
		t.Fatalf("the helper died: %v", h.wait())
	}
	stop()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel stayed open after stop")
	}
}
