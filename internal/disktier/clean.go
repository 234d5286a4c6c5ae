package disktier

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hoard-io/hoard/internal/diskindex"
)

// tmpMaxAge is how old a temporary file must be before a cleaner removes
// it: younger ones may be another process's write in progress.
const tmpMaxAge = 10 * time.Minute

// cleaner rescans the directory every CleanInterval until Close.
func (t *Tier) cleaner() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			return
		case <-t.cfg.Clock.After(t.cfg.CleanInterval):
			t.clean()
		}
	}
}

// file is one file found by a scan.
type file struct {
	name string
	size int64
	used time.Time
}

// clean rebuilds the index from the directory (what every instance
// sharing it wrote, with the recency their reads left in the files'
// mtimes), removes files past MaxAge, then the least recently used until
// the files fit the budget, and temporary files left by a crash.
func (t *Tier) clean() {
	start := t.cfg.Clock.Now()
	files := t.scan()
	sort.Slice(files, func(i, j int) bool { return files[i].used.Before(files[j].used) })
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := diskindex.New(t.cfg.Budget)
	for _, f := range files {
		idx.Put(f.name, f.size, f.used)
	}
	t.idx = idx
	for name := range t.known {
		if !idx.Has(name) {
			delete(t.known, name)
		}
	}
	if t.cfg.MaxAge > 0 {
		for _, name := range idx.Older(start.Add(-t.cfg.MaxAge)) {
			t.drop(name, "age")
		}
	}
	for _, name := range idx.Over(0) {
		t.drop(name, "budget")
	}
	t.m.cleanSeconds.Observe(t.cfg.Clock.Now().Sub(start).Seconds())
}

// scan lists the tier's files, and removes stale temporary files.
func (t *Tier) scan() []file {
	var files []file
	root := filepath.Join(t.cfg.Dir, objectsDir)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root {
				return err
			}
			return nil // gone meanwhile
		}
		if d.IsDir() || !validName(d.Name()) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		files = append(files, file{name: d.Name(), size: fi.Size(), used: fi.ModTime()})
		return nil
	})
	if err != nil {
		t.fail("scan", err)
	}
	tmp := filepath.Join(t.cfg.Dir, tmpDir)
	if ents, err := os.ReadDir(tmp); err == nil {
		cutoff := t.cfg.Clock.Now().Add(-tmpMaxAge)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.ModTime().Before(cutoff) {
				os.Remove(filepath.Join(tmp, e.Name()))
			}
		}
	}
	return files
}
