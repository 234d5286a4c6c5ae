package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// Target names, in the order they are measured and printed.
const (
	TargetStore    = "store"
	TargetStore304 = "store-304"
	// The store behind a bare TCP forwarder: the floor any proxy adds.
	TargetStoreFwd    = "store-fwd"
	TargetStore304Fwd = "store-304-fwd"
	// The store behind a bare HTTP reverse proxy: the floor an HTTP proxy
	// adds (it reads and writes every request and answer).
	TargetStoreHTTP    = "store-http"
	TargetStore304HTTP = "store-304-http"
	TargetCold         = "cold"
	TargetWarm         = "warm"
	TargetWarmLocal    = "warm-local"
	TargetRedis        = "redis"
	TargetTCP          = "tcp"
	// The TCP copy through a bare forwarder: the ceiling of two hops.
	TargetTCPFwd     = "tcp-fwd"
	TargetRemoteHit  = "remote-hit"
	TargetRemoteMiss = "remote-miss"
	// Reads through the non-owner of two cachelets under the owner
	// setting: its copy confirmed with the owner, and its copy dropped.
	TargetOwnerHit       = "owner-hit"
	TargetOwnerRemoteHit = "owner-remote-hit"
	TargetBoto3Store     = "boto3-store"
	TargetBoto3Warm      = "boto3-warm"
)

// AllTargets() returns the Go-measured targets, in the order reports list
// them (a new slice each call).
func AllTargets() []string {
	return []string{TargetStore, TargetStore304, TargetStoreFwd, TargetStore304Fwd, TargetStoreHTTP, TargetStore304HTTP, TargetCold, TargetWarm, TargetWarmLocal, TargetRemoteHit, TargetRemoteMiss, TargetOwnerHit, TargetOwnerRemoteHit, TargetRedis, TargetTCP, TargetTCPFwd}
}

// TargetDescription says what a target measures ("" for an unknown one).
func TargetDescription(target string) string { return targetDescriptions[target] }

var targetDescriptions = map[string]string{
	TargetStore:       "MinIO read directly (minio-go Core GetObject)",
	TargetStore304:    "a conditional GET straight to MinIO (If-None-Match with the object's ETag, answered 304 without a body): the least a read under version-check costs",
	TargetStoreFwd:    "MinIO read as store does, through a bare TCP forwarder on loopback (bytes copied both ways, nothing parsed): the least one more hop, and so any proxy, adds",
	TargetStore304Fwd: "store-304 through the same forwarder",
	TargetStoreHTTP: "MinIO read as store does, through a bare HTTP reverse proxy on loopback built as hoard's front is (net/http server, small answers in one write, " +
		"the store client's transport) that passes each request and answer on as they came: the least an HTTP proxy in Go adds",
	TargetStore304HTTP: "store-304 through the same HTTP proxy",
	TargetCold:         "hoard local miss: the cached copy is dropped (Cachelet.Invalidate, untimed) before every timed GET, so each one fetches from MinIO",
	TargetWarm:         "hoard local hit, default read mode version-check (a conditional GET to MinIO per read)",
	TargetWarmLocal:    "hoard local hit, read mode local (second instance; no store round trip)",
	TargetRedis:        "Redis GET of the same bytes (go-redis, which allocates each value)",
	TargetTCP:          "plain loopback TCP copy of the same bytes (the ceiling)",
	TargetTCPFwd:       "the tcp copy through a bare TCP forwarder (bytes moved by splice, never read): the ceiling of any path with two hops, a remote hit's (owner to reader, reader to client)",
	TargetRemoteHit:    "hoard remote hit, default setting strong: GET through the cachelet that does not own the key, its copy dropped (Cachelet.Invalidate, untimed) before every timed GET; the owner holds it and confirms it with the store",
	TargetRemoteMiss:   "hoard remote miss, default setting strong: as remote-hit, with the owner's copy dropped too, so the owner fetches from MinIO",
	TargetOwnerHit: "hoard local hit under the owner setting: GET through the cachelet of two (a second application) that does not own the key, " +
		"whose copy the owner confirms (a conditional GET to the owner, answered not modified; no store request)",
	TargetOwnerRemoteHit: "hoard remote hit under the owner setting: as owner-hit, with the reader's copy dropped (Cachelet.Invalidate, untimed) " +
		"before every timed GET, so the owner sends the object, which the reader keeps",
	TargetBoto3Store: "boto3 get_object from MinIO, body read in 1 MiB chunks",
	TargetBoto3Warm:  "boto3 get_object from hoard (warm, version-check), body read in 1 MiB chunks",
}

// Report is everything one run measured.
type Report struct {
	Benchmark string       `json:"benchmark"`
	Machine   Machine      `json:"machine"`
	Settings  Settings     `json:"settings"`
	Sizes     []SizeResult `json:"sizes"`
	Checks    []Check      `json:"checks"`
	Notes     []string     `json:"notes,omitempty"`
}

// Settings records how the run was configured.
type Settings struct {
	Quick      bool     `json:"quick"`
	Sizes      []int64  `json:"sizes"`
	Targets    []string `json:"targets"`
	Boto3      bool     `json:"boto3"`
	ColdMethod string   `json:"cold_method"`
	// RemoteMethod says how remote-hit and remote-miss were measured
	// (the application, its registry, its setting, the drops).
	RemoteMethod string `json:"remote_method,omitempty"`
	// OwnerMethod says how owner-hit and owner-remote-hit were measured.
	OwnerMethod string `json:"owner_method,omitempty"`
	// RemoteOwners names, per size label (with " owner" for the owner
	// targets' application), the cachelet that owned the key and the one
	// read through.
	RemoteOwners map[string]string `json:"remote_owners,omitempty"`
	Budget       int64             `json:"cache_budget_bytes"`
	// StoreLink is the shaped link MinIO was behind (preset: shaping);
	// empty: loopback.
	StoreLink    string            `json:"store_link,omitempty"`
	Descriptions map[string]string `json:"target_descriptions"`
}

// SizeResult is every target's figures at one object size.
type SizeResult struct {
	Size    int64          `json:"size"`
	Label   string         `json:"label"`
	Targets []TargetResult `json:"targets"`
	Ratios  Ratios         `json:"ratios"`
}

// TargetResult is one target at one size.
type TargetResult struct {
	Name string `json:"name"`
	Summary
	Warmup int `json:"warmup"`
	// SamplesNS are the timed requests' durations in measurement order
	// (empty for boto3 targets, which report summaries only).
	SamplesNS []int64 `json:"samples_ns,omitempty"`
}

// Target returns the named result, or nil.
func (s *SizeResult) Target(name string) *TargetResult {
	for i := range s.Targets {
		if s.Targets[i].Name == name {
			return &s.Targets[i]
		}
	}
	return nil
}

// Ratios compare targets at one size; nil where a target is missing.
type Ratios struct {
	WarmRedisP50       *float64 `json:"warm_redis_p50,omitempty"`       // warm p50 / redis p50
	StoreWarmP50       *float64 `json:"store_warm_p50,omitempty"`       // store p50 / warm p50 ("x faster than store")
	ColdStoreP50       *float64 `json:"cold_store_p50,omitempty"`       // cold p50 / store p50
	WarmStore304P50    *float64 `json:"warm_store_304_p50,omitempty"`   // warm p50 / store-304 p50
	WarmRedisMBps      *float64 `json:"warm_redis_mbps,omitempty"`      // warm MB/s / redis MB/s
	WarmTCPMBps        *float64 `json:"warm_tcp_mbps,omitempty"`        // warm MB/s / tcp MB/s
	WarmLocalRedisP50  *float64 `json:"warm_local_redis_p50,omitempty"` // the same four for warm-local
	StoreWarmLocalP50  *float64 `json:"store_warm_local_p50,omitempty"`
	WarmLocalRedisMBps *float64 `json:"warm_local_redis_mbps,omitempty"`
	WarmLocalTCPMBps   *float64 `json:"warm_local_tcp_mbps,omitempty"`
	// The floor: what a bare forwarder adds to the store's requests, and
	// hoard against the store reached through it.
	FwdStoreP50       *float64 `json:"store_fwd_store_p50,omitempty"`         // store-fwd p50 / store p50
	Fwd304Store304P50 *float64 `json:"store_304_fwd_store_304_p50,omitempty"` // store-304-fwd p50 / store-304 p50
	ColdFwdP50        *float64 `json:"cold_store_fwd_p50,omitempty"`          // cold p50 / store-fwd p50
	WarmFwd304P50     *float64 `json:"warm_store_304_fwd_p50,omitempty"`      // warm p50 / store-304-fwd p50
	// The same against a bare HTTP reverse proxy.
	HTTPStoreP50       *float64 `json:"store_http_store_p50,omitempty"`         // store-http p50 / store p50
	HTTP304Store304P50 *float64 `json:"store_304_http_store_304_p50,omitempty"` // store-304-http p50 / store-304 p50
	ColdHTTPP50        *float64 `json:"cold_store_http_p50,omitempty"`          // cold p50 / store-http p50
	WarmHTTP304P50     *float64 `json:"warm_store_304_http_p50,omitempty"`      // warm p50 / store-304-http p50
	// Remote reads against local ones (Faa$T's RH/LH and RM/LM).
	RemoteHitWarmP50      *float64 `json:"remote_hit_warm_p50,omitempty"`       // remote-hit p50 / warm p50
	RemoteHitWarmLocalP50 *float64 `json:"remote_hit_warm_local_p50,omitempty"` // remote-hit p50 / warm-local p50
	RemoteMissColdP50     *float64 `json:"remote_miss_cold_p50,omitempty"`      // remote-miss p50 / cold p50
	RemoteMissStoreP50    *float64 `json:"remote_miss_store_p50,omitempty"`     // remote-miss p50 / store p50
	// Large remote hits against one hop and against two.
	RemoteHitTCPMBps    *float64 `json:"remote_hit_tcp_mbps,omitempty"`     // remote-hit MB/s / tcp MB/s
	TCPFwdTCPMBps       *float64 `json:"tcp_fwd_tcp_mbps,omitempty"`        // tcp-fwd MB/s / tcp MB/s
	RemoteHitTCPFwdMBps *float64 `json:"remote_hit_tcp_fwd_mbps,omitempty"` // remote-hit MB/s / tcp-fwd MB/s
	// Under the owner setting: a remote hit against a local one.
	OwnerRemoteHitOwnerHitP50 *float64 `json:"owner_remote_hit_owner_hit_p50,omitempty"` // owner-remote-hit p50 / owner-hit p50
}

// ComputeRatios fills s.Ratios from its targets.
func (s *SizeResult) ComputeRatios() {
	p50 := func(a, b string) *float64 {
		x, y := s.Target(a), s.Target(b)
		if x == nil || y == nil || y.P50 == 0 || x.N == 0 {
			return nil
		}
		v := float64(x.P50) / float64(y.P50)
		return &v
	}
	mbps := func(a, b string) *float64 {
		x, y := s.Target(a), s.Target(b)
		if x == nil || y == nil || y.MBps == 0 || x.N == 0 {
			return nil
		}
		v := x.MBps / y.MBps
		return &v
	}
	s.Ratios = Ratios{
		WarmRedisP50:       p50(TargetWarm, TargetRedis),
		StoreWarmP50:       p50(TargetStore, TargetWarm),
		ColdStoreP50:       p50(TargetCold, TargetStore),
		WarmStore304P50:    p50(TargetWarm, TargetStore304),
		WarmRedisMBps:      mbps(TargetWarm, TargetRedis),
		WarmTCPMBps:        mbps(TargetWarm, TargetTCP),
		WarmLocalRedisP50:  p50(TargetWarmLocal, TargetRedis),
		StoreWarmLocalP50:  p50(TargetStore, TargetWarmLocal),
		WarmLocalRedisMBps: mbps(TargetWarmLocal, TargetRedis),
		WarmLocalTCPMBps:   mbps(TargetWarmLocal, TargetTCP),

		FwdStoreP50:       p50(TargetStoreFwd, TargetStore),
		Fwd304Store304P50: p50(TargetStore304Fwd, TargetStore304),
		ColdFwdP50:        p50(TargetCold, TargetStoreFwd),
		WarmFwd304P50:     p50(TargetWarm, TargetStore304Fwd),

		HTTPStoreP50:       p50(TargetStoreHTTP, TargetStore),
		HTTP304Store304P50: p50(TargetStore304HTTP, TargetStore304),
		ColdHTTPP50:        p50(TargetCold, TargetStoreHTTP),
		WarmHTTP304P50:     p50(TargetWarm, TargetStore304HTTP),

		RemoteHitWarmP50:      p50(TargetRemoteHit, TargetWarm),
		RemoteHitWarmLocalP50: p50(TargetRemoteHit, TargetWarmLocal),
		RemoteMissColdP50:     p50(TargetRemoteMiss, TargetCold),
		RemoteMissStoreP50:    p50(TargetRemoteMiss, TargetStore),
		RemoteHitTCPMBps:      mbps(TargetRemoteHit, TargetTCP),
		TCPFwdTCPMBps:         mbps(TargetTCPFwd, TargetTCP),
		RemoteHitTCPFwdMBps:   mbps(TargetRemoteHit, TargetTCPFwd),

		OwnerRemoteHitOwnerHitP50: p50(TargetOwnerRemoteHit, TargetOwnerHit),
	}
}

// Check is one of the task's targets set against what was measured.
type Check struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Want is the bound, e.g. "<= 1.50x".
	Want string `json:"want"`
	// Measured is the ratio on the warm (version-checked) target, or nil
	// when the size or a target was not measured.
	Measured *float64 `json:"measured,omitempty"`
	Pass     bool     `json:"pass"`
	// Reference is the same ratio on warm-local, shown for comparison; it
	// does not decide Pass.
	Reference *float64 `json:"warm_local,omitempty"`
	// Floor is the ratio the store behind a bare TCP forwarder shows
	// against the store in the same run (store-fwd/store, or
	// store-304-fwd/store-304), where the check compares hoard with the
	// store: the least that one more hop adds, so the least any proxy
	// could show. It does not decide Pass.
	Floor *float64 `json:"floor,omitempty"`
	// HTTPFloor is the same through a bare HTTP reverse proxy
	// (store-http/store, or store-304-http/store-304): the least an HTTP
	// proxy in Go, which reads and writes every request and answer,
	// shows. It does not decide Pass.
	HTTPFloor *float64 `json:"http_floor,omitempty"`
}

// Status is "pass", "short" or "not measured".
func (c Check) Status() string {
	switch {
	case c.Measured == nil:
		return "not measured"
	case c.Pass:
		return "pass"
	default:
		return "short"
	}
}

// EvaluateChecks sets r.Checks from r.Sizes: warm 4 KiB p50 within 1.5x of
// Redis and >= 5x faster than the store; warm 256 MiB throughput >= 2x
// Redis and >= 60% of TCP; warm 4 KiB p50 within 5% of a conditional GET
// straight to the store; under the owner setting a 4 KiB remote hit's p50
// within 1.15x of a local hit's; cold at most 10% slower than the store
// (p50) at every measured size.
func (r *Report) EvaluateChecks() {
	bySize := map[int64]*SizeResult{}
	for i := range r.Sizes {
		bySize[r.Sizes[i].Size] = &r.Sizes[i]
	}
	atMost := func(limit float64) func(float64) bool { return func(v float64) bool { return v <= limit } }
	atLeast := func(limit float64) func(float64) bool { return func(v float64) bool { return v >= limit } }
	mk := func(name string, size int64, want string, ok func(float64) bool, get func(Ratios) (*float64, *float64)) Check {
		c := Check{Name: name, Size: size, Want: want}
		if s := bySize[size]; s != nil {
			c.Measured, c.Reference = get(s.Ratios)
			c.Pass = c.Measured != nil && ok(*c.Measured)
		}
		return c
	}
	// withFloor adds the forwarders' ratios at c's size.
	withFloor := func(c Check, floor func(Ratios) (tcp, http *float64)) Check {
		if s := bySize[c.Size]; s != nil {
			c.Floor, c.HTTPFloor = floor(s.Ratios)
		}
		return c
	}
	const kib4, mib256 = 4 << 10, 256 << 20
	r.Checks = []Check{
		mk("warm 4 KiB p50 within 1.5x of Redis (warm/redis p50)", kib4, "<= 1.50x", atMost(1.5),
			func(x Ratios) (*float64, *float64) { return x.WarmRedisP50, x.WarmLocalRedisP50 }),
		mk("warm 4 KiB p50 >= 5x faster than MinIO direct (store/warm p50)", kib4, ">= 5.00x", atLeast(5),
			func(x Ratios) (*float64, *float64) { return x.StoreWarmP50, x.StoreWarmLocalP50 }),
		withFloor(mk("warm 4 KiB p50 within 5% of a conditional GET to MinIO (warm/store-304 p50)", kib4, "<= 1.05x", atMost(1.05),
			func(x Ratios) (*float64, *float64) { return x.WarmStore304P50, nil }),
			func(x Ratios) (*float64, *float64) { return x.Fwd304Store304P50, x.HTTP304Store304P50 }),
		mk("warm 256 MiB throughput >= 2x Redis (warm/redis MB/s)", mib256, ">= 2.00x", atLeast(2),
			func(x Ratios) (*float64, *float64) { return x.WarmRedisMBps, x.WarmLocalRedisMBps }),
		mk("warm 256 MiB throughput >= 60% of TCP (warm/tcp MB/s)", mib256, ">= 0.60x", atLeast(0.6),
			func(x Ratios) (*float64, *float64) { return x.WarmTCPMBps, x.WarmLocalTCPMBps }),
		mk("under owner, remote hit 4 KiB p50 within 15% of a local hit (owner-remote-hit/owner-hit p50)", kib4, "<= 1.15x", atMost(1.15),
			func(x Ratios) (*float64, *float64) { return x.OwnerRemoteHitOwnerHitP50, nil }),
	}
	for _, s := range r.Sizes {
		r.Checks = append(r.Checks, withFloor(mk("cold <= 10% slower than MinIO direct (cold/store p50)", s.Size, "<= 1.10x", atMost(1.1),
			func(x Ratios) (*float64, *float64) { return x.ColdStoreP50, nil }),
			func(x Ratios) (*float64, *float64) { return x.FwdStoreP50, x.HTTPStoreP50 }))
	}
}

func fmtRatio(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *v)
}

// WriteTable prints the report for people: one table per size with its
// ratios, then the task's targets with pass/short.
func (r *Report) WriteTable(w io.Writer) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "hoard bench %s — %d CPUs, %.1f GiB memory, %s, kernel %s", r.Benchmark, m.NumCPU, float64(m.MemoryBytes)/(1<<30), m.GoVersion, m.Kernel)
	if m.CPUModel != "" {
		fmt.Fprintf(&b, ", %s", m.CPUModel)
	}
	b.WriteString("\n")
	if r.Settings.StoreLink != "" {
		fmt.Fprintf(&b, "store: MinIO behind a shaped link (%s), for the store targets and hoard alike\n", r.Settings.StoreLink)
	}
	if r.Settings.ColdMethod != "" {
		fmt.Fprintf(&b, "cold: %s\n", r.Settings.ColdMethod)
	}
	if r.Settings.RemoteMethod != "" {
		fmt.Fprintf(&b, "remote: %s\n", r.Settings.RemoteMethod)
	}
	if r.Settings.OwnerMethod != "" {
		fmt.Fprintf(&b, "owner: %s\n", r.Settings.OwnerMethod)
	}
	b.WriteString("p50/p99: exact percentiles (nearest rank) of the timed GETs, one at a time; MB/s: 10^6 bytes/s over the timed GETs\n")
	for _, s := range r.Sizes {
		fmt.Fprintf(&b, "\n== %s ==\n", s.Label)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "target\tn\tp50\tp99\tMB/s\t")
		for _, t := range s.Targets {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t\n", t.Name, t.N, FormatDuration(t.P50), FormatDuration(t.P99), FormatMBps(t.MBps))
		}
		tw.Flush()
		x := s.Ratios
		fmt.Fprintf(&b, "warm:       warm/redis p50 %s | store/warm p50 %s faster than store | warm/redis MB/s %s | warm/tcp MB/s %s\n",
			fmtRatio(x.WarmRedisP50), fmtRatio(x.StoreWarmP50), fmtRatio(x.WarmRedisMBps), fmtRatio(x.WarmTCPMBps))
		fmt.Fprintf(&b, "warm-local: warm-local/redis p50 %s | store/warm-local p50 %s faster than store | warm-local/redis MB/s %s | warm-local/tcp MB/s %s\n",
			fmtRatio(x.WarmLocalRedisP50), fmtRatio(x.StoreWarmLocalP50), fmtRatio(x.WarmLocalRedisMBps), fmtRatio(x.WarmLocalTCPMBps))
		fmt.Fprintf(&b, "cold:       cold/store p50 %s\n", fmtRatio(x.ColdStoreP50))
		if x.WarmStore304P50 != nil {
			fmt.Fprintf(&b, "check:      warm/store-304 p50 %s (a version-checked hit against the conditional GET it sends)\n", fmtRatio(x.WarmStore304P50))
		}
		if s.Target(TargetStoreFwd) != nil || s.Target(TargetStore304Fwd) != nil {
			fmt.Fprintf(&b, "floor:      store-fwd/store p50 %s | store-304-fwd/store-304 p50 %s (one more hop, nothing parsed: the least any proxy adds) | cold/store-fwd p50 %s | warm/store-304-fwd p50 %s (hoard above that floor)\n",
				fmtRatio(x.FwdStoreP50), fmtRatio(x.Fwd304Store304P50), fmtRatio(x.ColdFwdP50), fmtRatio(x.WarmFwd304P50))
		}
		if s.Target(TargetStoreHTTP) != nil || s.Target(TargetStore304HTTP) != nil {
			fmt.Fprintf(&b, "http floor: store-http/store p50 %s | store-304-http/store-304 p50 %s (an HTTP proxy that only passes requests on: the least an HTTP proxy in Go adds) | cold/store-http p50 %s | warm/store-304-http p50 %s (hoard above it)\n",
				fmtRatio(x.HTTPStoreP50), fmtRatio(x.HTTP304Store304P50), fmtRatio(x.ColdHTTPP50), fmtRatio(x.WarmHTTP304P50))
		}
		if s.Target(TargetRemoteHit) != nil || s.Target(TargetRemoteMiss) != nil {
			fmt.Fprintf(&b, "remote:     RH/LH remote-hit/warm p50 %s | remote-hit/warm-local p50 %s | remote-miss/cold p50 %s | remote-miss/store p50 %s\n",
				fmtRatio(x.RemoteHitWarmP50), fmtRatio(x.RemoteHitWarmLocalP50), fmtRatio(x.RemoteMissColdP50), fmtRatio(x.RemoteMissStoreP50))
		}
		if s.Target(TargetOwnerHit) != nil || s.Target(TargetOwnerRemoteHit) != nil {
			fmt.Fprintf(&b, "owner:      owner-remote-hit/owner-hit p50 %s (under the owner setting, a remote hit against a local hit, both confirmed by the owner)\n",
				fmtRatio(x.OwnerRemoteHitOwnerHitP50))
		}
		if s.Target(TargetTCPFwd) != nil || (s.Target(TargetRemoteHit) != nil && s.Target(TargetTCP) != nil) {
			fmt.Fprintf(&b, "two hops:   remote-hit/tcp MB/s %s | tcp-fwd/tcp MB/s %s (the ceiling of two hops) | remote-hit/tcp-fwd MB/s %s\n",
				fmtRatio(x.RemoteHitTCPMBps), fmtRatio(x.TCPFwdTCPMBps), fmtRatio(x.RemoteHitTCPFwdMBps))
		}
	}
	r.writeRemoteSummary(&b)
	if len(r.Checks) > 0 {
		b.WriteString("\ntargets (decided on warm, the default version-checked read; warm-local shown for reference; floor: the store behind a bare TCP forwarder against the store, the least any proxy shows; http floor: the same behind a bare HTTP proxy, the least an HTTP proxy in Go shows)\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "target\tsize\twant\tmeasured\tresult\twarm-local\tfloor\thttp floor")
		for _, c := range r.Checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, FormatSize(c.Size), c.Want, fmtRatio(c.Measured), c.Status(), fmtRatio(c.Reference), fmtRatio(c.Floor), fmtRatio(c.HTTPFloor))
		}
		tw.Flush()
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// PaperRemoteHit is the papers' figure the remote-hit ratio is set next to
// (OFC §7.2.1: +12.76% at 1 kB).
const (
	PaperRemoteHit      = "OFC: remote hits within ~13% of local hits for small objects"
	PaperRemoteHitRatio = 1.13
)

// writeRemoteSummary prints, when remote-hit was measured, RH against LH
// at every size next to the paper's statement.
func (r *Report) writeRemoteSummary(b *strings.Builder) {
	measured := false
	for _, s := range r.Sizes {
		measured = measured || s.Target(TargetRemoteHit) != nil || s.Target(TargetRemoteMiss) != nil
	}
	if !measured {
		return
	}
	p50 := func(s SizeResult, name string) string {
		if t := s.Target(name); t != nil && t.N > 0 {
			return FormatDuration(t.P50)
		}
		return "-"
	}
	fmt.Fprintf(b, "\nremote reads against local ones (p50); %s, i.e. RH/LH <= ~%.2fx\n", PaperRemoteHit, PaperRemoteHitRatio)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size	remote-hit	warm	RH/LH	warm-local	RH/LH-local	remote-miss	cold	RM/LM	store	RM/store	")
	for _, s := range r.Sizes {
		x := s.Ratios
		fmt.Fprintf(tw, "%s	%s	%s	%s	%s	%s	%s	%s	%s	%s	%s	\n", s.Label,
			p50(s, TargetRemoteHit), p50(s, TargetWarm), fmtRatio(x.RemoteHitWarmP50),
			p50(s, TargetWarmLocal), fmtRatio(x.RemoteHitWarmLocalP50),
			p50(s, TargetRemoteMiss), p50(s, TargetCold), fmtRatio(x.RemoteMissColdP50),
			p50(s, TargetStore), fmtRatio(x.RemoteMissStoreP50))
	}
	tw.Flush()
}

// WriteJSON writes the whole report, raw samples included.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteJSONFile writes the report to path.
func (r *Report) WriteJSONFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := r.WriteJSON(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
