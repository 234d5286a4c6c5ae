package sandbox

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func bufLogger() (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

func TestValidation(t *testing.T) {
	for _, root := range []string{"", "a/b", ".", "..", "Hoard", "ho ard", strings.Repeat("a", MaxRootLen+1)} {
		if _, err := newManager(root, nil, withNone("test")); err == nil {
			t.Errorf("NewManager(%q): no error", root)
		}
	}
	m, err := newManager("hoard", nil, withNone("test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", ".", "..", "a/b", "/a", "A", "a b", "a\x00", "ä", "a:b", strings.Repeat("x", MaxNameLen+1)} {
		if _, err := m.Create(name, 1<<20); err == nil {
			t.Errorf("Create(%q): no error", name)
		}
	}
	for _, name := range []string{"a", "thumbs-0a1b2c3d", "x_y.z", "...", "-", strings.Repeat("x", MaxNameLen)} {
		s, err := m.Create(name, 1<<20)
		if err != nil {
			t.Errorf("Create(%q): %v", name, err)
			continue
		}
		if err := s.Delete(); err != nil {
			t.Error(err)
		}
	}
	for _, limit := range []int64{0, -1} {
		if _, err := m.Create("ok", limit); err == nil || !strings.Contains(err.Error(), "positive") {
			t.Errorf("Create with limit %d: err = %v", limit, err)
		}
	}
	s, err := m.Create("ok", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Delete()
	if err := s.SetLimit(0); err == nil {
		t.Error("SetLimit(0): no error")
	}
	if err := s.Add(0); err == nil {
		t.Error("Add(0): no error")
	}
	if err := s.Add(-5); err == nil {
		t.Error("Add(-5): no error")
	}
}

func TestNoneMode(t *testing.T) {
	log, buf := bufLogger()
	m, err := newManager("hoard", log, withNone("forced by the test"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Mode() != ModeNone || m.Reason() != "forced by the test" {
		t.Fatalf("Mode, Reason = %q, %q", m.Mode(), m.Reason())
	}
	if out := buf.String(); strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=WARN") || !strings.Contains(out, "forced by the test") {
		t.Errorf("log = %q, want one warning with the reason", out)
	}
	s, err := m.Create("app-1", 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s.Enforced() || s.Path() != "" || s.Name() != "app-1" || s.Limit() != 64<<20 {
		t.Errorf("Enforced, Path, Name, Limit = %v, %q, %q, %d", s.Enforced(), s.Path(), s.Name(), s.Limit())
	}
	if _, err := m.Create("app-1", 64<<20); !errors.Is(err, ErrExists) {
		t.Errorf("second Create: err = %v, want ErrExists", err)
	}
	if err := s.Add(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" { // Usage and Procs read /proc
		if u, err := s.Usage(); err != nil || u <= 0 {
			t.Errorf("Usage = %d, %v; want this process's RSS", u, err)
		}
		if pids, err := s.Procs(); err != nil || len(pids) != 1 || pids[0] != os.Getpid() {
			t.Errorf("Procs = %v, %v", pids, err)
		}
	}
	if n, err := s.OOMKills(); n != 0 || err != nil {
		t.Errorf("OOMKills = %d, %v", n, err)
	}
	if err := s.SetLimit(128 << 20); err != nil || s.Limit() != 128<<20 {
		t.Errorf("SetLimit: %v, Limit = %d", err, s.Limit())
	}
	// A no-op: this test process must not become unkillable.
	if err := s.ProtectFromOOM(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile("/proc/self/oom_score_adj"); strings.TrimSpace(string(b)) == "-1000" {
		t.Error("ProtectFromOOM changed oom_score_adj in mode none")
	}
	if err := s.Delete(); err != nil { // kills nothing: this process is in it
		t.Fatal(err)
	}
	if err := s.Delete(); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(os.Getpid()); !errors.Is(err, ErrDeleted) {
		t.Errorf("Add after Delete: %v", err)
	}
	if _, err := s.Usage(); !errors.Is(err, ErrDeleted) {
		t.Errorf("Usage after Delete: %v", err)
	}
	if err := s.SetLimit(1 << 20); !errors.Is(err, ErrDeleted) {
		t.Errorf("SetLimit after Delete: %v", err)
	}
	s2, err := m.Create("app-1", 64<<20) // the name is free again
	if err != nil {
		t.Fatal(err)
	}
	s2.Delete()
}

const hostMountinfo = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const containerMountinfo = `600 500 0:40 /docker/abc /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate
601 500 0:41 / /mnt/my\040cg rw - cgroup2 cgroup2 rw
`

func TestMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(hostMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	m, ok := findV1Memory(ms)
	if !ok || m.point != "/sys/fs/cgroup/memory" || m.root != "/" {
		t.Errorf("findV1Memory = %+v, %v", m, ok)
	}
	if v2 := findV2(ms); len(v2) != 1 || v2[0].point != "/sys/fs/cgroup/unified" {
		t.Errorf("findV2 = %+v", v2)
	}

	ms, err = parseMountinfo(strings.NewReader(containerMountinfo))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := findV1Memory(ms); ok {
		t.Error("findV1Memory found a v1 memory hierarchy")
	}
	v2 := findV2(ms)
	if len(v2) != 2 || v2[0].point != "/sys/fs/cgroup" || v2[0].root != "/docker/abc" || v2[1].point != "/mnt/my cg" {
		t.Errorf("findV2 = %+v", v2)
	}

	if _, err := parseMountinfo(strings.NewReader("garbage\n")); err == nil {
		t.Error("parseMountinfo took garbage")
	}
}

func TestRelativeTo(t *testing.T) {
	for _, c := range []struct{ root, cg, want string }{
		{"/", "/process_api/abc", "/process_api/abc"},
		{"/", "/", "/"},
		{"/docker/abc", "/docker/abc", "/"},
		{"/docker/abc", "/docker/abc/sub", "/sub"},
	} {
		if got, err := relativeTo(c.root, c.cg); err != nil || got != c.want {
			t.Errorf("relativeTo(%q, %q) = %q, %v; want %q", c.root, c.cg, got, err, c.want)
		}
	}
	for _, c := range []struct{ root, cg string }{{"/docker/abc", "/docker/abcd"}, {"/docker/abc", "/other"}} {
		if got, err := relativeTo(c.root, c.cg); err == nil {
			t.Errorf("relativeTo(%q, %q) = %q, want an error", c.root, c.cg, got)
		}
	}
}
