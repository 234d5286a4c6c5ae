package agent

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestHostPaths(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real", "venv")
	if err := os.MkdirAll(filepath.Join(real, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// dir/link -> real (absolute), dir/rel -> link (relative).
	if err := os.Symlink(filepath.Join(dir, "real"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("link", filepath.Join(dir, "rel")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{real, []string{real}},
		{filepath.Join(dir, "link", "venv"), []string{filepath.Join(dir, "link"), real}},
		{filepath.Join(dir, "rel", "venv", "bin"), []string{filepath.Join(dir, "rel"), filepath.Join(dir, "link"), filepath.Join(real, "bin")}},
		{filepath.Join(dir, "missing", "x"), []string{filepath.Join(dir, "missing", "x")}},
	} {
		if got := hostPaths(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("hostPaths(%s) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestTakeUID(t *testing.T) {
	a := &Agent{cfg: Config{SandboxUIDBase: 1000, SandboxUIDCount: 3}, uids: map[int]bool{}}
	var got []int
	for range 3 {
		uid, err := a.takeUID()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, uid)
	}
	if !slices.Equal(got, []int{1000, 1001, 1002}) {
		t.Fatalf("uids %v", got)
	}
	if _, err := a.takeUID(); err == nil {
		t.Fatal("a fourth uid out of three")
	}
	a.releaseUID(1001)
	if uid, err := a.takeUID(); err != nil || uid != 1001 {
		t.Fatalf("after a release: %d %v", uid, err)
	}
}
