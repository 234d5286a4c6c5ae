// Command images writes an OCI image archive (an OCI image layout in a
// tar, as `ctr images import`, `skopeo copy oci-archive:` and `crane push`
// take it) from directories, one layer per directory, reproducibly: the
// same directories give the same bytes and so the same digests, whoever
// builds them and when.
//
//	go run . --out hoard.tar --name docker.io/hoard-io/hoard:dev \
//	    --layer ../../out/images/base --layer ../../out/images/hoard \
//	    --entrypoint /usr/local/bin/hoard --user 65532:65532
//
// Every file of a layer is owned by root (uid and gid 0) unless --owner
// names its path, keeps its permission bits (setuid, setgid and sticky
// included), and is dated --epoch (SOURCE_DATE_EPOCH, default 0); entries
// are sorted by path. Hard links become copies. Anything but directories,
// regular files and symbolic links is an error naming it.
package main

import (
	"archive/tar"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// spec is what one image is made of.
type spec struct {
	Name       string            // its reference, recorded in the archive's index
	Layers     []string          // directories, bottom first
	Owners     map[string][2]int // path in the image -> uid, gid (the path and what is under it)
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	WorkingDir string
	Labels     map[string]string
	Epoch      time.Time
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fset := flag.NewFlagSet("images", flag.ContinueOnError)
	out := fset.String("out", "", "the archive to write (an OCI image layout in a tar)")
	name := fset.String("name", "", "the image's reference (registry/repository:tag), recorded in the archive")
	var layers, entry, cmd, env, owners, labels listFlag
	fset.Var(&layers, "layer", "a directory whose tree is one layer, bottom first (repeatable)")
	fset.Var(&entry, "entrypoint", "one word of the entrypoint (repeatable)")
	fset.Var(&cmd, "cmd", "one word of the default arguments (repeatable)")
	fset.Var(&env, "env", "KEY=VALUE in the image's environment (repeatable); no secrets")
	fset.Var(&owners, "owner", "PATH=UID:GID: the owner of PATH in the image and of what is under it (repeatable)")
	fset.Var(&labels, "label", "KEY=VALUE (repeatable)")
	user := fset.String("user", "", "UID:GID the entrypoint runs as")
	workdir := fset.String("workdir", "/", "the working directory")
	epoch := fset.String("epoch", os.Getenv("SOURCE_DATE_EPOCH"), "the date of every file and of the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH, else 0)")
	if err := fset.Parse(args); err != nil {
		return err
	}
	if fset.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fset.Args())
	}
	s := spec{Name: *name, Layers: layers, Entrypoint: entry, Cmd: cmd, Env: env, User: *user, WorkingDir: *workdir, Owners: map[string][2]int{}, Labels: map[string]string{}}
	if *out == "" || s.Name == "" || len(s.Layers) == 0 {
		return errors.New("--out, --name and at least one --layer are required")
	}
	secs := int64(0)
	if *epoch != "" {
		v, err := strconv.ParseInt(*epoch, 10, 64)
		if err != nil || v < 0 {
			return fmt.Errorf("--epoch %q: not a number of seconds", *epoch)
		}
		secs = v
	}
	s.Epoch = time.Unix(secs, 0).UTC()
	for _, o := range owners {
		p, ids, ok := strings.Cut(o, "=")
		u, g, ok2 := strings.Cut(ids, ":")
		uid, err1 := strconv.Atoi(u)
		gid, err2 := strconv.Atoi(g)
		if !ok || !ok2 || err1 != nil || err2 != nil || uid < 0 || gid < 0 || !path.IsAbs(p) {
			return fmt.Errorf("--owner %q: want /PATH=UID:GID", o)
		}
		s.Owners[path.Clean(p)] = [2]int{uid, gid}
	}
	for _, l := range labels {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			return fmt.Errorf("--label %q: want KEY=VALUE", l)
		}
		s.Labels[k] = v
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("--env %q: want KEY=VALUE", e)
		}
	}
	digest, err := build(s, *out)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s %s\n", *out, s.Name, digest)
	return nil
}

// build writes s's image to out and returns its manifest's digest.
func build(s spec, out string) (v1.Hash, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, dir := range s.Layers {
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return v1.Hash{}, fmt.Errorf("--layer %s: not a directory", dir)
		}
		// The tree is read once up front, so that a file it cannot take
		// fails here, naming it, rather than inside the library.
		if err := writeTree(io.Discard, dir, s); err != nil {
			return v1.Hash{}, err
		}
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTree(pw, dir, s)) }()
			return pr, nil
		}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("layer %s: %w", dir, err)
		}
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   layer,
			History: v1.History{Created: v1.Time{Time: s.Epoch}, CreatedBy: fmt.Sprintf("hoard images: layer %d", i+1)},
		})
		if err != nil {
			return v1.Hash{}, fmt.Errorf("layer %s: %w", dir, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.Hash{}, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: s.Epoch}
	cf.Config.Entrypoint = s.Entrypoint
	cf.Config.Cmd = s.Cmd
	cf.Config.Env = s.Env
	cf.Config.User = s.User
	cf.Config.WorkingDir = s.WorkingDir
	if len(s.Labels) > 0 {
		cf.Config.Labels = s.Labels
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: s.Epoch})
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".oci-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(tmp)
	lp, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	tag := s.Name
	if i := strings.LastIndex(tag, ":"); i > strings.LastIndex(tag, "/") {
		tag = tag[i+1:]
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag,
		"io.containerd.image.name":          s.Name,
	})); err != nil {
		return v1.Hash{}, err
	}
	f, err := os.CreateTemp(filepath.Dir(out), ".archive-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.Remove(f.Name())
	if err := writeTree(f, tmp, spec{Epoch: s.Epoch}); err != nil {
		f.Close()
		return v1.Hash{}, err
	}
	if err := f.Close(); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return v1.Hash{}, err
	}
	return digest, os.Rename(f.Name(), out)
}

// writeTree writes the tree under root to w as a tar whose every entry
// is normalized (see the package comment).
func writeTree(w io.Writer, root string, s spec) error {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: rel, ModTime: s.Epoch, Format: tar.FormatPAX, Mode: int64(st.Mode().Perm())}
		if st.Mode()&fs.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		if st.Mode()&fs.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		if st.Mode()&fs.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		h.Uid, h.Gid = s.owner("/" + rel)
		switch {
		case st.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case st.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, st.Size()
		case st.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, target, 0o777
		default:
			return fmt.Errorf("%s: a %v, which an image layer built here cannot hold", p, st.Mode().Type())
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if n != h.Size {
				return fmt.Errorf("%s: changed while it was read", p)
			}
		}
	}
	return tw.Close()
}

// owner is the uid and gid of the image path p: that of the longest
// --owner path holding it, else root's.
func (s spec) owner(p string) (int, int) {
	best, ids := "", [2]int{}
	for q, v := range s.Owners {
		if (p == q || strings.HasPrefix(p, q+"/") || q == "/") && len(q) > len(best) {
			best, ids = q, v
		}
	}
	return ids[0], ids[1]
}
