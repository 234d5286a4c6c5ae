package sim

import (
	"container/heap"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/prewarm"
)

// Records reads hoard's own access metadata: prewarm.Record documents, as
// the node agent saves one per unload, one after another (concatenated or
// one per line: `cat` the saved files in name order, which is unload
// order). A record counts accesses per object rather than listing them,
// so the accesses are reconstructed: each object's writes (Out) and then
// its reads, evenly spaced by its mean gap between reads and ending at its
// last access, none before the previous record's unload. Events are made
// lazily, one object's next access at a time, so memory grows with a
// record's objects, not its accesses.
type Records struct {
	dec   *json.Decoder
	n     int       // records read
	floor time.Time // the previous record's unload
	app   string
	queue accessQueue
}

// NewRecords returns the Source of the records r holds.
func NewRecords(r io.Reader) *Records { return &Records{dec: json.NewDecoder(r)} }

// Next implements Source.
func (r *Records) Next() (Event, error) {
	for len(r.queue) == 0 {
		if err := r.read(); err != nil {
			return Event{}, err
		}
	}
	a := r.queue[0]
	e := Event{Time: a.at, Kind: Read, App: r.app, Bucket: a.o.Bucket, Key: a.o.Key, Size: a.o.Size, Version: a.o.ETag}
	if a.i < a.o.Out {
		e.Kind = Write
	}
	a.i++
	if a.i == a.n {
		heap.Pop(&r.queue)
	} else {
		a.at = a.time(a.i)
		heap.Fix(&r.queue, 0)
	}
	return e, nil
}

// read takes in the next record.
func (r *Records) read() error {
	var rec prewarm.Record
	err := r.dec.Decode(&rec)
	if errors.Is(err, io.EOF) {
		return io.EOF
	}
	r.n++
	if err != nil {
		return fmt.Errorf("%w: access record %d: %w", ErrFormat, r.n, err)
	}
	if rec.Version != prewarm.RecordVersion {
		return fmt.Errorf("%w: access record %d: version %d, want %d", ErrFormat, r.n, rec.Version, prewarm.RecordVersion)
	}
	if rec.UnloadedAt.Before(r.floor) {
		return fmt.Errorf("%w: access record %d: unloaded at %s, before the record before it (%s): records must come in unload order",
			ErrFormat, r.n, rec.UnloadedAt.Format(time.RFC3339), r.floor.Format(time.RFC3339))
	}
	floor := r.floor
	r.app = rec.App
	for _, o := range rec.Objects {
		if o.Size < 0 || o.LH < 0 || o.RH < 0 || o.LM < 0 || o.RM < 0 || o.Out < 0 || o.MeanGapMS < 0 || o.Key == "" {
			return fmt.Errorf("%w: access record %d: object %q: negative counts, size or gap, or no key", ErrFormat, r.n, o.Key)
		}
		if o.Last.After(rec.UnloadedAt) {
			o.Last = rec.UnloadedAt // no access after the unload, so none after the next record's floor
		}
		a := &access{o: o, n: o.Out + o.Reads(), floor: floor}
		if a.n == 0 {
			continue
		}
		if a.n > 1 {
			a.gap = time.Duration(o.MeanGapMS * float64(time.Millisecond))
		}
		a.at = a.time(0)
		heap.Push(&r.queue, a)
	}
	r.floor = rec.UnloadedAt
	return nil
}

// access is one object's reconstructed accesses: n of them, gap apart,
// the last at o.Last.
type access struct {
	o     prewarm.Object
	n, i  int64
	gap   time.Duration
	floor time.Time // the previous record's unload: none earlier
	at    time.Time // of access i
}

func (a *access) time(i int64) time.Time {
	back := float64(a.n-1-i) * float64(a.gap) // as a float: counts may be huge
	if !a.o.Last.After(a.floor) || back >= float64(a.o.Last.Sub(a.floor)) {
		return a.floor
	}
	return a.o.Last.Add(-time.Duration(back))
}

type accessQueue []*access

func (q accessQueue) Len() int { return len(q) }
func (q accessQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].o.Key < q[j].o.Key
}
func (q accessQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *accessQueue) Push(x any)   { *q = append(*q, x.(*access)) }
func (q *accessQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}
