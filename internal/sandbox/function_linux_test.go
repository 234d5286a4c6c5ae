//go:build linux

package sandbox

import (
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestFunction: the function cgroup inside a sandbox kills what goes past
// its own limit while the sandbox has room, lets it through once raised,
// records the peak, and goes with the sandbox.
func TestFunction(t *testing.T) {
	m := cgroupManager(t)
	s, err := m.Create("fnlimit", 256<<20)
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() != ModeCgroup1 {
		if _, err := s.Function(64 << 20); !errors.Is(err, ErrNotSupported) {
			t.Fatalf("%s: Function = %v, want ErrNotSupported", m.Mode(), err)
		}
		s.Delete()
		return
	}
	if _, err := s.Function(512 << 20); err == nil {
		t.Fatal("a function limit above the sandbox's was accepted")
	}
	fn, err := s.Function(48 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Function(1 << 20); again != fn {
		t.Fatal("a second Function made another cgroup")
	}
	if lim, err := fn.Limit(); lim != 48<<20 || err != nil {
		t.Fatalf("Limit = %d, %v", lim, err)
	}
	join := func(h *helper) {
		t.Helper()
		if err := os.WriteFile(fn.CgroupProcs(), []byte(strconv.Itoa(h.cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	h := startHelper(t, 100)
	join(h)
	h.release()
	if h.allocated() {
		t.Fatal("100 MiB allocated under a function limit of 48 MiB")
	}
	if err := h.wait(); !killedBy(err, syscall.SIGKILL) {
		t.Fatalf("helper exited with %v, want SIGKILL", err)
	}
	if n, err := fn.OOMKills(); n < 1 || err != nil {
		t.Fatalf("function OOMKills = %d, %v", n, err)
	}
	if err := fn.SetLimit(1 << 30); err == nil {
		t.Fatal("SetLimit above the sandbox's limit was accepted")
	}
	if err := fn.SetLimit(160 << 20); err != nil {
		t.Fatal(err)
	}
	if err := fn.ResetPeak(); err != nil {
		t.Fatal(err)
	}
	h = startHelper(t, 100)
	join(h)
	h.release()
	if !h.allocated() {
		t.Fatalf("100 MiB did not fit a function limit of 160 MiB: %v", h.wait())
	}
	if peak, err := fn.Peak(); peak < 100<<20 || peak > 160<<20 || err != nil {
		t.Errorf("Peak = %d, %v; want 100 to 160 MiB", peak, err)
	}
	if u, err := s.Usage(); u < 100<<20 || err != nil {
		t.Errorf("the sandbox's usage %d, %v does not count the function's", u, err)
	}
	path := fn.Path()
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", path, err)
	}
	if _, err := fn.Peak(); !errors.Is(err, ErrDeleted) {
		t.Errorf("Peak after Delete: %v", err)
	}
}
