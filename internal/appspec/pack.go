package appspec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Limits of a code package.
const (
	MaxPackageBytes  = 64 << 20  // compressed
	MaxUnpackedBytes = 256 << 20 // all files together
	MaxPackageFiles  = 10000
)

// Package is an application's code: its directory in the block format
// (PackBlocks) or, as earlier packages are, a gzipped tar (Pack).
type Package struct {
	Spec   *Spec
	Data   []byte
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
	gz := gzip.NewWriter(&buf)
	return packDir(dir, &buf, &tarSink{gz: gz, tw: tar.NewWriter(gz)}, FormatTarGz)
}

// packSink takes a package's directories and files, in the order the walk
// finds them, in one format.
type packSink interface {
	dir(rel string, info fs.FileInfo) error
	file(rel string, info fs.FileInfo, r io.Reader) error
	close() error
}

// packDir walks dir into sink, whose output is buf, with the checks and
// limits of every package: the spec parses, only regular files and
// directories, at most MaxUnpackedBytes in MaxPackageFiles files, at most
// MaxPackageBytes packed.
func packDir(dir string, buf *bytes.Buffer, sink packSink, format string) (*Package, error) {
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
		if total > MaxUnpackedBytes || files > MaxPackageFiles {
			return fmt.Errorf("%s: more than %d MiB or %d files; keep data in the store, not in the code", dir, MaxUnpackedBytes>>20, MaxPackageFiles)
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
	if err != nil {
		return nil, err
	}
	if buf.Len() > MaxPackageBytes {
		return nil, fmt.Errorf("%s: the package is %d MiB compressed, more than %d MiB", dir, buf.Len()>>20, MaxPackageBytes>>20)
	}
	sum := sha256.Sum256(buf.Bytes())
	return &Package{Spec: spec, Data: buf.Bytes(), SHA256: hex.EncodeToString(sum[:]), Format: format}, nil
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
// format: size, that it unpacks safely (without writing anything), and
// its spec.
func ReadPackage(data []byte) (*Package, error) {
	if len(data) > MaxPackageBytes {
		return nil, fmt.Errorf("%w: the package is larger than %d MiB", ErrInvalid, MaxPackageBytes>>20)
	}
	var raw []byte
	var index string
	var sums []byte
	var err error
	if format(data) == FormatBlocks {
		raw, index, sums, err = readBlocksSpec(data)
	} else {
		err = walk(bytes.NewReader(data), func(h *tar.Header, r io.Reader) error {
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
	sum := sha256.Sum256(data)
	return &Package{Spec: spec, Data: data, SHA256: hex.EncodeToString(sum[:]), Format: format(data), IndexSHA256: index, BlockSums: sums}, nil
}

// Unpack extracts a package, in either format, into dest (created; it must not exist yet, so
// that nothing is mixed with an older version). Only regular files and
// directories with clean relative names are accepted.
func Unpack(data []byte, dest string) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), ".unpack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if format(data) == FormatBlocks {
		if err := unpackBlocks(data, tmp); err != nil {
			return err
		}
		return os.Rename(tmp, dest)
	}
	hasSpec := false
	err = walk(bytes.NewReader(data), func(h *tar.Header, r io.Reader) error {
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
func walk(r io.Reader, fn func(*tar.Header, io.Reader) error) error {
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
			if h.Size < 0 || total > MaxUnpackedBytes {
				return fmt.Errorf("%w: the package unpacks to more than %d MiB", ErrInvalid, MaxUnpackedBytes>>20)
			}
		default:
			return fmt.Errorf("%w: the package holds %q, which is not a regular file or directory", ErrInvalid, name)
		}
		if err := fn(h, io.LimitReader(tr, h.Size)); err != nil {
			return err
		}
	}
}
