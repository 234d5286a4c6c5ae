package writelog

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzOpen: whatever bytes a segment holds (torn, damaged, planted), Open
// neither panics nor fails, and every record it returns is one that a
// frame with a valid checksum carried.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	l, _, err := Open(Config{Dir: dir})
	if err != nil {
		f.Fatal(err)
	}
	id, _ := l.Append(context.Background(), rec(1, 40))
	l.Append(context.Background(), rec(2, 10))
	l.Done(id)
	l.Sync(context.Background())
	l.Close()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range m {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 9, 1, 2, 3, 4})
	f.Fuzz(func(t *testing.T, seg []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segName(1)), seg, 0o600); err != nil {
			t.Fatal(err)
		}
		l, pending, err := Open(Config{Dir: dir})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer l.Close()
		for _, p := range pending {
			if p.ID == 0 || !bytes.Contains(seg, p.Data) {
				t.Fatalf("record %d of %d bytes not from the segment", p.ID, len(p.Data))
			}
		}
		// The log goes on: appends get IDs above every one seen.
		id, err := l.Append(context.Background(), rec(3, 5))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pending {
			if id <= p.ID {
				t.Fatalf("new id %d not above replayed %d", id, p.ID)
			}
		}
	})
}
