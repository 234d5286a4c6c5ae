package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/bytesize"
)

// AccessCost is what one read of a kind costs: a fixed latency, then the
// bytes at a rate.
type AccessCost struct {
	Latency        time.Duration
	BytesPerSecond float64
}

// seconds is the time to read n bytes.
func (c AccessCost) seconds(n int64) float64 {
	return c.Latency.Seconds() + float64(n)/c.BytesPerSecond
}

func (c AccessCost) String() string {
	return fmt.Sprintf("%s+%s/s", c.Latency, bytesize.Human(int64(c.BytesPerSecond)))
}

// AccessModel gives each read a time by its outcome, to compare a
// workload's data-access time through hoard with the same reads sent to
// the store directly (Faa$T §6.2 simulates its applications this way,
// from latencies it measured per object size). A local hit costs Local; a
// remote hit Remote; a local miss and a pass-through the store's read,
// Store; a remote miss the store's read and the hop from the owner,
// Store + Remote.
type AccessModel struct {
	Local, Remote, Store AccessCost
}

// DefaultAccessModel is hoard's own figures on a 2-core machine
// (docs/benchmarks.md: a local hit's 65 µs at one connection and 4 GB/s
// for large objects; a remote hit's fixed cost and its 1.2 GB/s) in front
// of a remote store reached over a 20 ms, 90 MB/s link (the link the
// benchmarks shape, like a cloud object store from a function).
var DefaultAccessModel = AccessModel{
	Local:  AccessCost{Latency: 65 * time.Microsecond, BytesPerSecond: 4e9},
	Remote: AccessCost{Latency: 400 * time.Microsecond, BytesPerSecond: 1.2e9},
	Store:  AccessCost{Latency: 20 * time.Millisecond, BytesPerSecond: 90e6},
}

func (m AccessModel) String() string {
	return fmt.Sprintf("local=%s,remote=%s,store=%s", m.Local, m.Remote, m.Store)
}

// Validate checks every cost is usable.
func (m AccessModel) Validate() error {
	for _, c := range []struct {
		name string
		cost AccessCost
	}{{"local", m.Local}, {"remote", m.Remote}, {"store", m.Store}} {
		if c.cost.Latency < 0 || !(c.cost.BytesPerSecond > 0) || math.IsInf(c.cost.BytesPerSecond, 0) {
			return fmt.Errorf("sim: access model: %s %s: want a latency ≥ 0 and a rate > 0", c.name, c.cost)
		}
	}
	return nil
}

// ParseAccessModel reads "local=65us+4GB,remote=400us+1.2GB,store=20ms+90MB"
// (each part optional, the others default; a rate is bytes per second).
func ParseAccessModel(s string) (AccessModel, error) {
	m := DefaultAccessModel
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		lat, rate, ok2 := strings.Cut(val, "+")
		if !ok || !ok2 {
			return AccessModel{}, fmt.Errorf("sim: access model %q: want name=LATENCY+RATE, as store=20ms+90MB", part)
		}
		d, err := time.ParseDuration(lat)
		if err != nil {
			return AccessModel{}, fmt.Errorf("sim: access model %q: latency: %v", part, err)
		}
		r, err := bytesize.Parse(strings.TrimSuffix(rate, "/s"))
		if err != nil || r <= 0 {
			return AccessModel{}, fmt.Errorf("sim: access model %q: bad rate %q", part, rate)
		}
		c := AccessCost{Latency: d, BytesPerSecond: float64(r)}
		switch name {
		case "local":
			m.Local = c
		case "remote":
			m.Remote = c
		case "store":
			m.Store = c
		default:
			return AccessModel{}, fmt.Errorf("sim: access model %q: unknown %q (want local, remote or store)", part, name)
		}
	}
	return m, m.Validate()
}

// seconds is the modelled time of a read of n bytes served as o.
func (m AccessModel) seconds(o Outcome, n int64) float64 {
	switch o {
	case LocalHit:
		return m.Local.seconds(n)
	case RemoteHit:
		return m.Remote.seconds(n)
	case RemoteMiss:
		return m.Store.seconds(n) + m.Remote.seconds(n)
	default:
		return m.Store.seconds(n)
	}
}

// accessTimes are an application's modelled read times under one cache
// configuration and straight from the store.
type accessTimes struct{ hoard, direct float64 }

// Improvements summarises, per application, the share of data-access time
// hoard saved against reading the store directly: 1 − hoard/direct
// (negative where hoard was slower).
type Improvements struct {
	// Overall is over all applications' reads together.
	Overall float64 `json:"overall"`
	// Mean is the mean of the applications' improvements (Faa$T Fig. 11
	// right), AtLeastHalf the share of applications improved by 50% or
	// more (Fig. 11 left).
	Mean        float64 `json:"mean"`
	AtLeastHalf float64 `json:"at_least_half"`
	// Quantiles are the applications' improvements at 0%, 5%, ... 100%
	// (21 points: the CDF of Fig. 11 left).
	Quantiles []float64 `json:"quantiles"`
	// HoardSeconds and DirectSeconds are the modelled totals.
	HoardSeconds  float64 `json:"hoard_s"`
	DirectSeconds float64 `json:"direct_s"`
}

// improvements summarises times per application (those that read).
func improvements(times map[string]*accessTimes) *Improvements {
	var per []float64
	out := &Improvements{}
	// In a fixed order, so that the float sums are the same run to run.
	for _, app := range slices.Sorted(maps.Keys(times)) {
		t := times[app]
		out.HoardSeconds += t.hoard
		out.DirectSeconds += t.direct
		if t.direct > 0 {
			per = append(per, 1-t.hoard/t.direct)
		}
	}
	if len(per) == 0 {
		return out
	}
	slices.Sort(per)
	out.Overall = 1 - out.HoardSeconds/out.DirectSeconds
	half := 0
	for _, v := range per {
		out.Mean += v
		if v >= 0.5 {
			half++
		}
	}
	out.Mean /= float64(len(per))
	out.AtLeastHalf = float64(half) / float64(len(per))
	for q := 0; q <= 20; q++ {
		out.Quantiles = append(out.Quantiles, per[int(math.Round(float64(q)/20*float64(len(per)-1)))])
	}
	return out
}
