package disktier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/store"
)

func newTier(t testing.TB, dir string, budget int64, opt func(*Config)) *Tier {
	t.Helper()
	cfg := Config{Dir: dir, Budget: budget, MinObjectSize: 1, CleanInterval: time.Hour}
	if opt != nil {
		opt(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func data(key string, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ key[i%len(key)]
	}
	return b
}

func info(key string, n int) store.ObjectInfo {
	return store.ObjectInfo{Bucket: "b", Key: key, Size: int64(n), ETag: "etag-" + key, ContentType: "application/x-test",
		UserMetadata: map[string]string{"k": "v"}}
}

func write(t *testing.T, tr *Tier, key string, n int) []byte {
	t.Helper()
	d := data(key, n)
	if err := tr.Write(context.Background(), "b", key, info(key, n), io.NopCloser(bytes.NewReader(d))); err != nil {
		t.Fatalf("write %s: %v", key, err)
	}
	return d
}

// read opens key and reads it whole.
func read(tr *Tier, key string) ([]byte, store.ObjectInfo, error) {
	inf, body, err := tr.Open("b", key)
	if err != nil {
		return nil, inf, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	return b, inf, err
}

func TestRoundTrip(t *testing.T) {
	tr := newTier(t, t.TempDir(), 1<<20, nil)
	want := write(t, tr, "a/../../etc/passwd", 100_000)
	got, inf, err := read(tr, "a/../../etc/passwd")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read: %v, %d bytes equal=%v", err, len(got), bytes.Equal(got, want))
	}
	if inf.ETag != "etag-a/../../etc/passwd" || inf.ContentType != "application/x-test" || inf.UserMetadata["k"] != "v" || inf.Size != 100_000 {
		t.Errorf("info %+v", inf)
	}
	if _, _, err := read(tr, "other"); !errors.Is(err, ErrNotFound) {
		t.Errorf("absent key: %v, want ErrNotFound", err)
	}
	// The key never became a path.
	filepath.WalkDir(tr.Dir(), func(p string, d os.DirEntry, err error) error {
		if d != nil && !d.IsDir() && !validName(d.Name()) {
			t.Errorf("file %s is not named by a hash", p)
		}
		return nil
	})
}

// TestBitFlips flips one bit at a time at positions across every part of
// a file (magic, lengths, header, bytes, trailer): every read is
// ErrCorrupt or the right bytes, never wrong bytes, and a failed file is
// dropped.
func TestBitFlips(t *testing.T) {
	tr := newTier(t, t.TempDir(), 1<<20, nil)
	const n = 5000
	want := write(t, tr, "k", n)
	path := tr.path(nameOf("b", "k"))
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	caught := 0
	for pos := 0; pos < len(orig); pos += 1 + pos/8 {
		for _, bit := range []byte{0x01, 0x80} {
			flipped := bytes.Clone(orig)
			flipped[pos] ^= bit
			if err := os.WriteFile(path, flipped, 0o600); err != nil {
				t.Fatal(err)
			}
			got, _, err := read(tr, "k")
			switch {
			case errors.Is(err, ErrCorrupt):
				caught++
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("flip at %d: corrupt file not dropped", pos)
				}
			case err != nil:
				t.Fatalf("flip at %d: %v", pos, err)
			case !bytes.Equal(got, want):
				t.Fatalf("flip at %d of %d: wrong bytes served", pos, len(orig))
			}
		}
	}
	if caught == 0 {
		t.Fatal("no flip caught")
	}
	// A flip after Open's check is caught as the bytes stream: the last
	// read fails instead of delivering them.
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	_, body, err := tr.Open("b", "k")
	if err != nil {
		t.Fatal(err)
	}
	flipped := bytes.Clone(orig)
	flipped[len(orig)-trailerLen-10] ^= 1
	f, _ := os.OpenFile(path, os.O_WRONLY, 0)
	f.WriteAt(flipped[len(orig)-trailerLen-10:len(orig)-trailerLen-9], int64(len(orig)-trailerLen-10))
	f.Close()
	got, err := io.ReadAll(body)
	body.Close()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("streamed read of a file changed after Open: %v, want ErrCorrupt", err)
	}
	if bytes.Equal(got, flipped[len(orig)-n-trailerLen:len(orig)-trailerLen]) || len(got) >= n {
		t.Fatalf("streamed read delivered %d of %d bytes after the change", len(got), n)
	}
}

// TestMisplacedFile: a valid file under another key's name (a hash
// collision, or a file moved) names its own key and is refused.
func TestMisplacedFile(t *testing.T) {
	tr := newTier(t, t.TempDir(), 1<<20, nil)
	write(t, tr, "one", 3000)
	other := tr.path(nameOf("b", "two"))
	os.MkdirAll(filepath.Dir(other), 0o700)
	if err := os.Rename(tr.path(nameOf("b", "one")), other); err != nil {
		t.Fatal(err)
	}
	if _, _, err := read(tr, "two"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("misplaced file: %v, want ErrCorrupt", err)
	}
}

func TestBudgetLRU(t *testing.T) {
	tr := newTier(t, t.TempDir(), 35_000, nil)
	write(t, tr, "a", 10_000)
	write(t, tr, "b", 10_000)
	write(t, tr, "c", 10_000)
	if _, _, err := read(tr, "a"); err != nil { // a is now the most recent
		t.Fatal(err)
	}
	write(t, tr, "d", 10_000)
	if _, _, err := read(tr, "b"); !errors.Is(err, ErrNotFound) {
		t.Errorf("b (least recently used): %v, want ErrNotFound", err)
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, _, err := read(tr, k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if s := tr.Stats(); s.Bytes > 35_000 || s.Objects != 3 {
		t.Errorf("stats %+v", s)
	}
}

// TestShared: two processes' tiers over one directory see each other's
// files, and a tier opened again (an instance reloaded) starts warm.
func TestShared(t *testing.T) {
	dir := t.TempDir()
	a := newTier(t, dir, 1<<20, nil)
	want := write(t, a, "x", 20_000)
	b := newTier(t, dir, 1<<20, nil)
	if s := b.Stats(); s.Objects != 1 {
		t.Fatalf("a new tier over the directory indexes %d files, want 1", s.Objects)
	}
	write(t, a, "y", 20_000)
	if got, _, err := read(b, "y"); err != nil || len(got) != 20_000 {
		t.Fatalf("b reads a's new file: %v", err)
	}
	b.Remove("b", "x")
	if _, _, err := read(a, "x"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a reads x removed by b: %v", err)
	}
	_ = want
}

func TestAgeAndRescan(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(time.Now())
	tr := newTier(t, dir, 1<<20, func(c *Config) { c.Clock = fc; c.MaxAge = time.Hour })
	write(t, tr, "old", 2000)
	write(t, tr, "new", 2000)
	later := fc.Now().Add(2 * time.Hour)
	os.Chtimes(tr.path(nameOf("b", "new")), later, later)
	fc.Advance(90 * time.Minute)
	tmp := filepath.Join(dir, tmpDir, "w-crashed")
	os.WriteFile(tmp, []byte("torn"), 0o600)
	os.Chtimes(tmp, time.Now().Add(-time.Hour), time.Now().Add(-time.Hour))
	tr.clean()
	if _, _, err := read(tr, "old"); !errors.Is(err, ErrNotFound) {
		t.Errorf("old: %v, want ErrNotFound", err)
	}
	if _, _, err := read(tr, "new"); err != nil {
		t.Errorf("new: %v", err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file kept: %v", err)
	}
}

// TestRemoveCancelsSpill: a write that overtakes a spill still queued
// keeps the old bytes off the disk.
func TestRemoveCancelsSpill(t *testing.T) {
	tr := newTier(t, t.TempDir(), 1<<20, nil)
	pr, pw := io.Pipe()
	if !tr.Spill("b", "k", info("k", 4), pr) {
		t.Fatal("spill refused")
	}
	tr.Remove("b", "k")
	pw.Write([]byte("abcd"))
	pw.Close()
	tr.Close() // waits for the writer
	if _, err := os.Stat(tr.path(nameOf("b", "k"))); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("cancelled spill written: %v", err)
	}
}

// TestDegraded: a disk that fails writes turns the tier memory-only for
// RetryAfter, without errors for reads.
func TestDegraded(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake(time.Now())
	tr := newTier(t, dir, 1<<20, func(c *Config) { c.Clock = fc; c.RetryAfter = time.Minute })
	os.RemoveAll(filepath.Join(dir, tmpDir))
	os.WriteFile(filepath.Join(dir, tmpDir), nil, 0o600) // writes fail: tmp is no directory
	if err := tr.Write(context.Background(), "b", "k", info("k", 10), io.NopCloser(bytes.NewReader(data("k", 10)))); err == nil {
		t.Fatal("write on a failing disk succeeded")
	}
	if !tr.Stats().Degraded {
		t.Fatal("not degraded after a failed write")
	}
	if tr.Spill("b", "k2", info("k2", 10), io.NopCloser(bytes.NewReader(data("k2", 10)))) {
		t.Fatal("degraded tier took a spill")
	}
	os.Remove(filepath.Join(dir, tmpDir))
	os.Mkdir(filepath.Join(dir, tmpDir), 0o700)
	fc.Advance(2 * time.Minute)
	if tr.Stats().Degraded {
		t.Fatal("still degraded after RetryAfter")
	}
	write(t, tr, "k", 10)
}

func TestConfigErrors(t *testing.T) {
	for _, c := range []Config{{}, {Dir: "x"}, {Dir: "x", Budget: 1, MinObjectSize: -1}, {Dir: "x", Budget: 1, CleanInterval: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v) succeeded", c)
		}
	}
	_ = fmt.Sprint()
}
