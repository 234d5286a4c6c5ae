package etcdauth

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestCredentialsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etcd.json")
	want := Credentials{Username: "hoard-agent:n0", Password: NewPassword()}
	if err := WriteFile(path, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	got, err := ReadFile(path)
	if err != nil || got != want {
		t.Fatalf("read back %+v, %v", got, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); !errors.Is(err, ErrInsecureFile) {
		t.Errorf("a file others may read: %v, want ErrInsecureFile", err)
	}
	empty := filepath.Join(t.TempDir(), "empty.json")
	if err := os.WriteFile(empty, []byte(`{"username": "x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(empty); err == nil {
		t.Error("a file without a password was accepted")
	}
	if a, b := NewPassword(), NewPassword(); len(a) != 64 || a == b {
		t.Error("passwords are not 32 random bytes")
	}
}
