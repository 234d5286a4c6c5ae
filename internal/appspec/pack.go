package appspec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/blockfmt"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// Limits of a code package.
const (
	// DefaultMaxPackageBytes is the default bound on a package's
	// compressed size (Limits.Package): the controller's --max-package.
	DefaultMaxPackageBytes = 1 << 30
	// MinUnpackedBytes is the least bound on a package's files together,
	// whatever Limits.Package is.
	MinUnpackedBytes = 256 << 20
	MaxPackageFiles  = 10000
	// MaxBlockSumsBytes bounds a package's block sums (BlockSumLen bytes
	// a block): 95,325 blocks, 46 GiB at the default 512 KiB blocks.
	MaxBlockSumsBytes = 4 << 20
	// MaxIndexBytes bounds a package's index in the block format (its
	// block table and table of contents), which the check holds in
	// memory: the block table of the most blocks a package may have
	// (745 KiB) and MaxPackageFiles entries whose paths average up to
	// 321 bytes. A Python environment of 17,051 files averages 45. A
	// package whose footer declares more is refused before any of its
	// index is read (docs/artifacts.md).
	MaxIndexBytes = 4 << 20
)

// PackageReaderOptions bound what opening a package in the block format
// may make a blockfmt.Reader hold: an index of at most MaxIndexBytes,
// the blocks MaxBlockSumsBytes allows and MaxPackageFiles entries. An
// object over them is refused from its footer (blockfmt.ErrTooLarge).
func PackageReaderOptions() []blockfmt.ReaderOption {
	return []blockfmt.ReaderOption{blockfmt.WithMaxIndex(MaxIndexBytes),
		blockfmt.WithMaxBlocks(MaxBlockSumsBytes / BlockSumLen), blockfmt.WithMaxEntries(MaxPackageFiles)}
}

// Limits bound a package: its compressed size and its files' size
// together. Both are read and written to a stream or a file, never held
// in memory, so they are settings, not memory.
type Limits struct {
	// Package bounds the compressed package, in bytes.
	Package int64
	// Unpacked bounds the package's files together, in bytes.
	Unpacked int64
}

// LimitsFor are the limits of packages of at most maxPackage bytes:
// their files together at most four times that (the ratio of the 64 MiB
// packed, 256 MiB unpacked bounds of earlier versions), and never less
// than MinUnpackedBytes.
func LimitsFor(maxPackage int64) Limits {
	return Limits{Package: maxPackage, Unpacked: max(MinUnpackedBytes, 4*maxPackage)}
}

// DefaultLimits are LimitsFor(DefaultMaxPackageBytes): 1 GiB packed,
// 4 GiB unpacked.
func DefaultLimits() Limits { return LimitsFor(DefaultMaxPackageBytes) }

// Validate checks that both bounds are positive.
func (l Limits) Validate() error {
	if l.Package <= 0 || l.Unpacked <= 0 {
		return fmt.Errorf("package limits must be positive (package %d, unpacked %d bytes)", l.Package, l.Unpacked)
	}
	return nil
}

// Package is an application's code: its directory in the block format
// (PackBlocks) or, as earlier packages are, a gzipped tar (Pack).
type Package struct {
	Spec *Spec
	// Data is the package, when it is in memory (Pack, PackBlocks,
	// ReadPackage); nil when it is in a file or a stream (PackBlocksTo,
	// ReadPackageAt).
	Data []byte
	// Size is the package's length in bytes.
	Size   int64
	SHA256 string
	// Format is FormatBlocks or FormatTarGz.
	Format string
	// IndexSHA256 is, in the block format, the digest of the package's
	// index (blockfmt.Reader.IndexSHA256): what an agent reading the
	// package lazily checks it against.
	IndexSHA256 string
	// BlockSums are, in the block format, every block's offset, length
	// and SHA-256 (BlockSumLen bytes a block): what an agent checks
	// blocks relayed by another agent against before it keeps them.
	BlockSums []byte
}

// skipped reports whether a path inside an application directory stays
// out of its package: version control, caches, hidden files.
func skipped(name string) bool {
	base := path.Base(name)
	return strings.HasPrefix(base, ".") || base == "__pycache__" || strings.HasSuffix(base, ".pyc")
}

// Pack reads DIR/hoard.yaml, checks it, and packs the directory's regular
// files (not hidden ones, caches or version control) into a package, a
// gzipped tar (PackBlocks writes the block format). Symbolic links are
// refused: a package holds only what is in it.
func Pack(dir string) (*Package, error) {
	var buf bytes.Buffer
	out := newPackOut(&buf, DefaultLimits())
	gz := gzip.NewWriter(out)
	pkg, err := packDir(dir, out, &tarSink{gz: gz, tw: tar.NewWriter(gz)}, FormatTarGz)
	if err != nil {
		return nil, err
	}
	pkg.Data = buf.Bytes()
	return pkg, nil
}

// packOut counts and hashes a package as it is written, and fails a write
// that takes it past its limit.
type packOut struct {
	w   io.Writer
	h   hash.Hash
	n   int64
	max int64
	lim Limits
}

func newPackOut(w io.Writer, lim Limits) *packOut {
	return &packOut{w: w, h: sha256.New(), max: lim.Package, lim: lim}
}

// errTooLarge is a package written past Limits.Package.
var errTooLarge = errors.New("the package is larger than its limit")

func (p *packOut) Write(b []byte) (int, error) {
	if p.n+int64(len(b)) > p.max {
		return 0, errTooLarge
	}
	n, err := p.w.Write(b)
	p.h.Write(b[:n])
	p.n += int64(n)
	return n, err
}

// packSink takes a package's directories and files, in the order the walk
// finds them, in one format.
type packSink interface {
	dir(rel string, info fs.FileInfo) error
	file(rel string, info fs.FileInfo, r io.Reader) error
	close() error
}

// packDir walks dir into sink, whose output is out, with the checks and
// limits of every package: the spec parses, only regular files and
// directories, at most out's Limits.Unpacked in MaxPackageFiles files, at
// most its Limits.Package packed.
func packDir(dir string, out *packOut, sink packSink, format string) (*Package, error) {
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	spec, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	var total int64
	files := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skipped(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return sink.dir(rel, info)
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s: only regular files and directories can be deployed (symbolic links and devices are refused)", rel)
		}
		total += info.Size()
		files++
		if total > out.lim.Unpacked || files > MaxPackageFiles {
			return fmt.Errorf("%s: more than %s or %d files; keep data in the store, not in the code", dir, bytesize.Format(out.lim.Unpacked), MaxPackageFiles)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return sink.file(rel, info, io.LimitReader(f, info.Size()))
	})
	if err == nil {
		err = sink.close()
	}
	if errors.Is(err, errTooLarge) {
		return nil, fmt.Errorf("%s: the package is more than %s compressed (the limit)", dir, bytesize.Format(out.max))
	}
	if err != nil {
		return nil, err
	}
	return &Package{Spec: spec, Size: out.n, SHA256: hex.EncodeToString(out.h.Sum(nil)), Format: format}, nil
}

// tarSink writes a gzipped tar.
type tarSink struct {
	gz *gzip.Writer
	tw *tar.Writer
}

func (t *tarSink) dir(rel string, info fs.FileInfo) error {
	return t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: info.ModTime()})
}

func (t *tarSink) file(rel string, info fs.FileInfo, r io.Reader) error {
	if err := t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: int64(info.Mode().Perm() | 0o444), Size: info.Size(), ModTime: info.ModTime()}); err != nil {
		return err
	}
	_, err := io.CopyN(t.tw, r, info.Size())
	return err
}

func (t *tarSink) close() error {
	if err := t.tw.Close(); err != nil {
		return err
	}
	return t.gz.Close()
}

// ReadPackage checks a package received over the network, in either
// format, with DefaultLimits: size, that it unpacks safely (without
// writing anything), and its spec.
func ReadPackage(data []byte) (*Package, error) {
	pkg, err := ReadPackageAt(bytes.NewReader(data), int64(len(data)), "", DefaultLimits())
	if err != nil {
		return nil, err
	}
	pkg.Data = data
	return pkg, nil
}

// ReadPackageAt is ReadPackage of a package of size bytes read through r
// (a file, say), which it reads in pieces, never whole. sum is the
// package's SHA-256, in hex, when the caller computed it as the package
// arrived; "" to have it computed here (a read of the whole package).
func ReadPackageAt(r io.ReaderAt, size int64, sum string, lim Limits) (*Package, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	if size > lim.Package {
		return nil, fmt.Errorf("%w: the package is larger than %s (the limit)", ErrInvalid, bytesize.Format(lim.Package))
	}
	var raw []byte
	var index string
	var sums []byte
	var err error
	f := formatAt(r)
	if f == FormatBlocks {
		raw, index, sums, err = readBlocksSpec(r, size, lim)
	} else {
		err = walk(io.NewSectionReader(r, 0, size), lim, func(h *tar.Header, r io.Reader) error {
			if h.Name == FileName {
				b, err := io.ReadAll(io.LimitReader(r, MaxSpecBytes+1))
				raw = b
				return err
			}
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fmt.Errorf("%w: the package has no %s at its root", ErrInvalid, FileName)
	}
	spec, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	if sum == "" {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(r, 0, size)); err != nil {
			return nil, err
		}
		sum = hex.EncodeToString(h.Sum(nil))
	}
	return &Package{Spec: spec, Size: size, SHA256: sum, Format: f, IndexSHA256: index, BlockSums: sums}, nil
}

// Unpack extracts a package, in either format, into dest (created; it must not exist yet, so
// that nothing is mixed with an older version), with DefaultLimits.
// Only regular files and directories with clean relative names are
// accepted.
func Unpack(data []byte, dest string) error {
	return UnpackAt(bytes.NewReader(data), int64(len(data)), dest, DefaultLimits())
}

// UnpackAt is Unpack of a package of size bytes read through r (a file,
// say), in pieces, within lim.
func UnpackAt(r io.ReaderAt, size int64, dest string, lim Limits) error {
	if err := lim.Validate(); err != nil {
		return err
	}
	if size > lim.Package {
		return fmt.Errorf("%w: the package is larger than %s (the limit)", ErrInvalid, bytesize.Format(lim.Package))
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if formatAt(r) == FormatBlocks {
		if err := unpackBlocks(r, size, lim, tmp); err != nil {
			return err
		}
		return os.Rename(tmp, dest)
	}
	hasSpec := false
	err = walk(io.NewSectionReader(r, 0, size), lim, func(h *tar.Header, r io.Reader) error {
		hasSpec = hasSpec || h.Name == FileName
		target := filepath.Join(tmp, filepath.FromSlash(h.Name))
		if h.Typeflag == tar.TypeDir {
			return os.MkdirAll(target, 0o755)
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, os.FileMode(h.Mode&0o755)|0o400)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	})
	if err != nil {
		return err
	}
	if !hasSpec {
		return fmt.Errorf("%w: the package has no %s at its root", ErrInvalid, FileName)
	}
	return os.Rename(tmp, dest)
}

// walk reads a gzipped tar, checking every entry's name, type and size,
// and calls fn for each.
func walk(r io.Reader, lim Limits, fn func(*tar.Header, io.Reader) error) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("%w: the package is not gzip: %v", ErrInvalid, err)
	}
	tr := tar.NewReader(gz)
	var total int64
	seen := map[string]bool{}
	for n := 0; ; n++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: the package is not a tar: %v", ErrInvalid, err)
		}
		if n >= MaxPackageFiles {
			return fmt.Errorf("%w: more than %d files", ErrInvalid, MaxPackageFiles)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name == "" || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") || strings.ContainsAny(name, "\\\x00") {
			return fmt.Errorf("%w: the package holds an unsafe path %q", ErrInvalid, h.Name)
		}
		if seen[name] {
			return fmt.Errorf("%w: the package holds %q twice", ErrInvalid, name)
		}
		seen[name] = true
		h.Name = name
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg:
			total += h.Size
			if h.Size < 0 || total > lim.Unpacked {
				return fmt.Errorf("%w: the package unpacks to more than %s (the limit)", ErrInvalid, bytesize.Format(lim.Unpacked))
			}
		default:
			return fmt.Errorf("%w: the package holds %q, which is not a regular file or directory", ErrInvalid, name)
		}
		if err := fn(h, io.LimitReader(tr, h.Size)); err != nil {
			return err
		}
	}
}
