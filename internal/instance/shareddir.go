package instance

import (
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// sharedDir makes d, shared with its group (setgid, 0770) when group is
// set, as the disk tier makes its own directories: the application's
// instances on a node run as uids of their own and each makes its log
// beside the others'. Two instances starting at once may both make it:
// d appears only with its final mode (made under a temporary name,
// then renamed into place unless it exists by then), so that neither
// finds it before the other opened it to the group.
func sharedDir(d string, group bool) error {
	if !group {
		return os.MkdirAll(d, 0o700)
	}
	if fi, err := os.Stat(d); err == nil && fi.IsDir() {
		return nil // another instance's
	}
	if err := os.MkdirAll(filepath.Dir(d), 0o770); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(d), "."+filepath.Base(d)+"-")
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
