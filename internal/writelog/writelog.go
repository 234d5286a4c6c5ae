// Package writelog is the durable log of the writes a cachelet holds
// before the store has them (the `durable_writes` setting, ADR 0030): a
// write is appended and fsynced before it is acknowledged, marked done
// once the store has it, and replayed by the next process that opens the
// log after a crash.
//
// On disk the log is a directory of numbered segment files, written in
// order and never rewritten. Each holds frames: a 4-byte length, the
// CRC32C of the payload, the payload. A payload is a put record (its
// sequence number, bucket, key, options, the version it makes, the store
// versions it may replace, and its bytes) or a done record (the sequence
// numbers of puts the store has, or no longer needs), or a backup record
// (a put that copies another cachelet's write, naming that owner: the
// second copy of `durable_writes: replicated`; a frame kind of its own,
// which a reader that does not know it counts as damage and never
// replays as its own write). A put logged before
// the versions were kept reads as one whose base is unknown. A frame whose checksum does not
// match ends its segment: at the tail of the newest segment it is a write
// torn by a crash, which was never acknowledged; anywhere else it is
// damage, counted and logged. A segment is removed once every put in it
// is done and every older segment is gone, so a done record never
// outlives a put it refers to being removed out of order.
//
// Group commit: appends and done marks that arrive while a batch is being
// written and fsynced go together in the next batch, one write and one
// fsync (File.Sync) for all of them.
package writelog

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/store"
)

// Defaults of Config.
const (
	DefaultMaxBytes     = cacheconfig.DurableLogMaxBytes
	DefaultSegmentBytes = 32 << 20
)

var (
	// ErrClosed is returned by Append and Sync once Close began.
	ErrClosed = errors.New("writelog: closed")
	// ErrTooLarge is returned by Append for a record larger than the
	// log's bound: it can never be held.
	ErrTooLarge = errors.New("writelog: record larger than the log's bound")
	// ErrBroken wraps the error of a failed write or fsync: the log then
	// refuses every later append, as it can no longer say what is on
	// disk.
	ErrBroken = errors.New("writelog: log failed")
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Config configures a Log.
type Config struct {
	// Dir is the log's directory (made 0700). Required. One process at a
	// time may hold it open.
	Dir string
	// MaxBytes bounds the bytes of the records not yet done (frames
	// included): an append that would pass it waits for room. Default
	// DefaultMaxBytes (256 MiB).
	MaxBytes int64
	// SegmentBytes is the size past which a new segment is begun.
	// Default DefaultSegmentBytes (32 MiB).
	SegmentBytes int64
	// Logger receives damage found on open. Default: discard.
	Logger *slog.Logger
	// Registerer, if set, receives the hoard_writelog_* metrics.
	Registerer prometheus.Registerer
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.Dir == "" {
		return errors.New("writelog: a directory is required")
	}
	if c.MaxBytes < 0 || c.SegmentBytes < 0 {
		return errors.New("writelog: sizes must not be negative")
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultMaxBytes
	}
	if c.SegmentBytes == 0 {
		c.SegmentBytes = DefaultSegmentBytes
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Record is one write held until the store has it.
type Record struct {
	Bucket, Key string
	Opts        store.PutOptions
	// Data is the whole object. Append neither keeps nor modifies it
	// after it returns.
	Data []byte
	// ETag is the version the write makes, as it was acknowledged (the
	// body's MD5 in hex); empty in records logged before it was kept.
	ETag string
	// Replaces are the store versions (ETags, "" for no object) the
	// write may replace, as the writer knew the key when it logged it:
	// a replay puts the record only over one of them (or its own). nil
	// when the writer did not know, and in records logged before it was
	// kept; never empty otherwise.
	Replaces []string
	// Backup, when set, makes this a backup record: a copy of a write
	// another cachelet (the owner) holds and logged, kept here so that
	// the write survives the loss of the owner's node
	// (`durable_writes: replicated`). Its frame is of its own kind, so
	// that a binary that does not know it never replays it as its own.
	Backup *BackupOf
}

// BackupOf names the write a backup record copies: its owner (a member
// ID), the owner's incarnation (its process's start, ordered) and the
// owner's sequence number of the write in that incarnation.
type BackupOf struct {
	Owner       string
	Incarnation uint64
	Seq         uint64
}

// Pending is a record found on open that is not done: the caller must
// persist it and then call Done(ID).
type Pending struct {
	ID uint64
	Record
}

// Stats is a snapshot of a log's state and counters.
type Stats struct {
	LiveRecords, LiveBytes int64 // appended and not done
	Segments               int   // files on disk
	Appends, Syncs         uint64
	Torn, Corrupt          uint64 // frames dropped on open
}

// appendReq is one append waiting for its batch.
type appendReq struct {
	frame []byte
	id    uint64
	done  chan error
}

// segment is one file of the log.
type segment struct {
	n    uint64
	f    *os.File // the current segment's; nil for older ones
	size int64
	live int // puts not done
}

// Log is a durable append-only log of writes. Its methods are safe for
// concurrent use.
type Log struct {
	cfg  Config
	m    *metrics
	lock *os.File // holds the directory's lock

	mu       sync.Mutex
	cond     *sync.Cond // work for the committer, room, or a batch written
	closing  bool
	broken   error
	nextID   uint64
	live     map[uint64]liveRec // puts not done, by ID
	liveB    int64
	segs     []*segment // oldest first; the last is current
	appends  []*appendReq
	marks    []uint64
	syncReq  bool
	taken    uint64 // batches begun
	flushed  uint64 // batches written and fsynced
	stats    Stats
	loopDone chan struct{}
}

type liveRec struct {
	seg  *segment
	size int64
}

// Open opens (or creates) the log in cfg.Dir, reads it, and returns the
// records not done, oldest first, which the caller must persist and mark
// done. It starts the committer; Close stops it.
func Open(cfg Config) (*Log, []Pending, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("writelog: %w", err)
	}
	lock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, nil, err
	}
	l := &Log{cfg: cfg, lock: lock, live: map[uint64]liveRec{}, loopDone: make(chan struct{})}
	l.cond = sync.NewCond(&l.mu)
	pending, err := l.replay()
	if err == nil {
		// Appends go to a fresh segment: the newest one may end in a
		// torn frame, after which nothing may be written.
		var n uint64 = 1
		if len(l.segs) > 0 {
			n = l.segs[len(l.segs)-1].n + 1
		}
		err = l.begin(n)
	}
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	l.removeDone()
	l.m = newMetrics(cfg.Registerer, l)
	go l.loop()
	return l, pending, nil
}

func segName(n uint64) string { return fmt.Sprintf("%016d.log", n) }

// replay reads every segment, oldest first.
func (l *Log) replay() ([]Pending, error) {
	ents, err := os.ReadDir(l.cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("writelog: %w", err)
	}
	var ns []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".log")
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if n, err := strconv.ParseUint(name, 10, 64); err == nil && n > 0 {
			ns = append(ns, n)
		}
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	puts := map[uint64]Pending{}
	for i, n := range ns {
		b, err := os.ReadFile(filepath.Join(l.cfg.Dir, segName(n)))
		if err != nil {
			return nil, fmt.Errorf("writelog: %w", err)
		}
		seg := &segment{n: n, size: int64(len(b))}
		l.segs = append(l.segs, seg)
		for off := 0; off < len(b); {
			payload, next, ok := readFrame(b[off:])
			if !ok {
				if i == len(ns)-1 {
					l.stats.Torn++
					l.cfg.Logger.Info("writelog: dropped a torn frame at the log's end (never acknowledged)",
						"segment", segName(n), "offset", off, "bytes", len(b)-off)
				} else {
					l.stats.Corrupt++
					l.cfg.Logger.Error("writelog: damaged frame: the rest of the segment is lost",
						"segment", segName(n), "offset", off, "bytes", len(b)-off)
				}
				break
			}
			frameLen := int64(next)
			off += next
			kind, id, body, err := decodePayload(payload)
			if err != nil {
				l.stats.Corrupt++
				l.cfg.Logger.Error("writelog: undecodable record", "segment", segName(n), "err", err)
				continue
			}
			l.nextID = max(l.nextID, id)
			switch kind {
			case kindPut, kindBackup:
				rec, err := decodePut(body, kind == kindBackup)
				if err != nil {
					l.stats.Corrupt++
					l.cfg.Logger.Error("writelog: undecodable put", "segment", segName(n), "err", err)
					continue
				}
				puts[id] = Pending{ID: id, Record: rec}
				l.live[id] = liveRec{seg: seg, size: frameLen}
				seg.live++
				l.liveB += frameLen
			case kindDone:
				for len(body) >= 8 {
					d := binary.BigEndian.Uint64(body)
					body = body[8:]
					if r, ok := l.live[d]; ok {
						r.seg.live--
						l.liveB -= r.size
						delete(l.live, d)
						delete(puts, d)
					}
				}
			}
		}
	}
	out := make([]Pending, 0, len(puts))
	for _, p := range puts {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// begin opens segment n as the current one. l.mu is held or the
// committer is not running.
func (l *Log) begin(n uint64) error {
	f, err := os.OpenFile(filepath.Join(l.cfg.Dir, segName(n)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("writelog: %w", err)
	}
	if err := syncDir(l.cfg.Dir); err != nil {
		f.Close()
		return fmt.Errorf("writelog: %w", err)
	}
	if len(l.segs) > 0 {
		if cur := l.segs[len(l.segs)-1]; cur.f != nil {
			cur.f.Close()
			cur.f = nil
		}
	}
	l.segs = append(l.segs, &segment{n: n, f: f})
	return nil
}

// removeDone removes the oldest segments while every put in them is done
// (never the current one), in order. l.mu is held or the committer is
// not running.
func (l *Log) removeDone() {
	removed := false
	for len(l.segs) > 1 && l.segs[0].live == 0 {
		if err := os.Remove(filepath.Join(l.cfg.Dir, segName(l.segs[0].n))); err != nil && !errors.Is(err, os.ErrNotExist) {
			l.cfg.Logger.Warn("writelog: could not remove a done segment", "segment", segName(l.segs[0].n), "err", err)
			break
		}
		l.segs = l.segs[1:]
		removed = true
	}
	if removed {
		// The removals are durable before any later one: a segment
		// that came back after a crash would replay its puts only if
		// the done records naming them were gone too, and those are
		// in later segments, removed later.
		_ = syncDir(l.cfg.Dir)
	}
}

// ErrInUse is returned by Open when another process (or Log) holds the
// directory.
var ErrInUse = errors.New("writelog: the log is open elsewhere")

// lockDir takes the directory's exclusive lock (flock on its LOCK file),
// which the kernel releases when the process dies.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("writelog: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrInUse, dir)
		}
		return nil, fmt.Errorf("writelog: locking %s: %w", dir, err)
	}
	return f, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Append writes r to the log and returns once it is on disk (fsynced),
// with the ID to pass to Done once the store has it. While the records
// not done hold MaxBytes it waits for room, until ctx ends (ctx's error).
// It returns ErrTooLarge for a record that alone passes the bound,
// ErrClosed once Close began, and an error wrapping ErrBroken when the
// log could not be written.
func (l *Log) Append(ctx context.Context, r Record) (uint64, error) {
	frame, err := encodePut(r)
	if err != nil {
		return 0, err
	}
	size := int64(len(frame))
	if size > l.cfg.MaxBytes {
		return 0, fmt.Errorf("%w: %d bytes, bound %d", ErrTooLarge, size, l.cfg.MaxBytes)
	}
	l.mu.Lock()
	if l.liveB+size > l.cfg.MaxBytes && !l.closing && l.broken == nil {
		l.m.full.Inc()
		stop := context.AfterFunc(ctx, func() {
			l.mu.Lock()
			l.cond.Broadcast()
			l.mu.Unlock()
		})
		for l.liveB+size > l.cfg.MaxBytes && !l.closing && l.broken == nil && ctx.Err() == nil {
			l.cond.Wait()
		}
		stop()
	}
	switch {
	case l.closing:
		l.mu.Unlock()
		return 0, ErrClosed
	case l.broken != nil:
		err := l.broken
		l.mu.Unlock()
		return 0, err
	case ctx.Err() != nil:
		l.mu.Unlock()
		return 0, fmt.Errorf("writelog: waiting for room: %w", ctx.Err())
	}
	l.nextID++
	id := l.nextID
	binary.BigEndian.PutUint64(frame[9:], id) // see encodePut
	putCRC(frame)
	req := &appendReq{frame: frame, id: id, done: make(chan error, 1)}
	l.live[id] = liveRec{size: size} // its segment is set when written
	l.liveB += size
	l.appends = append(l.appends, req)
	l.cond.Broadcast()
	l.mu.Unlock()
	// The append is waited for whatever ctx says: once queued, its
	// bytes may reach the disk, and the caller must know whether they
	// did.
	return id, <-req.done
}

// headerAllowance is what a record's frame may take beyond its bytes
// (Fits): its framing and its metadata, JSON-encoded.
const headerAllowance = 16 << 10

// Fits reports whether an object of size bytes can be held by the log at
// all (its record is not over the bound).
func (l *Log) Fits(size int64) bool { return size+headerAllowance <= l.cfg.MaxBytes }

// Done marks the record id as in the store: it will not be replayed, and
// its room is free at once. The mark reaches the disk with the next batch
// (Sync waits for it). Unknown IDs are ignored. It never blocks on I/O.
func (l *Log) Done(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.live[id]
	if !ok {
		return
	}
	delete(l.live, id)
	l.liveB -= r.size
	if r.seg != nil {
		r.seg.live--
	}
	l.marks = append(l.marks, id)
	l.cond.Broadcast()
}

// Sync waits until every Done mark made before the call is on disk, or
// ctx ends.
func (l *Log) Sync(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return l.broken
	}
	if len(l.marks) == 0 && l.taken == l.flushed {
		return nil
	}
	if l.closing {
		return ErrClosed
	}
	want := l.taken + 1
	l.syncReq = true
	l.cond.Broadcast()
	stop := context.AfterFunc(ctx, func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop()
	for l.flushed < want && l.broken == nil && ctx.Err() == nil && !(l.closing && l.taken < want) {
		l.cond.Wait()
	}
	switch {
	case l.flushed >= want:
		return nil
	case l.broken != nil:
		return l.broken
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return ErrClosed
}

// Close writes what is queued, stops the committer and closes the files.
// Records not done stay on disk for the next Open. Idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		<-l.loopDone
		return nil
	}
	l.closing = true
	l.cond.Broadcast()
	l.mu.Unlock()
	<-l.loopDone
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.segs {
		if s.f != nil {
			s.f.Close()
			s.f = nil
		}
	}
	if l.lock != nil {
		l.lock.Close() // releases the lock
		l.lock = nil
	}
	return l.broken
}

// Stats returns a snapshot.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.LiveRecords, s.LiveBytes, s.Segments = int64(len(l.live)), l.liveB, len(l.segs)
	return s
}

// loop is the committer: it writes each batch with one write and one
// fsync.
func (l *Log) loop() {
	defer close(l.loopDone)
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		for len(l.appends) == 0 && len(l.marks) == 0 && !l.syncReq && !l.closing {
			l.cond.Wait()
		}
		if len(l.appends) == 0 && len(l.marks) == 0 && !l.syncReq {
			return // closing, nothing left
		}
		if l.broken != nil {
			for _, a := range l.appends {
				a.done <- l.broken
			}
			l.appends, l.marks, l.syncReq = nil, nil, false
			l.cond.Broadcast()
			if l.closing {
				return
			}
			continue
		}
		appends, marks := l.appends, l.marks
		l.appends, l.marks, l.syncReq = nil, nil, false
		l.taken++
		cur := l.segs[len(l.segs)-1]
		rotate := cur.size >= l.cfg.SegmentBytes
		l.mu.Unlock()

		var err error
		if rotate {
			l.mu.Lock()
			err = l.begin(cur.n + 1)
			cur = l.segs[len(l.segs)-1]
			l.mu.Unlock()
		}
		var buf []byte
		for _, a := range appends {
			buf = append(buf, a.frame...)
		}
		if len(marks) > 0 {
			buf = append(buf, encodeDone(marks)...)
		}
		if err == nil && len(buf) > 0 {
			_, err = cur.f.Write(buf)
		}
		if err == nil {
			err = cur.f.Sync()
		}

		l.mu.Lock()
		l.stats.Syncs++
		if err != nil {
			l.broken = fmt.Errorf("%w: %v", ErrBroken, err)
			l.cfg.Logger.Error("writelog: write failed; refusing appends from now on", "err", err)
		} else {
			cur.size += int64(len(buf))
		}
		for _, a := range appends {
			if err != nil {
				if r, ok := l.live[a.id]; ok {
					delete(l.live, a.id)
					l.liveB -= r.size
				}
				a.done <- l.broken
				continue
			}
			l.stats.Appends++
			if r, ok := l.live[a.id]; ok { // not marked done meanwhile
				r.seg = cur
				l.live[a.id] = r
				cur.live++
			}
			a.done <- nil
		}
		l.flushed++
		if err == nil {
			l.removeDone()
		}
		l.cond.Broadcast()
	}
}

// The frame: length (4 bytes, of the payload), CRC32C of the payload (4),
// payload. The payload: kind (1), ID (8), body.
const (
	kindPut    = 1
	kindDone   = 2
	kindBackup = 3 // a put that copies another cachelet's write (Record.Backup)
)

func readFrame(b []byte) (payload []byte, n int, ok bool) {
	if len(b) < 8 {
		return nil, 0, false
	}
	ln := int(binary.BigEndian.Uint32(b))
	if ln < 9 || ln > len(b)-8 {
		return nil, 0, false
	}
	payload = b[8 : 8+ln]
	if crc32.Checksum(payload, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return nil, 0, false
	}
	return payload, 8 + ln, true
}

func decodePayload(p []byte) (kind byte, id uint64, body []byte, err error) {
	if len(p) < 9 {
		return 0, 0, nil, errors.New("short payload")
	}
	kind, id, body = p[0], binary.BigEndian.Uint64(p[1:]), p[9:]
	if kind != kindPut && kind != kindDone && kind != kindBackup {
		return 0, 0, nil, fmt.Errorf("unknown record kind %d", kind)
	}
	return kind, id, body, nil
}

// putHeader is a put's metadata, JSON-encoded before its bytes.
// The fields e and r came later: a header without them (an older log)
// reads as a record whose base is unknown, and an older reader ignores
// them.
type putHeader struct {
	Bucket   string           `json:"b"`
	Key      string           `json:"k"`
	Opts     store.PutOptions `json:"o"`
	ETag     string           `json:"e,omitempty"`
	Replaces []string         `json:"r,omitempty"`
	// A backup record's (kindBackup) owner, incarnation and sequence.
	Owner       string `json:"bo,omitempty"`
	Incarnation uint64 `json:"bi,omitempty"`
	Seq         uint64 `json:"bs,omitempty"`
}

// encodePut returns r's frame with its ID (bytes 9-16) and CRC (4-8)
// still to fill in (putCRC).
func encodePut(r Record) ([]byte, error) {
	if r.Replaces != nil && len(r.Replaces) == 0 {
		return nil, errors.New("writelog: a known base names at least one version")
	}
	ph := putHeader{Bucket: r.Bucket, Key: r.Key, Opts: r.Opts, ETag: r.ETag, Replaces: r.Replaces}
	kind := byte(kindPut)
	if b := r.Backup; b != nil {
		if b.Owner == "" {
			return nil, errors.New("writelog: a backup record names its owner")
		}
		kind, ph.Owner, ph.Incarnation, ph.Seq = kindBackup, b.Owner, b.Incarnation, b.Seq
	}
	h, err := json.Marshal(ph)
	if err != nil {
		return nil, fmt.Errorf("writelog: %w", err)
	}
	ln := 9 + 4 + len(h) + len(r.Data)
	if uint64(ln) > 1<<32-1 {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, ln)
	}
	f := make([]byte, 8+ln)
	binary.BigEndian.PutUint32(f, uint32(ln))
	f[8] = kind
	binary.BigEndian.PutUint32(f[17:], uint32(len(h)))
	copy(f[21:], h)
	copy(f[21+len(h):], r.Data)
	return f, nil
}

func putCRC(f []byte) {
	binary.BigEndian.PutUint32(f[4:], crc32.Checksum(f[8:], castagnoli))
}

func decodePut(body []byte, backup bool) (Record, error) {
	if len(body) < 4 {
		return Record{}, errors.New("short put")
	}
	hl := int(binary.BigEndian.Uint32(body))
	if hl > len(body)-4 {
		return Record{}, errors.New("put header past its frame")
	}
	var h putHeader
	if err := json.Unmarshal(body[4:4+hl], &h); err != nil {
		return Record{}, err
	}
	data := body[4+hl:]
	if h.Replaces != nil && len(h.Replaces) == 0 {
		h.Replaces = nil // as written: unknown
	}
	r := Record{Bucket: h.Bucket, Key: h.Key, Opts: h.Opts, Data: data, ETag: h.ETag, Replaces: h.Replaces}
	if backup {
		if h.Owner == "" {
			return Record{}, errors.New("backup record without its owner")
		}
		r.Backup = &BackupOf{Owner: h.Owner, Incarnation: h.Incarnation, Seq: h.Seq}
	}
	return r, nil
}

func encodeDone(ids []uint64) []byte {
	ln := 9 + 8*len(ids)
	f := make([]byte, 8+ln)
	binary.BigEndian.PutUint32(f, uint32(ln))
	f[8] = kindDone
	for i, id := range ids {
		binary.BigEndian.PutUint64(f[17+8*i:], id)
	}
	putCRC(f)
	return f
}
