// Package prewarm decides what a newly loaded instance's cachelet should
// fetch before it is asked (Faa$T §3.3). Each cachelet records, per
// object, its size, version, accesses by type and mean inter-arrival time;
// when its instance is unloaded the record is saved, stamped with the
// unload time. When an application is (re)loaded, the records of the
// unloads within a window sized by the application's invocation frequency
// are merged, and an object is selected when its hit rate (local or
// remote) is above a threshold — temporal locality — or when it was read
// more than once across the merged history, which is what catches the
// model of an application invoked once an hour.
//
// The package is pure: records in, a selection out.
package prewarm

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hoard-io/hoard/internal/media"
)

// Object is what a cachelet records about one object.
type Object struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	ETag   string `json:"etag,omitempty"`
	Size   int64  `json:"size"`
	// Accesses by type: local hit, remote hit, local miss, remote miss,
	// and writes of the object as a function's output.
	LH int64 `json:"lh,omitempty"`
	RH int64 `json:"rh,omitempty"`
	LM int64 `json:"lm,omitempty"`
	RM int64 `json:"rm,omitempty"`
	// DH counts reads served from the node's disk tier.
	DH  int64 `json:"dh,omitempty"`
	Out int64 `json:"out,omitempty"`
	// MeanGapMS is the mean time between reads, in milliseconds (0 with
	// fewer than two reads).
	MeanGapMS float64   `json:"mean_gap_ms,omitempty"`
	Last      time.Time `json:"last"`
	// Media is what package media read from the object's first bytes as
	// it was written through the cachelet, for the version ETag names;
	// nil when it was not written through it, or is no media it reads.
	Media *media.Features `json:"media,omitempty"`
}

// Reads counts the object's reads of every type.
func (o *Object) Reads() int64 { return o.LH + o.RH + o.LM + o.RM + o.DH }

// HitRate is the share of reads that were hits (local, remote or disk).
func (o *Object) HitRate() float64 {
	if r := o.Reads(); r > 0 {
		return float64(o.LH+o.RH+o.DH) / float64(r)
	}
	return 0
}

// Record is one cachelet's metadata, saved when its instance unloads.
type Record struct {
	Version    int       `json:"version"`
	App        string    `json:"app"`
	Instance   string    `json:"instance"`
	UnloadedAt time.Time `json:"unloaded_at"`
	Objects    []Object  `json:"objects"`
}

// RecordVersion is the format version of Record.
const RecordVersion = 1

// Config tunes the selection.
type Config struct {
	// HitRate selects objects whose merged hit rate is above it; default
	// 0.5.
	HitRate float64
	// MinReads: objects read at least this often across the merged
	// history are selected; default 2 ("more than once").
	MinReads int64
	// MinWindow and MaxWindow bound the history merged; default 1 hour
	// and 7 days. Window scales it with the invocation frequency.
	MinWindow, MaxWindow time.Duration
	// Periods is how many mean inter-invocation times the window spans;
	// default 10, so an application invoked hourly merges about ten
	// unloads' worth of history.
	Periods float64
	// MaxBytes bounds the selection's total size (the cache's budget is
	// the natural bound); 0: no bound. The most read objects go first.
	MaxBytes int64
}

// Validate checks the config and fills in the defaults.
func (c *Config) Validate() error {
	if c.HitRate == 0 {
		c.HitRate = 0.5
	}
	if c.MinReads == 0 {
		c.MinReads = 2
	}
	if c.MinWindow == 0 {
		c.MinWindow = time.Hour
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = 7 * 24 * time.Hour
	}
	if c.Periods == 0 {
		c.Periods = 10
	}
	switch {
	case c.HitRate < 0 || c.HitRate > 1:
		return fmt.Errorf("prewarm: hit rate %v not in [0, 1]", c.HitRate)
	case c.MinReads < 1:
		return errors.New("prewarm: MinReads must be at least 1")
	case c.MinWindow > c.MaxWindow:
		return errors.New("prewarm: MinWindow exceeds MaxWindow")
	case c.MaxBytes < 0:
		return errors.New("prewarm: MaxBytes must not be negative")
	}
	return nil
}

// MaxWindowOrDefault is MaxWindow, or its default when unset.
func (c Config) MaxWindowOrDefault() time.Duration {
	_ = c.Validate()
	return c.MaxWindow
}

// Window is how far back to merge records for an application whose mean
// time between invocations is meanGap (0 when unknown): Periods of them,
// within [MinWindow, MaxWindow].
func (c Config) Window(meanGap time.Duration) time.Duration {
	_ = c.Validate()
	w := time.Duration(c.Periods * float64(meanGap))
	return min(max(w, c.MinWindow), c.MaxWindow)
}

// Merge combines the records unloaded within window before now, object by
// object: counts add up, the newest version and size win (an object
// rewritten since is the newer object), mean gaps are weighted by reads.
func Merge(records []Record, now time.Time, window time.Duration) []Object {
	type acc struct {
		o       Object
		gapSum  float64
		gapN    int64
		version time.Time
	}
	byKey := map[[2]string]*acc{}
	for _, r := range records {
		if r.UnloadedAt.After(now) || now.Sub(r.UnloadedAt) > window {
			continue
		}
		for _, o := range r.Objects {
			k := [2]string{o.Bucket, o.Key}
			a := byKey[k]
			if a == nil {
				a = &acc{o: Object{Bucket: o.Bucket, Key: o.Key}}
				byKey[k] = a
			}
			a.o.LH += o.LH
			a.o.RH += o.RH
			a.o.LM += o.LM
			a.o.RM += o.RM
			a.o.DH += o.DH
			a.o.Out += o.Out
			if o.MeanGapMS > 0 && o.Reads() > 1 {
				a.gapSum += o.MeanGapMS * float64(o.Reads()-1)
				a.gapN += o.Reads() - 1
			}
			if !o.Last.Before(a.version) {
				a.version, a.o.ETag, a.o.Size, a.o.Media = o.Last, o.ETag, o.Size, o.Media
			}
			if o.Last.After(a.o.Last) {
				a.o.Last = o.Last
			}
		}
	}
	out := make([]Object, 0, len(byKey))
	for _, a := range byKey {
		if a.gapN > 0 {
			a.o.MeanGapMS = a.gapSum / float64(a.gapN)
		}
		out = append(out, a.o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bucket != out[j].Bucket {
			return out[i].Bucket < out[j].Bucket
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// Selected is an object chosen for pre-warming, with why.
type Selected struct {
	Object
	Reason string `json:"reason"` // "hit-rate" or "reads"
}

// Select picks the objects to pre-warm from merged metadata: hit rate
// above cfg.HitRate, or at least cfg.MinReads reads. The most read come
// first; with MaxBytes, selection stops before the total would exceed it.
func Select(merged []Object, cfg Config) ([]Selected, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []Selected
	for _, o := range merged {
		switch {
		case o.Reads() > 0 && o.HitRate() > cfg.HitRate:
			out = append(out, Selected{o, "hit-rate"})
		case o.Reads() >= cfg.MinReads:
			out = append(out, Selected{o, "reads"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Reads() > out[j].Reads() })
	if cfg.MaxBytes > 0 {
		var total int64
		kept := out[:0]
		for _, s := range out {
			if total+s.Size > cfg.MaxBytes {
				continue
			}
			total += s.Size
			kept = append(kept, s)
		}
		out = kept
	}
	return out, nil
}
