package disktier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// job is one object to write.
type job struct {
	name, bucket, key string
	info              store.ObjectInfo
	body              io.ReadCloser
	held              bool // counted in Tier.held (a queued spill)
	cancelled         bool // guarded by Tier.mu: Remove made it obsolete
}

// Spill offers an object leaving memory: if it is worth a file and there
// is room for it in the queue, the tier takes it and writes it in the
// background. It takes body (closing it once written or dropped) and
// reports whether it queued it. It never blocks; the caller may hold
// locks (the cache calls it on eviction).
func (t *Tier) Spill(bucket, key string, info store.ObjectInfo, body io.ReadCloser) bool {
	j := &job{name: nameOf(bucket, key), bucket: bucket, key: key, info: info, body: body}
	if reason := t.refuse(j, true); reason != "" {
		body.Close()
		t.m.spills.WithLabelValues(reason).Inc()
		return false
	}
	select {
	case t.queue <- j:
		return true
	default:
		t.finish(j)
		t.m.spills.WithLabelValues("busy").Inc()
		return false
	}
}

// SpillMax is the largest object Spill can take: evicted objects wait in
// memory for their write, within PendingBytes together. The cachelet
// writes larger ones when they come into memory instead (Write), so that
// their eviction finds them on disk.
func (t *Tier) SpillMax() int64 { return t.cfg.PendingBytes }

// refuse says why j is not written ("" when it is, and then registers
// it as pending; hold counts its bytes against PendingBytes).
func (t *Tier) refuse(j *job, hold bool) string {
	size := j.info.Size
	if size < t.cfg.MinObjectSize {
		return "small"
	}
	if size > t.cfg.Budget || j.info.ETag == "" {
		return "unfit"
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.stop:
		return "closed"
	default:
	}
	switch {
	case t.isDegraded():
		return "degraded"
	case t.known[j.name].etag == j.info.ETag && t.idx.Has(j.name):
		return "known" // on disk already: this copy came from there
	case t.pending[j.name] != nil:
		return "busy"
	case hold && t.held+size > t.cfg.PendingBytes:
		return "busy"
	}
	if hold {
		t.held += size
		j.held = true
	}
	t.pending[j.name] = j
	return ""
}

// finish ends a job: its body is closed and it leaves the pending set.
func (t *Tier) finish(j *job) {
	j.body.Close()
	t.mu.Lock()
	if t.pending[j.name] == j {
		delete(t.pending, j.name)
	}
	if j.held {
		t.held -= j.info.Size
		j.held = false
	}
	t.settled.Broadcast()
	t.mu.Unlock()
}

// writer writes queued spills one at a time until Close, then what is
// still queued for at most closeDrain (an instance unloading keeps what
// it evicted last).
func (t *Tier) writer() {
	defer t.wg.Done()
	for {
		select {
		case <-t.stop:
			deadline := t.cfg.Clock.Now().Add(closeDrain)
			for {
				select {
				case j := <-t.queue:
					if t.cfg.Clock.Now().Before(deadline) {
						t.write(j)
					} else {
						t.finish(j)
					}
				default:
					return
				}
			}
		case j := <-t.queue:
			t.write(j) // its error is counted and logged
		}
	}
}

// closeDrain bounds the writes of what is queued at Close.
const closeDrain = 5 * time.Second

// errShort: a body ended before its object's size.
var errShort = errors.New("body shorter than the object")

// write writes j to a temporary file and renames it into place, unless a
// Remove cancelled it meanwhile; then it keeps the budget.
func (t *Tier) write(j *job) error {
	defer t.finish(j)
	tmp, size, err := t.writeTemp(j)
	if err != nil {
		t.m.spills.WithLabelValues("failed").Inc()
		if !errors.Is(err, errShort) {
			t.fail("write", err)
		}
		return err
	}
	if err := t.place(j, tmp, size); err != nil {
		os.Remove(tmp)
		if errors.Is(err, errCancelled) {
			t.m.spills.WithLabelValues("cancelled").Inc()
			return err
		}
		t.m.spills.WithLabelValues("failed").Inc()
		t.fail("write", err)
		return err
	}
	t.m.spills.WithLabelValues("written").Inc()
	return nil
}

// errCancelled: a Remove made a spill obsolete while it was written.
var errCancelled = errors.New("disktier: removed while being written")

// place renames a written file into place and indexes it, under the lock
// that orders it with Remove.
func (t *Tier) place(j *job, tmp string, size int64) error {
	final := t.path(j.name)
	t.mu.Lock()
	defer t.mu.Unlock()
	if j.cancelled {
		return errCancelled
	}
	if err := t.mkdir(filepath.Dir(final)); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	t.idx.Put(j.name, size, t.cfg.Clock.Now())
	t.known[j.name] = knownFile{bucket: j.bucket, key: j.key, etag: j.info.ETag}
	for _, name := range t.idx.Over(0) {
		t.drop(name, "budget")
	}
	return nil
}

// writeTemp writes j's file under tmp/ and returns its path and size.
func (t *Tier) writeTemp(j *job) (string, int64, error) {
	head, err := encodeHeader(header{Bucket: j.bucket, Key: j.key, Size: j.info.Size, Info: j.info})
	if err != nil {
		return "", 0, fmt.Errorf("%w: %w", errShort, err)
	}
	f, err := os.CreateTemp(filepath.Join(t.cfg.Dir, tmpDir), "w-*")
	if err != nil {
		return "", 0, err
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(head); err != nil {
		return "", 0, err
	}
	crc := crc32.New(castagnoli)
	n, err := io.Copy(io.MultiWriter(f, crc), io.LimitReader(j.body, j.info.Size))
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", 0, err // the file's
		}
		return "", 0, fmt.Errorf("%w: %w", errShort, err) // the body's
	}
	if n != j.info.Size {
		return "", 0, errShort
	}
	if _, err := f.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return "", 0, err
	}
	if t.cfg.Group {
		if err := f.Chmod(0o640); err != nil { // readable by the other instances
			return "", 0, err
		}
	}
	if t.cfg.Fsync {
		if err := f.Sync(); err != nil {
			return "", 0, err
		}
	}
	if err := f.Close(); err != nil {
		return "", 0, err
	}
	ok = true
	return f.Name(), int64(len(head)) + n + trailerLen, nil
}
