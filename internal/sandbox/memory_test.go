package sandbox

import (
	"errors"
	"os"
	"testing"
)

// In mode "none" the working set is the resident set sizes, and there are
// no usage notifications.
func TestMemoryWithoutCgroups(t *testing.T) {
	m, err := newManager("hoard", nil, withNone("test"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Create("mem", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	ws, err := s.WorkingSet()
	if err != nil || ws <= 0 {
		t.Errorf("WorkingSet = %d, %v; want this process's resident set", ws, err)
	}
	if _, _, err := s.NotifyUsage(1 << 20); !errors.Is(err, ErrNotSupported) {
		t.Errorf("NotifyUsage: %v, want ErrNotSupported", err)
	}
	if _, _, err := s.NotifyUsage(0); err == nil {
		t.Error("NotifyUsage(0): no error")
	}
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WorkingSet(); !errors.Is(err, ErrDeleted) {
		t.Errorf("WorkingSet after Delete: %v", err)
	}
	if _, _, err := s.NotifyUsage(1 << 20); !errors.Is(err, ErrDeleted) {
		t.Errorf("NotifyUsage after Delete: %v", err)
	}
}
