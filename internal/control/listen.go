package control

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// MaxSocketPath is the longest socket path Listen binds: sun_path holds
// 108 bytes with the terminating NUL, and some systems fewer.
const MaxSocketPath = 100

// Listen binds the control socket at path, readable and writable by its
// owner alone (0600). The directory holding it should be private (0700)
// too: the token is the authentication, the modes keep other users from
// even connecting. A stale socket left at path (a crashed cachelet's) is
// replaced; any other file there is an error.
func Listen(ctx context.Context, path string) (net.Listener, error) {
	if len(path) > MaxSocketPath {
		return nil, fmt.Errorf("control: socket path %q is longer than %d bytes", path, MaxSocketPath)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control: %s exists and is not a socket", path)
		}
		_ = os.Remove(path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	} else if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("control: the socket's directory %s has mode %v; want 0700", dir, fi.Mode().Perm())
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("control: %w", err)
	}
	return ln, nil
}
