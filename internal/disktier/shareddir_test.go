package disktier

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// TestSharedDirAtOnce: eight instances making the same nested directory
// at once all find it, and every directory of the chain they made, only
// with the group's mode (drwxrws---), so each can create its entry in it
// at once; none is lost to another's rename.
func TestSharedDirAtOnce(t *testing.T) {
	old := syscall.Umask(0o022) // what a process usually runs with
	defer syscall.Umask(old)
	for round := range 20 {
		root := t.TempDir()
		d := filepath.Join(root, "app", "ab")
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := SharedDir(d); err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				for _, p := range []string{filepath.Dir(d), d} {
					fi, err := os.Stat(p)
					if err != nil || fi.Mode().Perm() != 0o770 || fi.Mode()&os.ModeSetgid == 0 {
						t.Errorf("round %d: %s found %v (%v); want drwxrws---", round, p, fi.Mode(), err)
					}
				}
				if err := os.Mkdir(filepath.Join(d, strconv.Itoa(i)), 0o700); err != nil {
					t.Errorf("round %d: %v", round, err)
				}
			}()
		}
		wg.Wait()
		if ents, _ := os.ReadDir(d); len(ents) != 8 {
			t.Fatalf("round %d: %d entries, want 8 (none lost to a rename)", round, len(ents))
		}
		if ents, _ := os.ReadDir(filepath.Dir(d)); len(ents) != 1 {
			t.Fatalf("round %d: %d entries beside the directory, want 1 (no temporary left)", round, len(ents))
		}
	}
}
