package netshape

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Preset is a named network setting from a paper's testbed: how the link
// between a function instance's cachelet and the object store behaves, and
// how the link between two cachelets behaves. Each Link applies to both
// directions of its path (shape with Shape(ctx, name, addr, p.Store,
// p.Store)), so a request/answer exchange pays the Link's Latency twice.
type Preset struct {
	Name string
	// Source says where every figure comes from.
	Source string
	// Store is a cachelet's link to the object store.
	Store Link
	// Peer is the link between two cachelets of one application.
	Peer Link
}

// Shaped reports whether the preset shapes anything. An unshaped preset
// ("local") needs no proxy at all: connect directly and spare the extra
// loopback hop.
func (p Preset) Shaped() bool { return p.Store.Shaped() || p.Peer.Shaped() }

// Validate reports whether p can be applied and says where its figures
// come from.
func (p Preset) Validate() error {
	if p.Name == "" {
		return errors.New("netshape: preset without a name")
	}
	if strings.TrimSpace(p.Source) == "" {
		return fmt.Errorf("netshape: preset %q does not say where its figures come from", p.Name)
	}
	if err := p.Store.Validate(); err != nil {
		return fmt.Errorf("preset %q store link: %w", p.Name, err)
	}
	if err := p.Peer.Validate(); err != nil {
		return fmt.Errorf("preset %q peer link: %w", p.Name, err)
	}
	return nil
}

// S3SmallRequestLatency is the one-way delay the cloud presets put on the
// store link: 10 ms each way, 20 ms added to every request/answer exchange.
// Neither paper gives a latency for its remote storage; AWS's S3
// performance guidelines put the median latency of small requests (below
// 512 KB) "in the tens of milliseconds" (Best Practices Design Patterns:
// Optimizing Amazon S3 Performance, "Timeouts and Retries for
// Latency-Sensitive Applications"), and 20 ms is the low end of that range.
// MinIO's own service time on loopback (~0.4 ms for a small GET) comes on
// top.
const S3SmallRequestLatency = 10 * time.Millisecond

// presets are the named settings benchmarks offer (LookupPreset,
// PresetNames). Every figure is explained in Source and in
// docs/adr/0010-network-shaping.md.
var presets = map[string]Preset{
	"faast": {
		Name: "faast",
		Source: "Faa$T (Romero et al.) §6.1 Experimental setup " +
			"(../shared/papers/faast.txt): instances have \"up to 500MB/s network bandwidth\" (peer link, 500 MB/s); " +
			"\"I/O bandwidth to remote storage is lower at 90MB/s for large objects\" (store link, 90 MB/s). " +
			"The paper gives no latency: the store link takes 10 ms each way (20 ms per exchange), the low end of " +
			"AWS's \"tens of milliseconds\" median for small S3 requests; the peer link has none, as same-datacenter " +
			"round trips are below toxiproxy's 1 ms resolution",
		Store: Link{Latency: S3SmallRequestLatency, Bandwidth: 90 * MB},
		Peer:  Link{Bandwidth: 500 * MB},
	},
	"ofc": {
		Name: "ofc",
		Source: "OFC (Mvondo et al., EuroSys '21) §7 Evaluation (../shared/papers/ofc.txt): 6 machines " +
			"\"interconnected via a 10Gb/s Ethernet switch\", one of them the Swift store, the others FaaS workers " +
			"(store and peer links, 10 Gb/s = 1250 MB/s). No latency: a one-switch LAN's round trip is below " +
			"toxiproxy's 1 ms resolution; Swift's own service time (e.g. ~11 ms to persist a shadow object) is the " +
			"store's, not the network's",
		Store: Link{Bandwidth: 1250 * MB},
		Peer:  Link{Bandwidth: 1250 * MB},
	},
	"local": {
		Name:   "local",
		Source: "no shaping: everything on loopback, as hoard bench measured before shaping existed; connect directly, no proxy",
	},
}

// PresetNames lists the presets' names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupPreset returns the preset called name, or an error listing the
// known ones.
func LookupPreset(name string) (Preset, error) {
	p, ok := presets[name]
	if !ok {
		return Preset{}, fmt.Errorf("netshape: unknown preset %q (known: %s)", name, strings.Join(PresetNames(), ", "))
	}
	return p, nil
}
