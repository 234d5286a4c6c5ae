package worker

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// modulePath is the module whose checkout holds .venv and python/.
const modulePath = "github.com/hoard-io/hoard"

// FindPython locates the interpreter workers run on: $HOARD_PYTHON, then
// <module root>/.venv/bin/python (the module root is the nearest directory
// at or above the working directory whose go.mod is hoard's; `make venv`
// builds the virtualenv there), then ../.venv/bin/python beside the
// running executable (bin/hoard in a checkout), then python3 on $PATH.
func FindPython() (string, error) {
	if p := os.Getenv("HOARD_PYTHON"); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("worker: $HOARD_PYTHON=%q: %w", p, err)
		}
		return p, nil
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, ".venv", "bin", "python")
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Clean(filepath.Join(filepath.Dir(exe), "..", ".venv", "bin", "python"))
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("python3"); err == nil {
		return p, nil
	}
	return "", errors.New("worker: no Python interpreter (run `make venv`, or set $HOARD_PYTHON, or put python3 on $PATH)")
}

// FindWorkerPath locates the directory holding the hoard_worker package,
// which becomes the worker's PYTHONPATH: $HOARD_WORKER_PATH, then
// <module root>/python, then ../python beside the running executable.
func FindWorkerPath() (string, error) {
	if p := os.Getenv("HOARD_WORKER_PATH"); p != "" {
		if err := checkWorkerPath(p); err != nil {
			return "", fmt.Errorf("worker: $HOARD_WORKER_PATH=%q: %w", p, err)
		}
		return filepath.Abs(p)
	}
	if root, err := moduleRoot(); err == nil {
		p := filepath.Join(root, "python")
		if checkWorkerPath(p) == nil {
			return p, nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Clean(filepath.Join(filepath.Dir(exe), "..", "python"))
		if checkWorkerPath(p) == nil {
			return p, nil
		}
	}
	return "", errors.New("worker: no hoard_worker package found (set $HOARD_WORKER_PATH to the directory holding it)")
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

func checkWorkerPath(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "hoard_worker", "__main__.py")); err != nil {
		return fmt.Errorf("no hoard_worker package in %s: %w", dir, err)
	}
	return nil
}

// moduleRoot walks up from the working directory to the first directory
// whose go.mod declares hoard's module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if goModIs(filepath.Join(dir, "go.mod"), modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("worker: no go.mod of %s above the working directory", modulePath)
		}
		dir = parent
	}
}

// goModIs reports whether the go.mod at p declares module path.
func goModIs(p, path string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			if i := strings.Index(rest, "//"); i >= 0 {
				rest = rest[:i]
			}
			return strings.Trim(strings.TrimSpace(rest), "\"`") == path
		}
	}
	return false
}
