// Package netshape puts real network shaping between hoard and the things
// it talks to (the object store, peer cachelets) on one machine, so that
// benchmarks see a store that is far away and slow instead of MinIO on
// loopback. The shaping is done by toxiproxy, a TCP proxy run as a child
// process on loopback and configured through its official Go client: every
// byte crosses a real socket pair and is held back by the proxy, nothing in
// hoard's code sleeps. docs/adr/0010-network-shaping.md says why toxiproxy
// (this kernel has no netem) and where the presets' figures come from.
//
//	srv, err := netshape.Start(ctx, netshape.Config{})
//	p, err := netshape.LookupPreset("faast")
//	px, err := srv.Shape(ctx, "store", minio.Endpoint(), p.Store, p.Store)
//	// talk S3 to px.Endpoint instead of minio.Endpoint()
//
// A Link shapes one direction of every connection through a proxy. Its
// Bandwidth caps each TCP connection on its own: a client that opens four
// connections gets four times the rate (see the ADR for what that means for
// results).
package netshape

import (
	"errors"
	"fmt"
	"time"
)

// MB is 10^6 bytes, the unit of the papers' MB/s and of hoard bench's MB/s.
const MB int64 = 1_000_000

// Link is the shaping of one direction of a proxied connection.
//
// Latency delays every byte by the same amount, as a propagation delay
// does: the first byte of each burst arrives Latency later, and a stream
// keeps its rate (toxiproxy's "latency" toxic holds each chunk until
// Latency after it was read). A request and its answer on one connection
// therefore pay the upstream link's Latency plus the downstream link's.
// Opening a connection pays nothing: toxiproxy accepts on loopback and
// dials the upstream at once, and the toxics apply to data only.
type Link struct {
	// Latency is the one-way delay. Toxiproxy counts whole milliseconds,
	// so it must be a multiple of time.Millisecond.
	Latency time.Duration
	// Jitter spreads the delay of each chunk uniformly over
	// [Latency-Jitter, Latency+Jitter). Chunks never overtake one another.
	// A multiple of time.Millisecond, at most Latency.
	Jitter time.Duration
	// Bandwidth is the rate cap in bytes per second, per connection; 0
	// means unlimited. Toxiproxy counts KB/s (10^3 bytes): the rate is
	// rounded down to a whole KB/s, so a link is never faster than asked
	// (the error is under 1000 B/s, below 0.01% from 10 MB/s up), and
	// rates below 1000 B/s are refused.
	Bandwidth int64
}

// Validate reports whether toxiproxy can apply l exactly as described.
func (l Link) Validate() error {
	switch {
	case l.Latency < 0:
		return fmt.Errorf("netshape: latency %v is negative", l.Latency)
	case l.Latency%time.Millisecond != 0:
		return fmt.Errorf("netshape: latency %v is not a whole number of milliseconds (toxiproxy's resolution)", l.Latency)
	case l.Jitter < 0:
		return fmt.Errorf("netshape: jitter %v is negative", l.Jitter)
	case l.Jitter%time.Millisecond != 0:
		return fmt.Errorf("netshape: jitter %v is not a whole number of milliseconds (toxiproxy's resolution)", l.Jitter)
	case l.Jitter > l.Latency:
		return fmt.Errorf("netshape: jitter %v exceeds latency %v", l.Jitter, l.Latency)
	case l.Bandwidth < 0:
		return fmt.Errorf("netshape: bandwidth %d B/s is negative", l.Bandwidth)
	case l.Bandwidth > 0 && l.Bandwidth < 1000:
		return fmt.Errorf("netshape: bandwidth %d B/s is below toxiproxy's 1 KB/s resolution", l.Bandwidth)
	}
	return nil
}

// Shaped reports whether l changes anything: a zero Link passes bytes
// through as they come.
func (l Link) Shaped() bool { return l != Link{} }

// String describes l, e.g. "10ms±2ms, 90 MB/s"; "unshaped" for the zero
// Link.
func (l Link) String() string {
	if !l.Shaped() {
		return "unshaped"
	}
	lat := "no latency"
	if l.Latency > 0 {
		lat = l.Latency.String()
		if l.Jitter > 0 {
			lat += "±" + l.Jitter.String()
		}
	}
	bw := "unlimited"
	if l.Bandwidth > 0 {
		bw = fmt.Sprintf("%g MB/s", float64(l.Bandwidth)/float64(MB))
	}
	return lat + ", " + bw
}

// toxiproxy's units.

// rateKBps is toxiproxy's bandwidth "rate" for bytesPerSec: KB/s with
// KB = 1000 bytes (its bandwidth toxic waits len(chunk) ms / rate per
// chunk), rounded down so the cap is never exceeded. 0 stays 0
// (unlimited); Validate refuses 1..999.
func rateKBps(bytesPerSec int64) int64 { return bytesPerSec / 1000 }

// millis is d in toxiproxy's whole milliseconds (Validate has checked
// that nothing is lost).
func millis(d time.Duration) int64 { return int64(d / time.Millisecond) }

// Toxic streams, as toxiproxy names them.
const (
	// Downstream is upstream server to client: a GET's body.
	Downstream = "downstream"
	// Upstream is client to upstream server: requests, a PUT's body.
	Upstream = "upstream"
)

// toxic is one toxic as netshape asks toxiproxy for it.
type toxic struct {
	name   string
	typ    string
	stream string
	attrs  map[string]any
}

// toxicsFor lists the toxics that make stream behave as l, in chain order:
// latency before bandwidth. Toxiproxy's latency toxic subtracts the time a
// chunk has already spent in the proxy from its delay, so behind a
// bandwidth toxic the latency would be hidden by the pacing; in front of it
// a transfer takes Latency + size/Bandwidth, as on a real link.
func toxicsFor(stream string, l Link) []toxic {
	var out []toxic
	if l.Latency > 0 || l.Jitter > 0 {
		out = append(out, toxic{
			name:   stream + "-latency",
			typ:    "latency",
			stream: stream,
			attrs:  map[string]any{"latency": millis(l.Latency), "jitter": millis(l.Jitter)},
		})
	}
	if l.Bandwidth > 0 {
		out = append(out, toxic{
			name:   stream + "-bandwidth",
			typ:    "bandwidth",
			stream: stream,
			attrs:  map[string]any{"rate": rateKBps(l.Bandwidth)},
		})
	}
	return out
}

// sameChain reports whether a and b name the same toxics in the same order,
// so that updating attributes in place keeps the chain's order right.
func sameChain(a []string, b []toxic) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i].name {
			return false
		}
	}
	return true
}

// validateLinks checks a down/up pair.
func validateLinks(down, up Link) error {
	if err := down.Validate(); err != nil {
		return fmt.Errorf("downstream: %w", err)
	}
	if err := up.Validate(); err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	return nil
}

// errClosed is returned by the methods of a closed Server or Proxy.
var errClosed = errors.New("netshape: closed")
