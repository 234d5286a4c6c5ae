package blockfmt

import (
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// Entries returns the archive's TOC in its order (nil for a plain
// object). The caller must not modify it.
func (r *Reader) Entries() []Entry { return r.toc }

// Lookup returns the TOC entry of name.
func (r *Reader) Lookup(name string) (Entry, bool) {
	i, ok := r.byPath[name]
	if !ok {
		return Entry{}, false
	}
	return r.toc[i], true
}

// File returns a reader of one file of the archive: reading it fetches
// only the blocks that hold that file's bytes.
func (r *Reader) File(name string) (*io.SectionReader, error) {
	if !r.IsArchive() {
		return nil, ErrNotArchive
	}
	e, ok := r.Lookup(name)
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if e.Mode.IsDir() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return io.NewSectionReader(r, e.Offset, e.Size), nil
}

// Open opens a file or directory of the archive (fs.FS). Files read
// through the Reader, so they fetch only their blocks.
func (r *Reader) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if !r.IsArchive() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotArchive}
	}
	if name == "." {
		return &dirFile{r: r, info: info{Entry{Path: ".", Mode: fs.ModeDir | 0o755}}, name: "."}, nil
	}
	e, ok := r.Lookup(name)
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	if e.Mode.IsDir() {
		return &dirFile{r: r, info: info{e}, name: name}, nil
	}
	return &file{SectionReader: io.NewSectionReader(r, e.Offset, e.Size), info: info{e}}, nil
}

// children returns the entries directly in dir, sorted by name.
func (r *Reader) children(dir string) []fs.DirEntry {
	var out []fs.DirEntry
	for _, i := range r.dirs[dir] {
		out = append(out, info{r.toc[i]})
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

type info struct{ e Entry }

func (i info) Name() string               { return path.Base(i.e.Path) }
func (i info) Size() int64                { return i.e.Size }
func (i info) Mode() fs.FileMode          { return i.e.Mode }
func (i info) ModTime() time.Time         { return time.Time{} }
func (i info) IsDir() bool                { return i.e.Mode.IsDir() }
func (i info) Sys() any                   { return nil }
func (i info) Type() fs.FileMode          { return i.e.Mode.Type() }
func (i info) Info() (fs.FileInfo, error) { return i, nil }

type file struct {
	*io.SectionReader
	info info
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *file) Close() error               { return nil }

type dirFile struct {
	r    *Reader
	info info
	name string
	list []fs.DirEntry
	read bool
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.name, Err: fs.ErrInvalid}
}

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		d.list, d.read = d.r.children(d.name), true
	}
	if n <= 0 {
		out := d.list
		d.list = nil
		return out, nil
	}
	if len(d.list) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.list))
	out := d.list[:k]
	d.list = d.list[k:]
	return out, nil
}
