package disktier

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// SharedDir makes d (and any missing parent) shared with its group:
// setgid, 0770, as the tier's directories are under Config.Group, where
// an application's instances on a node run as uids of their own and each
// makes files beside the others'. Two instances starting at once may both
// make it: d appears only with its final mode (made under a temporary
// name, then renamed into place unless it exists by then), so neither
// finds it before the other opened it to the group.
func SharedDir(d string) error {
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return nil // another instance's, or the agent's
	}
	parent := filepath.Dir(d)
	if parent != d {
		if _, err := os.Stat(parent); errors.Is(err, fs.ErrNotExist) {
			if err := SharedDir(parent); err != nil {
				return err
			}
		}
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(d)+"-")
	if err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o770|os.ModeSetgid); err != nil {
		os.Remove(tmp)
		return err
	}
	// Never over a directory another instance made meanwhile (a plain
	// rename replaces an empty one, under the feet of an instance that
	// found it).
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, d, unix.RENAME_NOREPLACE); err != nil {
		os.Remove(tmp)
		if fi, serr := os.Stat(d); serr == nil && fi.IsDir() {
			return nil // another instance made it meanwhile
		}
		return err
	}
	return nil
}
