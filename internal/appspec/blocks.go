package appspec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/blockfmt"
)

// Package formats: the block format (docs/artifacts.md), which `hoard
// deploy` writes, and the gzipped tar of earlier packages, still accepted.
const (
	FormatBlocks = "blk"
	FormatTarGz  = "tar.gz"
)

// blockMagic begins an object in the block format.
const blockMagic = "hoardblk"

// format names data's format from its first bytes.
func format(data []byte) string {
	if bytes.HasPrefix(data, []byte(blockMagic)) {
		return FormatBlocks
	}
	return FormatTarGz
}

// PackBlocks is Pack in the block format: the same files, checks and
// limits, an archive whose files can be read one by one.
func PackBlocks(dir string) (*Package, error) {
	raw, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	spec, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w, err := blockfmt.NewWriter(&buf)
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
			return w.AddDir(rel, 0o755)
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
		return w.AddFile(rel, info.Mode().Perm()|0o444, io.LimitReader(f, info.Size()))
	})
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		return nil, err
	}
	if buf.Len() > MaxPackageBytes {
		return nil, fmt.Errorf("%s: the package is %d MiB compressed, more than %d MiB", dir, buf.Len()>>20, MaxPackageBytes>>20)
	}
	sum := sha256.Sum256(buf.Bytes())
	return &Package{Spec: spec, Data: buf.Bytes(), SHA256: hex.EncodeToString(sum[:]), Format: FormatBlocks}, nil
}

// openBlocks checks a package in the block format as untrusted: the
// format's own checks, the package limits, safe names, and every block's
// checksum (the whole stream is read once).
func openBlocks(data []byte) (*blockfmt.Reader, error) {
	r, err := blockfmt.NewReader(context.Background(), blockfmt.ReaderAtSource(bytes.NewReader(data)), int64(len(data)))
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
	case r.Size() > MaxUnpackedBytes:
		return fail(fmt.Errorf("%w: the package unpacks to more than %d MiB", ErrInvalid, MaxUnpackedBytes>>20))
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

// readBlocksSpec returns the raw spec of a package in the block format.
func readBlocksSpec(data []byte) ([]byte, error) {
	r, err := openBlocks(data)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	f, err := r.File(FileName)
	if err != nil {
		return nil, fmt.Errorf("%w: the package has no %s at its root", ErrInvalid, FileName)
	}
	if f.Size() > MaxSpecBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrInvalid, FileName, MaxSpecBytes)
	}
	return io.ReadAll(f)
}

// unpackBlocks writes a package in the block format under tmp.
func unpackBlocks(data []byte, tmp string) error {
	r, err := openBlocks(data)
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
