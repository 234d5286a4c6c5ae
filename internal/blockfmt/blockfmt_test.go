package blockfmt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/fstest"
)

// payload is n bytes half compressible (text), half random.
func payload(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		if (i/5000)%2 == 0 {
			b[i] = "hoard blocks "[i%13]
		} else {
			b[i] = byte(rng.Uint32())
		}
	}
	return b
}

func pack(t testing.TB, data []byte, opts ...Option) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func open(t testing.TB, obj []byte, opts ...ReaderOption) *Reader {
	t.Helper()
	r, err := NewReader(context.Background(), ReaderAtSource(bytes.NewReader(obj)), int64(len(obj)), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 4095, 4096, 4097, 3*4096 + 17, 100_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := payload(n, uint64(n))
			r := open(t, pack(t, data, WithBlockSize(4096)))
			if r.Size() != int64(n) || r.Blocks() != (n+4095)/4096 || r.IsArchive() {
				t.Fatalf("size %d blocks %d archive %v", r.Size(), r.Blocks(), r.IsArchive())
			}
			got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes, err %v; equal %v", len(got), err, bytes.Equal(got, data))
			}
			// Random ranges, each compared with the original.
			rng := rand.New(rand.NewPCG(1, 2))
			for range 50 {
				if n == 0 {
					break
				}
				a := rng.IntN(n)
				b := a + rng.IntN(n-a+1)
				p := make([]byte, b-a)
				if k, err := r.ReadAt(p, int64(a)); k != b-a || (err != nil && err != io.EOF) || !bytes.Equal(p, data[a:b]) {
					t.Fatalf("ReadAt [%d,%d): %d bytes, %v", a, b, k, err)
				}
			}
			// Past the end.
			if k, err := r.ReadAt(make([]byte, 10), int64(n)); k != 0 || err != io.EOF {
				t.Fatalf("ReadAt at the end: %d, %v", k, err)
			}
		})
	}
}

// countingSource counts the bytes fetched, to check only covering blocks are.
type countingSource struct {
	Source
	ranges [][2]int64
}

func (c *countingSource) FetchAt(ctx context.Context, p []byte, off int64) error {
	c.ranges = append(c.ranges, [2]int64{off, off + int64(len(p))})
	return c.Source.FetchAt(ctx, p, off)
}

func TestReadFetchesOnlyCoveringBlocks(t *testing.T) {
	data := payload(64*4096, 7)
	obj := pack(t, data, WithBlockSize(4096))
	src := &countingSource{Source: ReaderAtSource(bytes.NewReader(obj))}
	r, err := NewReader(context.Background(), src, int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if len(src.ranges) != 1 || src.ranges[0][1] != int64(len(obj)) {
		t.Fatalf("open fetched %v, want one range ending at %d", src.ranges, len(obj))
	}
	src.ranges = nil
	// Bytes [10*4096+100, 12*4096+5) lie in blocks 10, 11, 12.
	p := make([]byte, 2*4096-95)
	if _, err := r.ReadAt(p, 10*4096+100); err != nil || !bytes.Equal(p, data[10*4096+100:12*4096+5]) {
		t.Fatal("wrong bytes", err)
	}
	if len(src.ranges) != 1 || src.ranges[0][0] != r.offs[10] || src.ranges[0][1] != r.offs[13] {
		t.Fatalf("fetched %v, want [%d %d] (blocks 10-12)", src.ranges, r.offs[10], r.offs[13])
	}
	// Again: from the cache.
	if _, err := r.ReadAt(p, 10*4096+100); err != nil || len(src.ranges) != 1 {
		t.Fatalf("second read fetched %v, %v", src.ranges, err)
	}
	if s := r.Stats(); s.BlocksDecoded != 3 || s.Fetches != 2 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCorruptBlockIsAnError(t *testing.T) {
	data := payload(8*4096, 3)
	obj := pack(t, data, WithBlockSize(4096))
	r := open(t, obj)
	for i := range r.Blocks() {
		bad := bytes.Clone(obj)
		off := r.offs[i] + int64(r.lengths[i]&^storedBit)/2
		bad[off] ^= 0x40
		br := open(t, bad)
		p := make([]byte, 4096)
		_, err := br.ReadAt(p, int64(i)*4096)
		if !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrFormat) {
			t.Fatalf("block %d flipped: err %v", i, err)
		}
		// The other blocks still read.
		j := (i + 1) % r.Blocks()
		if _, err := br.ReadAt(p, int64(j)*4096); err != nil || !bytes.Equal(p, data[j*4096:(j+1)*4096]) {
			t.Fatalf("block %d after block %d flipped: %v", j, i, err)
		}
	}
	// A flipped index or footer byte fails at open.
	for _, off := range []int{len(obj) - 1, len(obj) - footerLen - 1, len(obj) - 20} {
		bad := bytes.Clone(obj)
		bad[off] ^= 1
		if _, err := NewReader(context.Background(), ReaderAtSource(bytes.NewReader(bad)), int64(len(bad))); err == nil {
			t.Fatalf("byte %d flipped: opened", off)
		}
	}
	// A wrong header fails at the first block.
	bad := bytes.Clone(obj)
	bad[0] = 'X'
	if _, err := open(t, bad).ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrFormat) {
		t.Fatalf("bad header: %v", err)
	}
}

func TestWriterOptions(t *testing.T) {
	for _, n := range []int{0, MinBlockSize - 1, MaxBlockSize + 1} {
		if _, err := NewWriter(io.Discard, WithBlockSize(n)); err == nil {
			t.Errorf("block size %d accepted", n)
		}
	}
	r := open(t, pack(t, payload(10, 1)))
	if r.BlockSize() != DefaultBlockSize {
		t.Errorf("default block size %d", r.BlockSize())
	}
}

func buildArchive(t testing.TB, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, WithBlockSize(4096))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.AddDir("lib", 0o755))
	must(w.AddDir("lib/pkg", 0o700))
	for _, name := range []string{"main.py", "lib/a.py", "lib/pkg/b.bin", "empty"} {
		must(w.AddFile(name, 0o644, strings.NewReader(files[name])))
	}
	must(w.Close())
	return buf.Bytes()
}

func TestArchive(t *testing.T) {
	files := map[string]string{
		"main.py":       "print('hi')\n",
		"lib/a.py":      strings.Repeat("a", 10000),
		"lib/pkg/b.bin": string(payload(20000, 9)),
		"empty":         "",
	}
	obj := buildArchive(t, files)
	r := open(t, obj)
	if !r.IsArchive() || len(r.Entries()) != 6 {
		t.Fatalf("archive %v, %d entries", r.IsArchive(), len(r.Entries()))
	}
	want := map[string]string{}
	for k, v := range files {
		want[k] = v
	}
	var paths []string
	for k := range want {
		paths = append(paths, k)
	}
	if err := fstest.TestFS(r, paths...); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		got, err := fs.ReadFile(r, name)
		if err != nil || string(got) != content {
			t.Fatalf("%s: %d bytes, %v", name, len(got), err)
		}
	}
	if e, _ := r.Lookup("lib/pkg"); e.Mode != fs.ModeDir|0o700 {
		t.Fatalf("lib/pkg mode %v", e.Mode)
	}
	if _, err := r.File("lib"); err == nil {
		t.Fatal("File of a directory")
	}
	if _, err := r.Open("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open(nope): %v", err)
	}
}

func TestArchiveFileFetchesItsBlocks(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf, WithBlockSize(4096))
	big := payload(40*4096, 4)
	if err := w.AddFile("big", 0o644, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("small", 0o644, strings.NewReader("tiny")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	obj := buf.Bytes()
	src := &countingSource{Source: ReaderAtSource(bytes.NewReader(obj))}
	r, err := NewReader(context.Background(), src, int64(len(obj)))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := fs.ReadFile(r, "small")
	if err != nil || string(got) != "tiny" {
		t.Fatalf("small: %q, %v", got, err)
	}
	if s := r.Stats(); s.BlocksDecoded != 1 || s.Fetches != 2 {
		t.Fatalf("reading a 4-byte file: %+v, want one block in one fetch after the tail", s)
	}
}

func TestWriterRefuses(t *testing.T) {
	w, _ := NewWriter(io.Discard)
	for _, tc := range []struct {
		name string
		mode fs.FileMode
	}{
		{"../x", 0o644}, {"/abs", 0o644}, {".", 0o644}, {"a//b", 0o644}, {"", 0o644},
		{"nodir/x", 0o644}, {"link", fs.ModeSymlink | 0o777}, {"dev", fs.ModeDevice | 0o644},
	} {
		if err := w.AddFile(tc.name, tc.mode, strings.NewReader("")); err == nil {
			t.Errorf("AddFile(%q, %v) accepted", tc.name, tc.mode)
		}
	}
	if err := w.AddFile("ok", 0o644, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("ok", 0o644, strings.NewReader("x")); err == nil {
		t.Error("duplicate accepted")
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Error("Write on an archive accepted")
	}
	p, _ := NewWriter(io.Discard)
	p.Write([]byte("x"))
	if err := p.AddFile("f", 0o644, strings.NewReader("")); err == nil {
		t.Error("AddFile on a plain object accepted")
	}
}

// TestDecodeBlock: a block decoded from its stored span is its bytes; a
// flipped stored byte, a short span or a block out of range is an error.
func TestDecodeBlock(t *testing.T) {
	data := payload(5*4096+100, 4)
	obj := pack(t, data, WithBlockSize(4096))
	r := open(t, obj)
	for i := range r.Blocks() {
		off, n := r.BlockSpan(i)
		got, err := r.DecodeBlock(i, obj[off:off+n])
		end := min((i+1)*4096, len(data))
		if err != nil || !bytes.Equal(got, data[i*4096:end]) {
			t.Fatalf("block %d: %v", i, err)
		}
		bad := bytes.Clone(obj[off : off+n])
		bad[n/2] ^= 0x40
		if _, err := r.DecodeBlock(i, bad); !errors.Is(err, ErrChecksum) && !errors.Is(err, ErrFormat) {
			t.Fatalf("block %d flipped: %v", i, err)
		}
		if _, err := r.DecodeBlock(i, obj[off:off+n-1]); !errors.Is(err, ErrFormat) {
			t.Fatalf("block %d short: %v", i, err)
		}
	}
	if _, err := r.DecodeBlock(r.Blocks(), nil); err == nil {
		t.Fatal("block past the end decoded")
	}
}
