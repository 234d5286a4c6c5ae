package instance

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Instances starting at once on a node share the application's log
// directory: none finds it before it is open to the group (each then
// makes its own log in it, as a uid of its own). Root ignores modes, so
// the mode each one finds on its return is what is checked.
func TestSharedDirAtOnce(t *testing.T) {
	old := syscall.Umask(0o022) // what a process usually runs with
	defer syscall.Umask(old)
	for round := range 20 {
		d := filepath.Join(t.TempDir(), "writelog")
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := sharedDir(d, true); err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				fi, err := os.Stat(d)
				if err != nil || fi.Mode().Perm() != 0o770 || fi.Mode()&os.ModeSetgid == 0 {
					t.Errorf("round %d: found %v (%v); want drwxrws---", round, fi.Mode(), err)
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
	}
}
