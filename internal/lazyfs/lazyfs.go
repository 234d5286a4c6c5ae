// Package lazyfs shows an archive in the block format (internal/blockfmt)
// as a read-only FUSE file system: the tree comes from the archive's
// table of contents, and a file's bytes are fetched, block by block, when
// they are first read, each block verified by the blockfmt.Reader before
// any of its bytes are returned. A block that does not verify, or cannot
// be fetched, is an I/O error (EIO) to the reader, never other bytes.
//
// It is how an agent starts an instance before its code package is local
// (docs/adr/0027-lazy-code.md).
package lazyfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/hoard-io/hoard/internal/blockfmt"
)

// Options are a mount's parameters.
type Options struct {
	// ReadTimeout bounds one read's fetches (default 30 s).
	ReadTimeout time.Duration
	// Name is shown as the mount's source in /proc/self/mountinfo.
	Name string
	// OnError is called (if set) with each failed read's error.
	OnError func(file string, err error)
	// Retry, when set, is asked about a failed read's error; true reads
	// once more (the source has, say, turned to another origin).
	Retry func(err error) bool
}

// Stats counts what a mount did.
type Stats struct {
	// Opens counts files opened; Files how many distinct ones.
	Opens, Files int64
	// ReadErrors counts reads answered EIO.
	ReadErrors int64
	// Fetch is the reader's own counts: bytes fetched from the source.
	Fetch blockfmt.Stats
}

// FS is one mounted archive.
type FS struct {
	dir    string
	r      *blockfmt.Reader
	server *fuse.Server
	opts   Options

	mu       sync.Mutex
	opened   []string
	seen     map[string]bool
	opens    int64
	readErrs int64
	once     sync.Once
	err      error
}

// Available reports whether this process can mount FUSE file systems
// here: /dev/fuse exists and it runs as root (mounts are made directly,
// without fusermount, and with allow_other so that a jailed function's
// uid can read them).
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("lazyfs: mounting needs root")
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: %w", err)
	}
	return f.Close()
}

// Mount shows the archive r at dir (an existing empty directory) until
// Unmount. r must be an archive; it is used by the mount from now on and
// closed by Unmount.
func Mount(dir string, r *blockfmt.Reader, opts Options) (*FS, error) {
	if !r.IsArchive() {
		return nil, blockfmt.ErrNotArchive
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = 30 * time.Second
	}
	if opts.Name == "" {
		opts.Name = "hoardblk"
	}
	m := &FS{dir: dir, r: r, opts: opts, seen: map[string]bool{}}
	forever := time.Hour // the archive never changes under a mount
	server, err := fs.Mount(dir, &dirNode{m: m, mode: 0o755, root: true}, &fs.Options{
		EntryTimeout: &forever, AttrTimeout: &forever, NegativeTimeout: &forever,
		MountOptions: fuse.MountOptions{
			AllowOther:   true,
			DirectMount:  true,
			FsName:       opts.Name,
			Name:         "hoardblk",
			Options:      []string{"ro", "default_permissions"},
			MaxReadAhead: 512 << 10,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mounting %s: %w", dir, err)
	}
	m.server = server
	return m, nil
}

// Dir is where the archive is mounted.
func (m *FS) Dir() string { return m.dir }

// Opened returns the files opened so far, each once, in the order they
// were first opened.
func (m *FS) Opened() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.opened...)
}

// Stats returns the counts so far.
func (m *FS) Stats() Stats {
	m.mu.Lock()
	s := Stats{Opens: m.opens, Files: int64(len(m.opened)), ReadErrors: m.readErrs}
	m.mu.Unlock()
	s.Fetch = m.r.Stats()
	return s
}

// Unmount removes the mount (lazily if it is busy: the kernel ends it
// when the last process holding a file of it lets go, and the reader is
// closed then) and closes the reader.
func (m *FS) Unmount() error {
	m.once.Do(func() {
		if err := m.server.Unmount(); err != nil {
			// Busy: detach it, and let it end in the background.
			if derr := syscall.Unmount(m.dir, syscall.MNT_DETACH); derr != nil {
				m.err = err
				return
			}
			go func() {
				m.server.Wait()
				m.r.Close()
			}()
			return
		}
		m.server.Wait()
		m.err = m.r.Close()
	})
	return m.err
}

// Detach lazily unmounts whatever is mounted at dir (a mount left by a
// process that ended without unmounting); nothing mounted is not an
// error.
func Detach(dir string) error {
	err := syscall.Unmount(dir, syscall.MNT_DETACH)
	if err == nil || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	return err
}

func (m *FS) noteOpen(name string) {
	m.mu.Lock()
	m.opens++
	if !m.seen[name] {
		m.seen[name] = true
		m.opened = append(m.opened, name)
	}
	m.mu.Unlock()
}

// dirNode is a directory of the archive; the root builds the whole tree
// when it is added (the TOC is in memory already).
type dirNode struct {
	fs.Inode
	m    *FS
	mode uint32
	root bool
}

var (
	_ fs.NodeOnAdder   = (*dirNode)(nil)
	_ fs.NodeGetattrer = (*dirNode)(nil)
)

func (d *dirNode) OnAdd(ctx context.Context) {
	if !d.root {
		return
	}
	dirs := map[string]*fs.Inode{".": &d.Inode}
	for _, e := range d.m.r.Entries() { // each after its directory (blockfmt checks it)
		parent := dirs[path.Dir(e.Path)]
		if parent == nil {
			continue
		}
		perm := uint32(e.Mode.Perm()&0o755 | 0o444)
		var node fs.InodeEmbedder
		attr := fs.StableAttr{Mode: fuse.S_IFREG}
		if e.Mode.IsDir() {
			node = &dirNode{m: d.m, mode: perm | 0o111}
			attr.Mode = fuse.S_IFDIR
		} else {
			node = &fileNode{m: d.m, e: e, mode: perm}
		}
		ch := parent.NewPersistentInode(ctx, node, attr)
		parent.AddChild(path.Base(e.Path), ch, false)
		if e.Mode.IsDir() {
			dirs[e.Path] = ch
		}
	}
}

func (d *dirNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFDIR | d.mode
	return 0
}

// fileNode is a regular file of the archive.
type fileNode struct {
	fs.Inode
	m    *FS
	e    blockfmt.Entry
	mode uint32
}

var (
	_ fs.NodeGetattrer = (*fileNode)(nil)
	_ fs.NodeOpener    = (*fileNode)(nil)
	_ fs.NodeReader    = (*fileNode)(nil)
)

func (f *fileNode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = fuse.S_IFREG | f.mode
	out.Size = uint64(f.e.Size)
	out.Blocks = (out.Size + 511) / 512
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 {
		return nil, 0, syscall.EROFS
	}
	f.m.noteOpen(f.e.Path)
	// The bytes never change: the kernel may keep what it has read.
	return nil, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *fileNode) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.e.Size {
		return fuse.ReadResultData(nil), 0
	}
	n := min(int64(len(dest)), f.e.Size-off)
	ctx, cancel := context.WithTimeout(ctx, f.m.opts.ReadTimeout)
	defer cancel()
	got, err := f.m.r.ReadAtContext(ctx, dest[:n], f.e.Offset+off)
	if err != nil && int64(got) < n && f.m.opts.Retry != nil && f.m.opts.Retry(err) {
		got, err = f.m.r.ReadAtContext(ctx, dest[:n], f.e.Offset+off)
	}
	if err != nil && int64(got) < n {
		f.m.mu.Lock()
		f.m.readErrs++
		f.m.mu.Unlock()
		if f.m.opts.OnError != nil {
			f.m.opts.OnError(f.e.Path, err)
		}
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// MountsUnder lists the mount points below dir (not dir itself) in this
// process's mount namespace, from /proc/self/mountinfo: where an agent
// that was killed left its mounts.
func MountsUnder(dir string) ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	prefix := filepath.Clean(dir) + "/"
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMount(f[4]); strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
