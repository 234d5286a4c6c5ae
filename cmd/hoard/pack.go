package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/hoard-io/hoard/internal/blockfmt"
)

// runPack makes a block-format object (docs/artifacts.md) from a file, or
// an archive from a directory (hoard pack IN OUT); --list and --extract
// read one back.
func runPack(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fset := flag.NewFlagSet("pack", flag.ContinueOnError)
	fset.SetOutput(stderr)
	blockSize := byteSize(blockfmt.DefaultBlockSize)
	fset.Var(&blockSize, "block-size", "uncompressed size of a block (4KiB to 16MiB)")
	list := fset.Bool("list", false, "print an object's blocks and, for an archive, its files: hoard pack --list OBJ")
	extract := fset.Bool("extract", false, "write an object's bytes to a file, or an archive's files under a new directory: hoard pack --extract OBJ OUT")
	if err := usageErr(fset.Parse(reorder(args, map[string]bool{"list": true, "extract": true}))); err != nil {
		return err
	}
	switch {
	case *list && *extract:
		return fmt.Errorf("%w: --list or --extract, not both", errUsage)
	case *list && fset.NArg() == 1:
		return listObject(ctx, fset.Arg(0), stdout)
	case *extract && fset.NArg() == 2:
		return extractObject(ctx, fset.Arg(0), fset.Arg(1))
	case !*list && !*extract && fset.NArg() == 2:
		return packPath(fset.Arg(0), fset.Arg(1), int(blockSize), stdout)
	}
	return fmt.Errorf("%w: hoard pack [--block-size N] IN OUT, hoard pack --list OBJ, or hoard pack --extract OBJ OUT", errUsage)
}

// packPath packs a file or a directory into out, written beside it and
// renamed when complete.
func packPath(in, out string, blockSize int, stdout io.Writer) (err error) {
	st, err := os.Stat(in)
	if err != nil {
		return err
	}
	if st.IsDir() {
		absIn, err1 := filepath.Abs(in)
		absOut, err2 := filepath.Abs(out)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if rel, err := filepath.Rel(absIn, absOut); err == nil && !strings.HasPrefix(rel, "..") {
			return fmt.Errorf("%w: the output %s is inside the directory packed", errUsage, out)
		}
	} else if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: only a regular file or a directory can be packed", in)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w, err := blockfmt.NewWriter(f, blockfmt.WithBlockSize(blockSize))
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	files := 0
	if st.IsDir() {
		files, err = packDir(w, in)
	} else {
		files, err = 1, copyFile(w, in)
	}
	if err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return err
	}
	r, err := openObject(context.Background(), out)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = fmt.Fprintf(stdout, "%s: %d file(s), %d bytes in %d blocks of %d, %d bytes packed (%.1f%%)\n",
		out, files, r.Size(), r.Blocks(), r.BlockSize(), size, 100*float64(size)/float64(max(r.Size(), 1)))
	return err
}

func copyFile(w io.Writer, name string) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// packDir adds dir's tree to an archive, in lexical order; symbolic links
// and devices are refused, as in code packages.
func packDir(w *blockfmt.Writer, dir string) (int, error) {
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return w.AddDir(rel, info.Mode().Perm())
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			files++
			return w.AddFile(rel, info.Mode().Perm(), f)
		}
		return fmt.Errorf("%s: only regular files and directories can be packed (symbolic links and devices are refused)", rel)
	})
	return files, err
}

func openObject(ctx context.Context, name string) (*blockfmt.Reader, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	// The file stays open for the Reader's life; the process ends soon.
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	r, err := blockfmt.NewReader(ctx, blockfmt.ReaderAtSource(f), st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return r, nil
}

func listObject(ctx context.Context, name string, stdout io.Writer) error {
	r, err := openObject(ctx, name)
	if err != nil {
		return err
	}
	defer r.Close()
	kind := "object"
	if r.IsArchive() {
		kind = fmt.Sprintf("archive of %d entries", len(r.Entries()))
	}
	fmt.Fprintf(stdout, "%s: %s, %d bytes in %d blocks of %d\n", name, kind, r.Size(), r.Blocks(), r.BlockSize())
	for _, e := range r.Entries() {
		fmt.Fprintf(stdout, "%s %12d %12d %s\n", e.Mode, e.Offset, e.Size, e.Path)
	}
	return nil
}

// extractObject writes an object's bytes to out, or an archive's files
// under out (a new directory), every block verified; paths cannot leave
// out (os.Root).
func extractObject(ctx context.Context, name, out string) error {
	r, err := openObject(ctx, name)
	if err != nil {
		return err
	}
	defer r.Close()
	if !r.IsArchive() {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, io.NewSectionReader(r, 0, r.Size()))
		return errors.Join(err, f.Close())
	}
	if err := os.Mkdir(out, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(out)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, e := range r.Entries() {
		if e.Mode.IsDir() {
			// Owner-writable while its files are written.
			if err := root.Mkdir(e.Path, e.Mode.Perm()|0o700); err != nil {
				return err
			}
			continue
		}
		src, err := r.File(e.Path)
		if err != nil {
			return err
		}
		f, err := root.OpenFile(e.Path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, e.Mode.Perm())
		if err != nil {
			return err
		}
		_, err = io.Copy(f, src)
		if err := errors.Join(err, f.Close()); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return nil
}
