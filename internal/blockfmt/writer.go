package blockfmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"github.com/klauspost/compress/zstd"
)

// Entry is one entry of an archive's table of contents.
type Entry struct {
	// Path is slash-separated and valid for io/fs (fs.ValidPath), never ".".
	Path string
	// Mode is the type (fs.ModeDir or regular) and permission bits.
	Mode fs.FileMode
	// Offset and Size place a file's bytes in the uncompressed stream;
	// a directory's are 0.
	Offset, Size int64
}

// Option sets a Writer's parameters.
type Option func(*Writer) error

// WithBlockSize sets the uncompressed size of every block but the last
// (default DefaultBlockSize; between MinBlockSize and MaxBlockSize).
func WithBlockSize(n int) Option {
	return func(w *Writer) error {
		if n < MinBlockSize || n > MaxBlockSize {
			return fmt.Errorf("blockfmt: block size %d out of [%d, %d]", n, MinBlockSize, MaxBlockSize)
		}
		w.blockSize = n
		return nil
	}
}

// WithLevel sets the zstd level (default zstd.SpeedDefault).
func WithLevel(l zstd.EncoderLevel) Option {
	return func(w *Writer) error { w.level = l; return nil }
}

// Writer builds an object, streaming: it holds one block and the index
// (8 bytes a block, and the TOC) in memory. Either write the bytes of a
// plain object with Write, or build an archive with AddFile and AddDir;
// then Close, which writes the index and the footer. A Writer is not safe
// for concurrent use.
type Writer struct {
	w         io.Writer
	blockSize int
	level     zstd.EncoderLevel
	enc       *zstd.Encoder
	buf       []byte // the block being filled
	out       []byte // its compressed form
	index     []byte // block table
	blocks    int
	off       uint64 // bytes written to w
	size      uint64 // uncompressed bytes taken
	archive   bool
	plain     bool
	toc       []Entry
	paths     map[string]bool
	dirs      map[string]bool
	err       error
	closed    bool
}

// NewWriter returns a Writer to w; it writes the header at once.
func NewWriter(w io.Writer, opts ...Option) (*Writer, error) {
	bw := &Writer{w: w, blockSize: DefaultBlockSize, level: zstd.SpeedDefault, paths: map[string]bool{}, dirs: map[string]bool{}}
	for _, o := range opts {
		if err := o(bw); err != nil {
			return nil, err
		}
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(bw.level), zstd.WithEncoderConcurrency(1),
		zstd.WithWindowSize(windowFor(bw.blockSize)), zstd.WithEncoderCRC(false))
	if err != nil {
		return nil, fmt.Errorf("blockfmt: %w", err)
	}
	bw.enc = enc
	bw.buf = make([]byte, 0, bw.blockSize)
	bw.emit(header(bw.blockSize))
	return bw, bw.err
}

// windowFor is the zstd window for a block: the block itself, at least
// zstd's minimum, a power of two.
func windowFor(blockSize int) int {
	w := zstd.MinWindowSize
	for w < blockSize && w < zstd.MaxWindowSize {
		w <<= 1
	}
	return w
}

func (w *Writer) emit(b []byte) {
	if w.err != nil {
		return
	}
	n, err := w.w.Write(b)
	w.off += uint64(n)
	if err != nil {
		w.err = fmt.Errorf("blockfmt: write: %w", err)
	}
}

// Write appends p to a plain object's bytes. It returns an error once
// AddFile or AddDir has been called.
func (w *Writer) Write(p []byte) (int, error) {
	if w.archive {
		return 0, errors.New("blockfmt: Write on an archive; use AddFile")
	}
	w.plain = true
	return w.write(p)
}

func (w *Writer) write(p []byte) (int, error) {
	if w.closed {
		return 0, errors.New("blockfmt: write after Close")
	}
	n := 0
	for len(p) > 0 && w.err == nil {
		if w.size+uint64(len(p)) > MaxSize {
			w.err = fmt.Errorf("blockfmt: object over %d bytes", uint64(MaxSize))
			break
		}
		k := min(len(p), w.blockSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		w.size += uint64(k)
		n += k
		p = p[k:]
		if len(w.buf) == w.blockSize {
			w.flush()
		}
	}
	return n, w.err
}

// flush compresses and writes the block being filled.
func (w *Writer) flush() {
	if len(w.buf) == 0 || w.err != nil {
		return
	}
	w.out = w.enc.EncodeAll(w.buf, w.out[:0])
	length := uint32(len(w.out))
	data := w.out
	if len(w.out) >= len(w.buf) {
		length = uint32(len(w.buf)) | storedBit
		data = w.buf
	}
	w.index = binary.LittleEndian.AppendUint32(w.index, length)
	w.index = binary.LittleEndian.AppendUint32(w.index, checksum(w.buf))
	w.blocks++
	w.emit(data)
	w.buf = w.buf[:0]
}

// AddFile appends a regular file of the archive: its bytes are read from r
// to its end. mode's permission bits are kept; its type must be regular.
// A file's directory must have been added before it.
func (w *Writer) AddFile(name string, mode fs.FileMode, r io.Reader) error {
	if err := w.addEntry(name, mode, false); err != nil {
		return err
	}
	start := w.size
	var chunk [32 << 10]byte
	for {
		n, err := r.Read(chunk[:])
		if n > 0 {
			if _, werr := w.write(chunk[:n]); werr != nil {
				return werr
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			w.err = fmt.Errorf("blockfmt: %s: %w", name, err)
			return w.err
		}
	}
	e := &w.toc[len(w.toc)-1]
	e.Offset, e.Size = int64(start), int64(w.size-start)
	return nil
}

// AddDir adds a directory to the archive.
func (w *Writer) AddDir(name string, mode fs.FileMode) error {
	return w.addEntry(name, mode|fs.ModeDir, true)
}

func (w *Writer) addEntry(name string, mode fs.FileMode, dir bool) error {
	switch {
	case w.err != nil:
		return w.err
	case w.closed:
		return errors.New("blockfmt: add after Close")
	case w.plain:
		return errors.New("blockfmt: AddFile on a plain object")
	case !validPath(name):
		return fmt.Errorf("blockfmt: invalid path %q", name)
	case !dir && mode.Type() != 0:
		return fmt.Errorf("blockfmt: %s: only regular files and directories can be archived (mode %v)", name, mode)
	case w.paths[name]:
		return fmt.Errorf("blockfmt: %s added twice", name)
	case path.Dir(name) != "." && !w.dirs[path.Dir(name)]:
		return fmt.Errorf("blockfmt: %s added before its directory", name)
	case len(w.toc) >= MaxEntries:
		return fmt.Errorf("blockfmt: over %d entries", MaxEntries)
	}
	w.archive = true
	w.paths[name] = true
	if dir {
		w.dirs[name] = true
	}
	w.toc = append(w.toc, Entry{Path: name, Mode: mode & (fs.ModeDir | fs.ModePerm)})
	return nil
}

// validPath reports whether name may be a TOC path.
func validPath(name string) bool {
	return name != "." && len(name) <= MaxPath && fs.ValidPath(name) && path.Clean(name) == name
}

// Close writes the last block, the index and the footer. It does not
// close the underlying writer. Calling it again returns the first error.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.flush()
	w.closed = true
	defer w.enc.Close()
	if w.err != nil {
		return w.err
	}
	f := footer{indexOff: w.off, size: w.size, blockSize: uint32(w.blockSize), blocks: uint32(w.blocks),
		entries: uint32(len(w.toc)), version: version}
	index := w.index
	if w.archive {
		f.flags = flagArchive
		for _, e := range w.toc {
			index = binary.LittleEndian.AppendUint16(index, uint16(len(e.Path)))
			index = append(index, e.Path...)
			index = binary.LittleEndian.AppendUint32(index, uint32(e.Mode))
			index = binary.LittleEndian.AppendUint64(index, uint64(e.Offset))
			index = binary.LittleEndian.AppendUint64(index, uint64(e.Size))
		}
	}
	if len(index) > MaxIndex {
		w.err = fmt.Errorf("blockfmt: index of %d bytes, over %d", len(index), MaxIndex)
		return w.err
	}
	f.indexLen, f.indexCRC = uint32(len(index)), checksum(index)
	w.emit(index)
	w.emit(f.marshal())
	return w.err
}
