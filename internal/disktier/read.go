package disktier

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash"
	"hash/crc32"
	"io"
	"os"

	"github.com/hoard-io/hoard/internal/store"
)

// Open finds bucket/key on disk and verifies its file whole: the header,
// the key it names, its length and the CRC32C of its bytes. It returns
// the object's metadata and a body of exactly its bytes, which the caller
// must close; the body checks the CRC32C again as it streams and
// withholds its last bytes if the file changed under it (ErrCorrupt), so
// its reader gets a whole, verified object or an error, never wrong
// bytes. A read refreshes the file's recency for every process sharing
// the directory.
//
// Errors: ErrNotFound, ErrCorrupt (the file was dropped and counted), or
// the disk's (counted; a miss to the caller).
func (t *Tier) Open(bucket, key string) (store.ObjectInfo, io.ReadCloser, error) {
	name := nameOf(bucket, key)
	path := t.path(name)
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			t.mu.Lock()
			t.idx.Remove(name)
			delete(t.known, name)
			t.mu.Unlock()
			t.m.reads.WithLabelValues("miss").Inc()
			return store.ObjectInfo{}, nil, ErrNotFound
		}
		t.m.reads.WithLabelValues("error").Inc()
		t.fail("read", err)
		return store.ObjectInfo{}, nil, err
	}
	h, off, sum, err := t.verify(f, bucket, key)
	if err != nil {
		f.Close()
		if errors.Is(err, ErrCorrupt) {
			t.corrupt(name, f)
			return store.ObjectInfo{}, nil, ErrCorrupt
		}
		t.m.reads.WithLabelValues("error").Inc()
		t.fail("read", err)
		return store.ObjectInfo{}, nil, err
	}
	now := t.cfg.Clock.Now()
	t.mu.Lock()
	if !t.idx.Touch(name, now) {
		t.idx.Put(name, off+h.Size+trailerLen, now) // another instance wrote it
	}
	t.known[name] = knownFile{bucket: bucket, key: key, etag: h.Info.ETag}
	t.mu.Unlock()
	os.Chtimes(path, now, now) // recency for the other processes' cleaners; best effort
	t.m.reads.WithLabelValues("hit").Inc()
	info := h.Info
	info.Bucket, info.Key, info.Size = bucket, key, h.Size
	return info, &checked{
		r: io.NewSectionReader(f, off, h.Size), f: f, t: t, name: name,
		h: crc32.New(castagnoli), want: sum, remaining: h.Size,
	}, nil
}

// corrupt drops a file that failed its checks, if it is still the one
// that was read (another process may have replaced it since).
func (t *Tier) corrupt(name string, f *os.File) {
	t.m.reads.WithLabelValues("corrupt").Inc()
	t.log.Warn("disk tier file failed its checks: dropped", "file", name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if fi, err := f.Stat(); err == nil {
		if cur, err := os.Stat(t.path(name)); err != nil || !os.SameFile(fi, cur) {
			t.idx.Remove(name)
			delete(t.known, name)
			return
		}
	}
	t.drop(name, "corrupt")
}

// verify reads f's header and checks it names bucket/key and that f's
// length and the CRC32C of its bytes are as recorded. It returns the
// header, where the bytes start and their CRC32C.
func (t *Tier) verify(f *os.File, bucket, key string) (header, int64, uint32, error) {
	var h header
	fi, err := f.Stat()
	if err != nil {
		return h, 0, 0, err
	}
	var pre [prefixLen]byte
	if _, err := io.ReadFull(f, pre[:]); err != nil {
		return h, 0, 0, ErrCorrupt
	}
	n, hsum, ok := decodePrefix(pre[:])
	if !ok {
		return h, 0, 0, ErrCorrupt
	}
	js := make([]byte, n)
	if _, err := io.ReadFull(f, js); err != nil || crc32.Checksum(js, castagnoli) != hsum {
		return h, 0, 0, ErrCorrupt
	}
	if err := json.Unmarshal(js, &h); err != nil || h.Bucket != bucket || h.Key != key || h.Size < 0 {
		return h, 0, 0, ErrCorrupt
	}
	off := int64(prefixLen + n)
	if fi.Size() != off+h.Size+trailerLen {
		return h, 0, 0, ErrCorrupt
	}
	crc := crc32.New(castagnoli)
	if _, err := io.Copy(crc, io.NewSectionReader(f, off, h.Size)); err != nil {
		return h, 0, 0, err
	}
	var tr [trailerLen]byte
	if _, err := f.ReadAt(tr[:], off+h.Size); err != nil {
		return h, 0, 0, ErrCorrupt
	}
	sum := binary.LittleEndian.Uint32(tr[:])
	if crc.Sum32() != sum {
		return h, 0, 0, ErrCorrupt
	}
	return h, off, sum, nil
}

// checked streams a file's bytes and withholds the last read's unless
// they all match the CRC32C verified at Open.
type checked struct {
	r         io.Reader
	f         *os.File
	t         *Tier
	name      string
	h         hash.Hash32
	want      uint32
	remaining int64
	err       error
}

func (c *checked) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > c.remaining {
		p = p[:c.remaining]
	}
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.remaining -= int64(n)
	if c.remaining == 0 {
		if c.h.Sum32() != c.want {
			c.err = ErrCorrupt
			c.t.corrupt(c.name, c.f)
			return 0, c.err
		}
		return n, io.EOF
	}
	if err == io.EOF {
		c.err = io.ErrUnexpectedEOF
		return n, c.err
	}
	return n, err
}

func (c *checked) Close() error { return c.f.Close() }
