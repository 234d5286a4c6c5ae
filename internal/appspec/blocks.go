package appspec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/blockfmt"
	"github.com/hoard-io/hoard/internal/bytesize"
)

// Package formats: the block format (docs/artifacts.md), which `hoard
// deploy` writes, and the gzipped tar of earlier packages, still accepted.
const (
	FormatBlocks = "blk"
	FormatTarGz  = "tar.gz"
)

// blockMagic begins an object in the block format.
const blockMagic = "hoardblk"

// formatAt names a package's format from its first bytes.
func formatAt(r io.ReaderAt) string {
	magic := make([]byte, len(blockMagic))
	if n, _ := r.ReadAt(magic, 0); n == len(magic) && string(magic) == blockMagic {
		return FormatBlocks
	}
	return FormatTarGz
}

// PackBlocks is Pack in the block format: the same files, checks and
// limits, an archive whose files can be read one by one.
func PackBlocks(dir string) (*Package, error) {
	var buf bytes.Buffer
	pkg, err := PackBlocksTo(dir, &buf, DefaultLimits())
	if err != nil {
		return nil, err
	}
	pkg.Data = buf.Bytes()
	return pkg, nil
}

// PackBlocksTo is PackBlocks writing the package to w (a file, say)
// as it goes, within lim, so that no more than a block of it is held
// in memory: its Package has Size and SHA256, not Data. What it wrote
// before an error is not a package.
func PackBlocksTo(dir string, w io.Writer, lim Limits) (*Package, error) {
	if err := lim.Validate(); err != nil {
		return nil, err
	}
	out := newPackOut(w, lim)
	bw, err := blockfmt.NewWriter(out)
	if err != nil {
		return nil, err
	}
	return packDir(dir, out, blockSink{bw}, FormatBlocks)
}

// blockSink writes the block format's archive.
type blockSink struct{ w *blockfmt.Writer }

func (b blockSink) dir(rel string, _ fs.FileInfo) error { return b.w.AddDir(rel, 0o755) }

func (b blockSink) file(rel string, info fs.FileInfo, r io.Reader) error {
	return b.w.AddFile(rel, info.Mode().Perm()|0o444, r)
}

func (b blockSink) close() error { return b.w.Close() }

// openBlocks checks a package in the block format as untrusted: the
// format's own checks, the package limits, safe names, and every block's
// checksum (the whole stream is read once). What it holds is bounded
// whatever the package says (PackageReaderOptions): its index, at most
// MaxIndexBytes, and one block decoded.
func openBlocks(src io.ReaderAt, size int64, lim Limits) (*blockfmt.Reader, error) {
	r, err := blockfmt.NewReader(context.Background(), blockfmt.ReaderAtSource(src), size,
		append(PackageReaderOptions(), blockfmt.WithCacheBlocks(1))...)
	if errors.Is(err, blockfmt.ErrTooLarge) {
		return nil, fmt.Errorf("%w: the package's index is over what a package may have (%s, %d blocks, %d files and directories): %v",
			ErrInvalid, bytesize.Format(MaxIndexBytes), MaxBlockSumsBytes/BlockSumLen, MaxPackageFiles, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	fail := func(err error) (*blockfmt.Reader, error) {
		r.Close()
		return nil, err
	}
	switch {
	case !r.IsArchive():
		return fail(fmt.Errorf("%w: the package is a single object, not an archive", ErrInvalid))
	case len(r.Entries()) > MaxPackageFiles:
		return fail(fmt.Errorf("%w: more than %d files", ErrInvalid, MaxPackageFiles))
	case r.Size() > lim.Unpacked:
		return fail(fmt.Errorf("%w: the package unpacks to more than %s (the limit)", ErrInvalid, bytesize.Format(lim.Unpacked)))
	case r.Blocks()*BlockSumLen > MaxBlockSumsBytes:
		return fail(fmt.Errorf("%w: the package has %d blocks, more than %d; pack it with larger blocks", ErrInvalid, r.Blocks(), MaxBlockSumsBytes/BlockSumLen))
	}
	for _, e := range r.Entries() {
		if strings.ContainsAny(e.Path, "\\\x00") {
			return fail(fmt.Errorf("%w: the package holds an unsafe path %q", ErrInvalid, e.Path))
		}
	}
	if _, err := io.Copy(io.Discard, io.NewSectionReader(r, 0, r.Size())); err != nil {
		return fail(fmt.Errorf("%w: %v", ErrInvalid, err))
	}
	return r, nil
}

// BlockSumLen is the length of one block's entry in a package's block
// sums (Package.BlockSums): its offset in the package (u64), its stored
// length (u32), and the SHA-256 of its stored bytes, big-endian.
const BlockSumLen = 8 + 4 + sha256.Size

// readBlocksSpec returns the raw spec of a package in the block format,
// the digest of its index (blockfmt.Reader.IndexSHA256) and its block
// sums.
func readBlocksSpec(src io.ReaderAt, size int64, lim Limits) ([]byte, string, []byte, error) {
	r, err := openBlocks(src, size, lim)
	if err != nil {
		return nil, "", nil, err
	}
	defer r.Close()
	f, err := r.File(FileName)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: the package has no %s at its root", ErrInvalid, FileName)
	}
	if f.Size() > MaxSpecBytes {
		return nil, "", nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, FileName, MaxSpecBytes)
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, "", nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	sums := make([]byte, 0, r.Blocks()*BlockSumLen)
	var buf []byte
	for i := range r.Blocks() {
		off, n := r.BlockSpan(i)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		if _, err := src.ReadAt(buf[:n], off); err != nil {
			return nil, "", nil, fmt.Errorf("%w: block %d: %v", ErrInvalid, i, err)
		}
		h := sha256.Sum256(buf[:n])
		sums = binary.BigEndian.AppendUint64(sums, uint64(off))
		sums = binary.BigEndian.AppendUint32(sums, uint32(n))
		sums = append(sums, h[:]...)
	}
	return raw, r.IndexSHA256(), sums, nil
}

// unpackBlocks writes a package in the block format under tmp.
func unpackBlocks(src io.ReaderAt, size int64, lim Limits, tmp string) error {
	r, err := openBlocks(src, size, lim)
	if err != nil {
		return err
	}
	defer r.Close()
	if e, ok := r.Lookup(FileName); !ok || e.Mode.IsDir() {
		return fmt.Errorf("%w: the package has no %s at its root", ErrInvalid, FileName)
	}
	for _, e := range r.Entries() {
		target := filepath.Join(tmp, filepath.FromSlash(e.Path))
		if e.Mode.IsDir() {
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			continue
		}
		src, err := r.File(e.Path)
		if err != nil {
			return err
		}
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, e.Mode.Perm()&0o755|0o400)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, src)
		if err := errors.Join(err, f.Close()); err != nil {
			return err
		}
	}
	return nil
}
