package appspec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/grant"
)

const good = `
name: thumbs
memory: 128MiB
keep_alive: 2m
buckets: {images: read-write, models: read-only}
cache: {consistency: owner, budget: 32MiB}
scaling: {latency_target: 250ms, min_instances: 2}
functions:
  thumbnail: {handler: thumbs.handler}
  blur: {handler: thumbs.blur, memory: 512MiB, timeout: 5s}
triggers:
  - {http: /thumbnail, function: thumbnail}
  - {object: {bucket: images, prefix: incoming/}, pipeline: process}
pipelines:
  process:
    intermediate: {bucket: images, prefix: tmp/}
    stages:
      - {name: blur, function: blur, after: [resize], args: {radius: 4}}
      - {name: resize, function: thumbnail}
`

func TestParseFillsDefaults(t *testing.T) {
	s, err := Parse([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if s.Runtime != "python3" || s.Timeout.D() != DefaultTimeout || s.KeepAlive.D() != 2*time.Minute || s.MaxInstances != DefaultMaxInstances {
		t.Errorf("defaults: %+v", s)
	}
	if s.Functions["thumbnail"].Memory != 128<<20 || s.Functions["blur"].Memory != 512<<20 || s.Functions["blur"].Timeout.D() != 5*time.Second {
		t.Errorf("function overrides: %+v %+v", s.Functions["thumbnail"], s.Functions["blur"])
	}
	if s.Cache.Eviction != "owner-lru" || s.Cache.Budget != 32<<20 {
		t.Errorf("cache: %+v", s.Cache)
	}
	if s.Scaling.LatencyTarget.D() != 250*time.Millisecond || s.Scaling.MinInstances != 2 {
		t.Errorf("scaling: %+v", s.Scaling)
	}
	if got := s.InstanceMemory(); got != (512+32)<<20+cacheconfig.DefaultMemoryOverhead {
		t.Errorf("InstanceMemory = %d", got)
	}
	order, _ := s.Pipelines["process"].Order()
	if order[0].Name != "resize" || order[1].Name != "blur" || order[1].Args["radius"] != 4 {
		t.Errorf("order: %v %v", order[0].Name, order[1].Name)
	}
	if !s.Triggers[1].Object.Match("images", "incoming/a.jpg") || s.Triggers[1].Object.Match("images", "out/a.jpg") || s.Triggers[1].Object.Match("other", "incoming/a") {
		t.Error("object filter")
	}
	// Marshal and parse again: the same spec.
	raw, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Parse(raw)
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, raw)
	}
	if s2.Functions["blur"].Memory != 512<<20 || s2.KeepAlive != s.KeepAlive || s2.Scaling != s.Scaling {
		t.Errorf("round trip changed the spec:\n%s", raw)
	}
}

func TestParseRejects(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	for name, tc := range map[string]struct{ spec, want string }{
		"unknown field":      {base + "colour: red\n", "colour"},
		"bad name":           {"name: Bad_Name\nfunctions: {f: {handler: m.h}}\n", "name"},
		"no functions":       {"name: a\n", "no functions"},
		"bad handler":        {"name: a\nfunctions: {f: {handler: handler}}\n", "handler"},
		"bad size":           {base + "memory: lots\n", "bad size"},
		"tiny memory":        {base + "memory: 1MiB\n", "memory"},
		"bad duration":       {base + "timeout: soon\n", "bad duration"},
		"long timeout":       {base + "timeout: 2h\n", "timeout"},
		"bad consistency":    {base + "cache: {consistency: maybe}\n", "consistency"},
		"ttl needs ttl":      {base + "cache: {eviction: ttl}\n", "ttl"},
		"ttl on lru":         {base + "cache: {ttl: 1m}\n", "ttl"},
		"sweep off, reads":   {base + "cache: {sweep: off, sweep_min_reads: 3}\n", "sweep is off"},
		"sweep sometimes":    {base + "cache: {sweep: sometimes}\n", "cache.sweep"},
		"final not a bucket": {base + "buckets: {abc: read-write}\ncache: {final_outputs: [{bucket: xyz}]}\n", "read-write buckets"},
		"final read-only":    {base + "buckets: {abc: read-only}\ncache: {final_outputs: [{bucket: abc}]}\n", "read-write buckets"},
		"final comma":        {base + "buckets: {abc: read-write}\ncache: {final_outputs: [{bucket: abc, prefix: 'a,b'}]}\n", "','"},
		"final triggered": {base + "buckets: {abc: read-write}\ncache: {final_outputs: [{bucket: abc, prefix: out/}]}\n" +
			"triggers: [{object: {bucket: abc, prefix: out/thumbs/}, function: f}]\n", "object trigger"},
		"final intermediate": {base + "buckets: {abc: read-write}\ncache: {final_outputs: [{bucket: abc}]}\n" +
			"pipelines: {p: {intermediate: {bucket: abc, prefix: tmp/}, stages: [{name: a, function: f}]}}\n", "intermediate"},
		"negative sweep":    {base + "cache: {sweep: -1s}\n", "want a duration such as 300s, or off"},
		"disk both":         {base + "cache: {no_disk: true, disk_budget: 1GiB}\n", "no_disk"},
		"trigger both":      {base + "triggers: [{http: /x, object: {bucket: abc}, function: f}]\n", "exactly one"},
		"trigger no target": {base + "triggers: [{http: /x}]\n", "exactly one"},
		"trigger unknown":   {base + "triggers: [{http: /x, function: g}]\n", `"g"`},
		"http path dots":    {base + "triggers: [{http: /a/../b, function: f}]\n", "http path"},
		"http twice":        {base + "triggers: [{http: /x, function: f}, {http: /x, function: f}]\n", "twice"},
		"bad bucket":        {base + "triggers: [{object: {bucket: A_B}, function: f}]\n", "bucket"},
		"trigger read-only": {base + "buckets: {abc: read-only}\ntriggers: [{object: {bucket: abd}, function: f}]\n", "not in buckets"},
		"cycle":             {base + "pipelines: {p: {stages: [{name: a, function: f, after: [b]}, {name: b, function: f, after: [a]}]}}\n", "cycle"},
		"unknown stage":     {base + "pipelines: {p: {stages: [{name: a, function: f, after: [z]}]}}\n", "unknown stage"},
		"stage function":    {base + "pipelines: {p: {stages: [{name: a, function: g}]}}\n", `"g"`},
		"duplicate stage":   {base + "pipelines: {p: {stages: [{name: a, function: f}, {name: a, function: f}]}}\n", "twice"},
		"max instances":     {base + "max_instances: 1000\n", "max_instances"},
		"shared over":       {base + "memory: 128MiB\ncache: {shared: true, budget: 128MiB}\n", "below the booked memory"},
		"shared default":    {base + "memory: 64MiB\ncache: {shared: true}\n", "below the booked memory"},
		"shared not bool":   {base + "cache: {shared: maybe}\n", "into bool"},
		"latency target":    {base + "scaling: {latency_target: soon}\n", "bad duration"},
		"negative target":   {base + "scaling: {latency_target: -1s}\n", "bad duration"},
		"tiny target":       {base + "scaling: {latency_target: 1us}\n", "latency_target"},
		"huge target":       {base + "scaling: {latency_target: 1h}\n", "latency_target"},
		"min over max":      {base + "max_instances: 3\nscaling: {min_instances: 4}\n", "min_instances"},
		"negative min":      {base + "scaling: {min_instances: -1}\n", "min_instances"},
		"scaling field":     {base + "scaling: {latency: 1s}\n", "latency"},
		"bucket access":     {base + "buckets: {abc: write}\n", "access"},
		"bucket no access":  {base + "buckets: [{name: abc}]\n", "access"},
		"bucket name":       {base + "buckets: {Photos: read-only}\n", "bucket name"},
		"bucket ip":         {base + "buckets: {10.0.0.1: read-only}\n", "IP address"},
		"bucket twice":      {base + "buckets: [{name: abc, access: read-only}, {name: abc, access: read-write}]\n", "twice"},
		"bucket twice map":  {base + "buckets: {abc: read-only, abc: read-write}\n", "abc"},
		"platform bucket":   {base + "buckets: {hoard-platform: read-only}\n", "platform"},
		"buckets scalar":    {base + "buckets: abc\n", "buckets"},
		"bucket field":      {base + "buckets: [{name: abc, access: read-only, prefix: x}]\n", "prefix"},
		"trigger ungranted": {base + "triggers: [{object: {bucket: abc}, function: f}]\n", "not in buckets"},
		"inter ungranted":   {base + "pipelines: {p: {intermediate: {bucket: abc}, stages: [{name: a, function: f}]}}\n", "read-write"},
		"inter read-only":   {base + "buckets: {abc: read-only}\npipelines: {p: {intermediate: {bucket: abc}, stages: [{name: a, function: f}]}}\n", "read-write"},
	} {
		_, err := Parse([]byte(tc.spec))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v; want ErrInvalid mentioning %q", name, err, tc.want)
		}
	}
}

func TestBuckets(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	want := []grant.Bucket{{Name: "models", Access: grant.ReadOnly}, {Name: "photos", Access: grant.ReadWrite}}
	for name, y := range map[string]string{
		"mapping": "buckets: {models: read-only, photos: read-write}\n",
		"list":    "buckets:\n  - {name: models, access: read-only}\n  - name: photos\n    access: read-write\n",
	} {
		s, err := Parse([]byte(base + y))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal([]grant.Bucket(s.Buckets), want) {
			t.Errorf("%s: buckets %+v, want %+v", name, s.Buckets, want)
		}
		// The controller stores the spec as Marshal writes it and parses
		// it again.
		data, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(data)
		if err != nil || !slices.Equal(again.Buckets, s.Buckets) {
			t.Errorf("%s: round trip: %+v, %v\n%s", name, again, err, data)
		}
		set := s.Buckets.Set()
		if !set.Allows("photos", true) || set.Allows("models", true) || !set.Allows("models", false) || set.Allows("other", false) {
			t.Errorf("%s: set %+v", name, set)
		}
	}
	s, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if set := s.Buckets.Set(); !set.Restricted() || set.Allows("photos", false) {
		t.Errorf("no buckets: %+v must grant nothing", set)
	}
}

func TestPackUnpack(t *testing.T) {
	for format, pack := range map[string]func(string) (*Package, error){FormatTarGz: Pack, FormatBlocks: PackBlocks} {
		t.Run(format, func(t *testing.T) { testPackUnpack(t, format, pack) })
	}
}

func testPackUnpack(t *testing.T, format string, pack func(string) (*Package, error)) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(FileName, good)
	write("thumbs.py", "def handler(e, c): return 1\n")
	write("lib/util.py", "X = 1\n")
	write(".git/config", "secret")
	write("__pycache__/x.pyc", "junk")
	pkg, err := pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if pkg.Format != format {
		t.Errorf("format %q", pkg.Format)
	}
	again, err := ReadPackage(pkg.Data)
	if err != nil || again.SHA256 != pkg.SHA256 || again.Spec.Name != "thumbs" || again.Format != format {
		t.Fatalf("ReadPackage: %v %+v", err, again)
	}
	dest := filepath.Join(t.TempDir(), "code")
	if err := Unpack(pkg.Data, dest); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "lib/util.py")); string(b) != "X = 1\n" {
		t.Errorf("lib/util.py = %q", b)
	}
	for _, gone := range []string{".git", "__pycache__"} {
		if _, err := os.Stat(filepath.Join(dest, gone)); err == nil {
			t.Errorf("%s was packed", gone)
		}
	}
	if err := Unpack(pkg.Data, dest); err == nil {
		t.Error("Unpack over an existing directory succeeded")
	}

	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	if _, err := pack(dir); err == nil || !strings.Contains(err.Error(), "symbolic") {
		t.Errorf("Pack with a symlink: %v", err)
	}
}

func TestReadPackageRefusesHostileArchives(t *testing.T) {
	mk := func(entries ...tar.Header) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		for _, h := range entries {
			h := h
			body := strings.Repeat("x", int(min(h.Size, 1<<20)))
			if h.Name == FileName {
				body = "name: a\nfunctions: {f: {handler: m.h}}\n"
				h.Size = int64(len(body))
			}
			tw.WriteHeader(&h)
			tw.Write([]byte(body))
		}
		tw.Close()
		gz.Close()
		return buf.Bytes()
	}
	spec := tar.Header{Name: FileName, Typeflag: tar.TypeReg, Mode: 0o644}
	for name, data := range map[string][]byte{
		"not gzip":    []byte("hello"),
		"no spec":     mk(tar.Header{Name: "a.py", Typeflag: tar.TypeReg, Size: 1}),
		"dot dot":     mk(spec, tar.Header{Name: "../evil.py", Typeflag: tar.TypeReg, Size: 1}),
		"absolute":    mk(spec, tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg, Size: 1}),
		"unclean":     mk(spec, tar.Header{Name: "a/../../b", Typeflag: tar.TypeReg, Size: 1}),
		"symlink":     mk(spec, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}),
		"hard link":   mk(spec, tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: FileName}),
		"duplicate":   mk(spec, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1}, tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 1}),
		"device":      mk(spec, tar.Header{Name: "d", Typeflag: tar.TypeChar}),
		"huge claims": mk(spec, tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: DefaultLimits().Unpacked + 1}),
	} {
		if _, err := ReadPackage(data); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v; want ErrInvalid", name, err)
		}
		dest := filepath.Join(t.TempDir(), "x")
		if err := Unpack(data, dest); err == nil {
			t.Errorf("%s: Unpack succeeded", name)
		}
		if _, err := os.Stat(dest); err == nil {
			t.Errorf("%s: Unpack left %s behind", name, dest)
		}
	}
}

// With cache.shared the cache lives inside the booked memory: the limit is
// the largest booked memory alone; without, the budget comes on top. The
// cachelet's process overhead comes on top either way.
func TestInstanceMemoryShared(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		limit int64
	}{
		{"memory: 384MiB\ncache: {budget: 256MiB}\n", (384 + 256) << 20},
		{"memory: 384MiB\ncache: {budget: 256MiB, shared: true}\n", 384 << 20},
		{"memory: 384MiB\ncache: {budget: 256MiB, shared: false}\n", (384 + 256) << 20},
		// The largest booked memory, whichever function books it.
		{"memory: 128MiB\ncache: {budget: 200MiB, shared: true}\nfunctions: {f: {handler: m.h}, g: {handler: m.g, memory: 512MiB}}\n", 512 << 20},
		{"memory: 384MiB\ncache: {shared: true}\n", 384 << 20}, // the default budget, 64 MiB
	} {
		tc.limit += cacheconfig.DefaultMemoryOverhead // the cachelet's process, either way
		spec := "name: a\n" + tc.spec
		if !strings.Contains(spec, "functions:") {
			spec += "functions: {f: {handler: m.h}}\n"
		}
		s, err := Parse([]byte(spec))
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if got := s.InstanceMemory(); got != tc.limit {
			t.Errorf("%q: InstanceMemory = %d MiB, want %d MiB", tc.spec, got>>20, tc.limit>>20)
		}
		// The setting survives a round trip (the controller stores the
		// spec it parsed).
		raw, _ := s.Marshal()
		again, err := Parse(raw)
		if err != nil || again.Cache.Shared != s.Cache.Shared || again.InstanceMemory() != tc.limit {
			t.Errorf("%q: round trip: %v\n%s", tc.spec, err, raw)
		}
	}
}

// The spec's cache section becomes the cachelet's settings document.
func TestCacheSettings(t *testing.T) {
	s, err := Parse([]byte("name: a\nfunctions: {f: {handler: m.h}}\ncache: {consistency: owner-async, eviction: ttl, ttl: 2m, budget: 32MiB}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Cache.Settings()
	want := cacheconfig.Settings{Consistency: "owner-async", Eviction: cacheconfig.PolicyTTL,
		TTL: cacheconfig.Duration(2 * time.Minute), Budget: 32 << 20}
	if got != want {
		t.Fatalf("Settings\n got %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatal(err)
	}
	f, err := Parse([]byte("name: a\nfunctions: {f: {handler: m.h}}\nbuckets: {abc: read-write, out: read-write}\n" +
		"cache: {final_outputs: [{bucket: abc, prefix: reports/}, {bucket: out}]}\ntriggers: [{object: {bucket: abc, prefix: in/}, function: f}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fo := f.Cache.Settings().FinalOutputs; fo != "abc/reports/,out/" {
		t.Errorf("final outputs %q, want abc/reports/,out/", fo)
	}
	m, err := Parse([]byte("name: a\nfunctions: {f: {handler: m.h}}\ncache: {migrate: {hot_reads: 3, hot_idle: 10m, max_objects: 16, max_bytes: 8MiB, timeout: 3s}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.Cache.Settings().Migrate, (cacheconfig.Migrate{HotReads: 3, HotIdle: cacheconfig.Duration(10 * time.Minute),
		MaxObjects: 16, MaxBytes: 8 << 20, Timeout: cacheconfig.Duration(3 * time.Second)}); got != want {
		t.Errorf("migrate %+v, want %+v", got, want)
	}
	for _, bad := range []string{"{off: true, max_objects: 3}", "{max_bytes: 2GiB}", "{timeout: 5m}", "{hot_reads: -1}"} {
		if _, err := Parse([]byte("name: a\nfunctions: {f: {handler: m.h}}\ncache: {migrate: " + bad + "}\n")); err == nil || !strings.Contains(err.Error(), "migrate") {
			t.Errorf("migrate %s: %v, want an error naming migrate", bad, err)
		}
	}
	d, _ := Parse([]byte("name: a\nfunctions: {f: {handler: m.h}}\n"))
	if ds := d.Cache.Settings(); ds.Consistency != "strong" || ds.Eviction != cacheconfig.PolicyOwnerLRU || ds.Budget != DefaultCacheBudget {
		t.Fatalf("default Settings %+v", ds)
	}
}

// cache.sweep: left out, the cachelet's default (on, OFC's 300s); off or
// 0 turn it off; a duration sets the interval. It survives a round trip.
func TestSweepSpec(t *testing.T) {
	base := "name: a\nfunctions: {f: {handler: m.h}}\n"
	for body, want := range map[string]cacheconfig.Settings{
		base:                           {},
		base + "cache: {sweep: off}\n": {SweepOff: true},
		base + "cache: {sweep: 0}\n":   {SweepOff: true},
		base + "cache: {sweep: 60s, sweep_idle: 10m}\n": {SweepInterval: cacheconfig.Duration(time.Minute), SweepIdle: cacheconfig.Duration(10 * time.Minute)},
	} {
		s, err := Parse([]byte(body))
		if err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		got := s.Cache.Settings()
		if got.SweepOff != want.SweepOff || got.SweepInterval != want.SweepInterval || got.SweepIdle != want.SweepIdle {
			t.Errorf("%q: off %v every %s idle %s", body, got.SweepOff, got.SweepInterval.D(), got.SweepIdle.D())
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(out)
		if err != nil || again.Cache.Sweep != s.Cache.Sweep {
			t.Errorf("%q: round trip %+v, %v; want %+v\n%s", body, again.Cache.Sweep, err, s.Cache.Sweep, out)
		}
	}
}
