package localstore

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// BinaryEnv is the environment variable that overrides where FindBinary
// looks for name: HOARD_MINIO_BIN, HOARD_VERSITYGW_BIN.
func BinaryEnv(name string) string {
	return "HOARD_" + strings.ToUpper(name) + "_BIN"
}

// FindBinary locates a server executable: $HOARD_<NAME>_BIN, then
// <module root>/.tools/bin/<name> (the module root is the nearest directory
// at or above the working directory holding go.mod; `make tools` installs
// there), then ../.tools/bin/<name> beside the running executable, then
// $PATH. The error wraps ErrBinaryNotFound and says how to get
// the binary.
func FindBinary(name string) (string, error) {
	env := BinaryEnv(name)
	if p := os.Getenv(env); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("localstore: $%s=%q: %w", env, p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".tools", "bin", name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	// Beside the running binary as the Makefile lays it out (bin/hoard,
	// .tools/bin/minio), so `bin/hoard up` works from any directory.
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "..", ".tools", "bin", name)
		if checkExecutable(p) == nil {
			return filepath.Clean(p), nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: %s (run `make tools`, or set $%s, or put it on $PATH)",
		ErrBinaryNotFound, name, env)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%w: %s is not an executable file", ErrBinaryNotFound, p)
	}
	return nil
}

// moduleRoot walks up from the working directory to the first directory that
// holds a go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localstore: no go.mod above the working directory")
		}
		dir = parent
	}
}
