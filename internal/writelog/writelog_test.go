package writelog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

func open(t *testing.T, cfg Config) (*Log, []Pending) {
	t.Helper()
	l, p, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, p
}

func rec(i int, size int) Record {
	return Record{Bucket: "b", Key: fmt.Sprintf("k%d", i), Data: bytes.Repeat([]byte{byte(i)}, size),
		Opts: store.PutOptions{ContentType: "text/plain", UserMetadata: map[string]string{"i": fmt.Sprint(i)}}}
}

func appendN(t *testing.T, l *Log, from, n, size int) []uint64 {
	t.Helper()
	var ids []uint64
	for i := from; i < from+n; i++ {
		id, err := l.Append(context.Background(), rec(i, size))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func keys(p []Pending) []string {
	var out []string
	for _, r := range p {
		out = append(out, r.Key)
	}
	return out
}

func TestReplayKeepsWhatIsNotDone(t *testing.T) {
	dir := t.TempDir()
	l, p := open(t, Config{Dir: dir})
	if len(p) != 0 {
		t.Fatalf("new log pending %v", keys(p))
	}
	ids := appendN(t, l, 0, 5, 100)
	l.Done(ids[1])
	l.Done(ids[3])
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l2, p := open(t, Config{Dir: dir})
	if got := fmt.Sprint(keys(p)); got != "[k0 k2 k4]" {
		t.Fatalf("pending %s, want [k0 k2 k4]", got)
	}
	want := rec(2, 100)
	if p[1].ID != ids[2] || !bytes.Equal(p[1].Data, want.Data) || p[1].Opts.ContentType != "text/plain" || p[1].Opts.UserMetadata["i"] != "2" {
		t.Fatalf("record replayed as %+v", p[1])
	}
	// New IDs continue above the old ones; marking the replayed ones
	// done leaves nothing.
	id, err := l2.Append(context.Background(), rec(9, 10))
	if err != nil || id <= ids[4] {
		t.Fatalf("append after reopen: id %d (last %d), %v", id, ids[4], err)
	}
	for _, r := range p {
		l2.Done(r.ID)
	}
	l2.Done(id)
	if err := l2.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	_, p = open(t, Config{Dir: dir})
	if len(p) != 0 {
		t.Fatalf("pending after all done: %v", keys(p))
	}
}

// lastSegment is the path of the newest segment file in dir.
func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(m)
	if len(m) == 0 {
		t.Fatal("no segment")
	}
	return m[len(m)-1]
}

func TestTornTailIsDropped(t *testing.T) {
	for _, cut := range []int{1, 7, 8, 30, 150} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			dir := t.TempDir()
			l, _ := open(t, Config{Dir: dir})
			appendN(t, l, 0, 3, 100)
			l.Close()
			seg := lastSegment(t, dir)
			b, _ := os.ReadFile(seg)
			// The third record lost its last bytes in a crash.
			if err := os.WriteFile(seg, b[:len(b)-cut], 0o600); err != nil {
				t.Fatal(err)
			}
			l2, p := open(t, Config{Dir: dir})
			if got := fmt.Sprint(keys(p)); got != "[k0 k1]" {
				t.Fatalf("pending %s, want [k0 k1]", got)
			}
			if s := l2.Stats(); s.Torn != 1 || s.Corrupt != 0 {
				t.Fatalf("stats %+v, want one torn frame", s)
			}
			// The log goes on in a new segment and keeps everything.
			appendN(t, l2, 5, 1, 10)
			l2.Close()
			_, p = open(t, Config{Dir: dir})
			if got := fmt.Sprint(keys(p)); got != "[k0 k1 k5]" {
				t.Fatalf("pending %s after another open, want [k0 k1 k5]", got)
			}
		})
	}
}

func TestCorruptionIsDetected(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir})
	appendN(t, l, 0, 3, 100)
	l.Close()
	seg := lastSegment(t, dir)
	b, _ := os.ReadFile(seg)
	frame := len(b) / 3
	b[frame+60] ^= 0x10 // a bit of the second record's bytes flips
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A later segment makes the damaged one an older one.
	l2, p := open(t, Config{Dir: dir})
	appendN(t, l2, 7, 1, 10)
	l2.Close()
	if got := fmt.Sprint(keys(p)); got != "[k0]" {
		t.Fatalf("pending %s, want [k0]: nothing after a bad checksum is trusted", got)
	}
	l3, p := open(t, Config{Dir: dir})
	if got := fmt.Sprint(keys(p)); got != "[k0 k7]" {
		t.Fatalf("pending %s, want [k0 k7]", got)
	}
	if s := l3.Stats(); s.Corrupt != 1 || s.Torn != 0 {
		t.Fatalf("stats %+v, want one damaged frame in an older segment", s)
	}
	for _, r := range p {
		if !bytes.Equal(r.Data, rec(map[string]int{"k0": 0, "k7": 7}[r.Key], len(r.Data)).Data) {
			t.Fatalf("%s replayed with wrong bytes", r.Key)
		}
	}
}

func TestDoneSegmentsAreRemoved(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir, SegmentBytes: 1000})
	var ids []uint64
	for i := range 20 {
		ids = append(ids, appendN(t, l, i, 1, 300)...)
	}
	if s := l.Stats(); s.Segments < 5 {
		t.Fatalf("%d segments for 20 records of 300 bytes with 1000-byte segments", s.Segments)
	}
	// The first record pins every segment after it until it is done.
	for _, id := range ids[1:] {
		l.Done(id)
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := l.Stats(); s.Segments < 5 {
		t.Fatalf("segments removed out of order: %d left", s.Segments)
	}
	l.Done(ids[0])
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := l.Stats()
	if s.Segments != 1 || s.LiveRecords != 0 || s.LiveBytes != 0 {
		t.Fatalf("after every record done: %+v, want one segment and nothing live", s)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(files) != 1 {
		t.Fatalf("files on disk: %v", files)
	}
	l.Close()
	_, p := open(t, Config{Dir: dir})
	if len(p) != 0 {
		t.Fatalf("pending %v", keys(p))
	}
}

func TestBound(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir, MaxBytes: 4000})
	if _, err := l.Append(context.Background(), rec(0, 4000)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a record over the bound: %v, want ErrTooLarge", err)
	}
	ids := appendN(t, l, 0, 2, 1200)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := l.Append(ctx, rec(2, 1500)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append with the log full: %v, want it to wait until its deadline", err)
	}
	if s := l.Stats(); s.LiveRecords != 2 {
		t.Fatalf("a refused append left %d live records", s.LiveRecords)
	}
	// Room made while it waits lets it through.
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err = l.Append(context.Background(), rec(3, 1500))
	}()
	l.Done(ids[0])
	l.Done(ids[1])
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
}

func TestGroupCommit(t *testing.T) {
	l, _ := open(t, Config{Dir: t.TempDir()})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Append(context.Background(), rec(i, 4096)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s := l.Stats()
	if s.Appends != 64 || s.Syncs > 64 {
		t.Fatalf("stats %+v", s)
	}
	t.Logf("64 concurrent appends in %d fsyncs", s.Syncs)
}

func TestClosed(t *testing.T) {
	l, _ := open(t, Config{Dir: t.TempDir()})
	l.Close()
	if _, err := l.Append(context.Background(), rec(0, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOneAtATime(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir})
	if _, _, err := Open(Config{Dir: dir}); !errors.Is(err, ErrInUse) {
		t.Fatalf("second open: %v, want ErrInUse", err)
	}
	l.Close()
	open(t, Config{Dir: dir})
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{}, {Dir: "x", MaxBytes: -1}, {Dir: "x", SegmentBytes: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestRecordVersions: a put keeps the version it makes and the versions
// it may replace ("" for none); a record without them (as an older log
// wrote it) reads as one whose base is unknown.
func TestRecordVersions(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir})
	a := rec(1, 10)
	a.ETag, a.Replaces = "e1", []string{"", "e0"}
	b := rec(2, 10)
	b.ETag = "e2" // unknown base
	for _, r := range []Record{a, b} {
		if _, err := l.Append(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	bad := rec(3, 10)
	bad.Replaces = []string{}
	if _, err := l.Append(context.Background(), bad); err == nil {
		t.Fatal("a known base naming no version was logged")
	}
	l.Close()
	// A put as the format wrote it before versions were kept.
	old := []byte(`{"b":"b","k":"old","o":{}}`)
	frame := make([]byte, 8+9+4+len(old)+3)
	binary.BigEndian.PutUint32(frame, uint32(len(frame)-8))
	frame[8] = kindPut
	binary.BigEndian.PutUint64(frame[9:], 100)
	binary.BigEndian.PutUint32(frame[17:], uint32(len(old)))
	copy(frame[21:], old)
	copy(frame[21+len(old):], "old")
	putCRC(frame)
	if err := os.WriteFile(filepath.Join(dir, segName(99)), frame, 0o600); err != nil {
		t.Fatal(err)
	}
	_, p := open(t, Config{Dir: dir})
	if len(p) != 3 {
		t.Fatalf("%d pending, want 3", len(p))
	}
	byKey := map[string]Pending{}
	for _, r := range p {
		byKey[r.Key] = r
	}
	if r := byKey["k1"]; r.ETag != "e1" || fmt.Sprint(r.Replaces) != "[ e0]" || len(r.Replaces) != 2 {
		t.Fatalf("k1 read back as etag %q replaces %q", r.ETag, r.Replaces)
	}
	if r := byKey["k2"]; r.ETag != "e2" || r.Replaces != nil {
		t.Fatalf("k2 read back as etag %q replaces %q, want an unknown base", r.ETag, r.Replaces)
	}
	if r := byKey["old"]; r.ETag != "" || r.Replaces != nil || string(r.Data) != "old" || r.ID != 100 {
		t.Fatalf("an older record read back as %+v", r)
	}
}

// A backup record comes back from Open as such, naming its owner, apart
// from the log's own puts; done, it is gone like a put.
func TestBackupRecordsReplayAsBackups(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, Config{Dir: dir})
	own := appendN(t, l, 0, 1, 10)
	b := rec(1, 20)
	b.ETag, b.Replaces = "e1", []string{""}
	b.Backup = &BackupOf{Owner: "app-1", Incarnation: 7, Seq: 42}
	bid, err := l.Append(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	b2 := rec(2, 20)
	b2.Backup = &BackupOf{Owner: "app-2", Incarnation: 1, Seq: 1}
	done, err := l.Append(context.Background(), b2)
	if err != nil {
		t.Fatal(err)
	}
	l.Done(done)
	if _, err := l.Append(context.Background(), Record{Bucket: "b", Key: "x", Backup: &BackupOf{}}); err == nil {
		t.Fatal("a backup record without its owner was logged")
	}
	l.Close()
	_, p := open(t, Config{Dir: dir})
	if len(p) != 2 || p[0].ID != own[0] || p[0].Backup != nil || p[1].ID != bid {
		t.Fatalf("pending %+v", p)
	}
	got := p[1]
	if got.Backup == nil || *got.Backup != (BackupOf{Owner: "app-1", Incarnation: 7, Seq: 42}) ||
		got.Key != "k1" || !bytes.Equal(got.Data, b.Data) || got.ETag != "e1" || len(got.Replaces) != 1 {
		t.Fatalf("backup record came back as %+v", got)
	}
}
