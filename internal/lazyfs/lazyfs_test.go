package lazyfs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"

	"github.com/hoard-io/hoard/internal/blockfmt"
)

func needFUSE(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("FUSE mounts are not possible here (CI runs as root): %v", err)
	}
}

// archive packs a small code tree: an incompressible 64 KiB file first (so
// its blocks are stored as they are, 16 of 4 KiB), then the entry point.
func archive(t *testing.T) (obj, big, main []byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	big = make([]byte, 64<<10)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	main = bytes.Repeat([]byte("print('hello from the lazy archive')\n"), 50)
	var buf bytes.Buffer
	w, err := blockfmt.NewWriter(&buf, blockfmt.WithBlockSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddDir("lib", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("lib/big.bin", 0o644, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("main.py", 0o644, bytes.NewReader(main)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), big, main
}

// source is an object in memory that counts its fetches.
type source struct {
	mu    sync.Mutex
	data  []byte
	bytes int64
}

func (s *source) FetchAt(_ context.Context, p []byte, off int64) error {
	s.mu.Lock()
	s.bytes += int64(len(p))
	s.mu.Unlock()
	if off < 0 || off+int64(len(p)) > int64(len(s.data)) {
		return errors.New("out of range")
	}
	copy(p, s.data[off:])
	return nil
}

func (s *source) fetched() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// errList is what OnError reported.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

func mount(t *testing.T, obj []byte) (*FS, *source, *errList) {
	t.Helper()
	src := &source{data: obj}
	r, err := blockfmt.NewReader(context.Background(), src, int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	errs := &errList{}
	m, err := Mount(dir, r, Options{OnError: func(_ string, err error) {
		errs.mu.Lock()
		errs.errs = append(errs.errs, err)
		errs.mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
	})
	return m, src, errs
}

func TestLazyReadsOnlyWhatIsOpened(t *testing.T) {
	needFUSE(t)
	obj, big, main := archive(t)
	m, src, _ := mount(t, obj)
	tail := src.fetched() // the footer and index, read at open

	got, err := os.ReadFile(filepath.Join(m.Dir(), "main.py"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, main) {
		t.Fatal("main.py read through the mount differs from what was packed")
	}
	if fetched := src.fetched() - tail; fetched >= int64(len(big)) {
		t.Fatalf("reading main.py (%d bytes) fetched %d bytes: the other file's blocks were read too", len(main), fetched)
	}
	if st := m.Stats(); st.Files != 1 || st.Fetch.BytesFetched != src.fetched() {
		t.Fatalf("stats %+v, source saw %d bytes", st, src.fetched())
	}

	got, err = os.ReadFile(filepath.Join(m.Dir(), "lib", "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, big) {
		t.Fatal("lib/big.bin read through the mount differs from what was packed")
	}
	if o := m.Opened(); !slices.Equal(o, []string{"main.py", "lib/big.bin"}) {
		t.Fatalf("opened %v", o)
	}
	// Directory listings and modes come from the table of contents.
	ents, err := os.ReadDir(m.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].Name() != "lib" || !ents[0].IsDir() || ents[1].Name() != "main.py" {
		t.Fatalf("root lists %v", ents)
	}
	fi, err := os.Stat(filepath.Join(m.Dir(), "main.py"))
	if err != nil || fi.Size() != int64(len(main)) || fi.Mode().Perm() != 0o644 {
		t.Fatalf("main.py: %v %v", fi, err)
	}
}

func TestLazyIsReadOnly(t *testing.T) {
	needFUSE(t)
	obj, _, _ := archive(t)
	m, _, _ := mount(t, obj)
	for _, try := range []func() error{
		func() error { return os.WriteFile(filepath.Join(m.Dir(), "main.py"), []byte("x"), 0o644) },
		func() error { return os.WriteFile(filepath.Join(m.Dir(), "new.py"), []byte("x"), 0o644) },
		func() error { return os.Remove(filepath.Join(m.Dir(), "main.py")) },
		func() error { return os.Mkdir(filepath.Join(m.Dir(), "d"), 0o755) },
	} {
		if err := try(); err == nil {
			t.Fatal("a change to the mount was accepted")
		}
	}
}

func TestLazyCorruptBlockIsEIO(t *testing.T) {
	needFUSE(t)
	obj, _, main := archive(t)
	bad := slices.Clone(obj)
	bad[16+2*4096+10] ^= 0xff // inside lib/big.bin's third block, stored as is
	m, _, errs := mount(t, bad)

	_, err := os.ReadFile(filepath.Join(m.Dir(), "lib", "big.bin"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("reading a file with a corrupt block: %v, want EIO", err)
	}
	if got := errs.list(); len(got) == 0 || !errors.Is(got[0], blockfmt.ErrChecksum) {
		t.Fatalf("errors reported: %v", got)
	}
	if st := m.Stats(); st.ReadErrors == 0 {
		t.Fatalf("stats %+v count no read error", st)
	}
	// The other file's blocks are sound and still read.
	got, err := os.ReadFile(filepath.Join(m.Dir(), "main.py"))
	if err != nil || !bytes.Equal(got, main) {
		t.Fatalf("main.py after a corrupt block elsewhere: %v", err)
	}
}

// TestMountsUnder: a mount is listed under its parent directory until it
// is detached (as an agent cleans up what a killed one left).
func TestMountsUnder(t *testing.T) {
	needFUSE(t)
	obj, _, _ := archive(t)
	src := &source{data: obj}
	r, err := blockfmt.NewReader(context.Background(), src, int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	dir := filepath.Join(parent, "with space")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := Mount(dir, r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Unmount()
	if got, err := MountsUnder(parent); err != nil || !slices.Equal(got, []string{dir}) {
		t.Fatalf("mounts under %s: %v %v", parent, got, err)
	}
	if err := Detach(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := MountsUnder(parent); err != nil || len(got) != 0 {
		t.Fatalf("after Detach: %v %v", got, err)
	}
	if err := Detach(dir); err != nil {
		t.Fatalf("detaching nothing: %v", err)
	}
}
