package instance

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPlaceholderKey: with the application's secret, the placeholder key
// is derived from it (the same for all its cachelets, another for
// another application); without, it is made once in the log directory
// and read back from there; a short key file is refused.
func TestPlaceholderKey(t *testing.T) {
	secret := []byte("an application secret, 32 bytes.")
	k1, err := placeholderKey(&Config{App: "a", Secret: secret}, t.TempDir())
	if err != nil || len(k1) < 16 || bytes.Contains(k1, secret) {
		t.Fatalf("derived key %x (%v)", k1, err)
	}
	if k2, _ := placeholderKey(&Config{App: "a", Secret: secret}, t.TempDir()); !bytes.Equal(k1, k2) {
		t.Error("two cachelets of one application derive different keys")
	}
	if k3, _ := placeholderKey(&Config{App: "b", Secret: secret}, t.TempDir()); bytes.Equal(k1, k3) {
		t.Error("two applications derive the same key")
	}

	dir := t.TempDir()
	made, err := placeholderKey(&Config{}, dir)
	if err != nil || len(made) < 16 {
		t.Fatalf("made key %x (%v)", made, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, placeholderKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v (%v)", fi, err)
	}
	if again, err := placeholderKey(&Config{}, dir); err != nil || !bytes.Equal(again, made) {
		t.Fatalf("key read back %x (%v), want %x", again, err, made)
	}
	if err := os.WriteFile(filepath.Join(dir, placeholderKeyFile), []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := placeholderKey(&Config{}, dir); err == nil || !strings.Contains(err.Error(), "fewer") {
		t.Fatalf("short key file: %v, want a refusal", err)
	}
}
