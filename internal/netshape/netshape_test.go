package netshape

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/localstore"
)

func TestRateKBps(t *testing.T) {
	for _, tc := range []struct {
		bytesPerSec, want int64
	}{
		{0, 0},            // unlimited
		{1000, 1},         // toxiproxy's smallest rate
		{1999, 1},         // rounded down: never faster than asked
		{40 * MB, 40_000}, // the integration test's cap
		{90 * MB, 90_000}, // Faa$T's storage bandwidth
		{1250 * MB, 1_250_000},
		{90*MB + 999, 90_000},
	} {
		if got := rateKBps(tc.bytesPerSec); got != tc.want {
			t.Errorf("rateKBps(%d) = %d, want %d", tc.bytesPerSec, got, tc.want)
		}
		if tc.bytesPerSec > 0 && rateKBps(tc.bytesPerSec)*1000 > tc.bytesPerSec {
			t.Errorf("rateKBps(%d) = %d KB/s is faster than asked", tc.bytesPerSec, rateKBps(tc.bytesPerSec))
		}
	}
}

func TestLinkValidate(t *testing.T) {
	ok := []Link{
		{},
		{Latency: 10 * time.Millisecond},
		{Latency: 10 * time.Millisecond, Jitter: 10 * time.Millisecond},
		{Bandwidth: 1000},
		{Latency: time.Second, Jitter: 3 * time.Millisecond, Bandwidth: 90 * MB},
	}
	for _, l := range ok {
		if err := l.Validate(); err != nil {
			t.Errorf("%+v: %v", l, err)
		}
	}
	bad := map[string]Link{
		"negative latency":   {Latency: -time.Millisecond},
		"sub-ms latency":     {Latency: 1500 * time.Microsecond},
		"sub-ms jitter":      {Latency: 5 * time.Millisecond, Jitter: 500 * time.Microsecond},
		"negative jitter":    {Latency: 5 * time.Millisecond, Jitter: -time.Millisecond},
		"jitter over lat":    {Latency: 5 * time.Millisecond, Jitter: 6 * time.Millisecond},
		"jitter alone":       {Jitter: time.Millisecond},
		"negative bandwidth": {Bandwidth: -1},
		"bandwidth < 1 KB/s": {Bandwidth: 999},
	}
	for name, l := range bad {
		if err := l.Validate(); err == nil {
			t.Errorf("%s (%+v): no error", name, l)
		}
	}
}

func TestLinkString(t *testing.T) {
	for l, want := range map[Link]string{
		{}:                   "unshaped",
		{Bandwidth: 90 * MB}: "no latency, 90 MB/s",
		{Latency: 10 * time.Millisecond, Jitter: 2 * time.Millisecond}: "10ms±2ms, unlimited",
		{Latency: 10 * time.Millisecond, Bandwidth: 1250 * MB}:         "10ms, 1250 MB/s",
	} {
		if got := l.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", l, got, want)
		}
	}
}

func TestToxicsFor(t *testing.T) {
	if got := toxicsFor(Downstream, Link{}); len(got) != 0 {
		t.Errorf("unshaped link has toxics: %+v", got)
	}
	got := toxicsFor(Upstream, Link{Latency: 15 * time.Millisecond, Jitter: 2 * time.Millisecond, Bandwidth: 40 * MB})
	if len(got) != 2 {
		t.Fatalf("want latency and bandwidth toxics, got %+v", got)
	}
	// Latency first: behind the bandwidth toxic it would be hidden by the
	// pacing (see toxicsFor).
	lat, bw := got[0], got[1]
	if lat.typ != "latency" || lat.stream != Upstream || lat.name != "upstream-latency" ||
		lat.attrs["latency"] != int64(15) || lat.attrs["jitter"] != int64(2) {
		t.Errorf("latency toxic = %+v", lat)
	}
	if bw.typ != "bandwidth" || bw.stream != Upstream || bw.name != "upstream-bandwidth" || bw.attrs["rate"] != int64(40_000) {
		t.Errorf("bandwidth toxic = %+v", bw)
	}
	if !sameChain([]string{"upstream-latency", "upstream-bandwidth"}, got) ||
		sameChain([]string{"upstream-bandwidth"}, got) ||
		sameChain([]string{"upstream-bandwidth", "upstream-latency"}, got) {
		t.Error("sameChain")
	}
}

func TestPresets(t *testing.T) {
	for name, p := range presets {
		if p.Name != name {
			t.Errorf("presets[%q].Name = %q", name, p.Name)
		}
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
	}
	for _, name := range []string{"faast", "ofc", "local"} {
		if _, err := LookupPreset(name); err != nil {
			t.Error(err)
		}
	}
	if _, err := LookupPreset("lan"); err == nil || !strings.Contains(err.Error(), "faast, local, ofc") {
		t.Errorf("LookupPreset(lan) = %v, want an error listing the presets", err)
	}
	// The figures the ADR and the sources quote.
	f := presets["faast"]
	if f.Store.Bandwidth != 90*MB || f.Peer.Bandwidth != 500*MB || f.Store.Latency != 10*time.Millisecond {
		t.Errorf("faast = %+v", f)
	}
	if !strings.Contains(f.Source, "90MB/s") || !strings.Contains(f.Source, "500MB/s") {
		t.Errorf("faast source does not quote the paper: %q", f.Source)
	}
	o := presets["ofc"]
	if o.Store.Bandwidth != 1250*MB || o.Peer.Bandwidth != 1250*MB || !strings.Contains(o.Source, "10Gb/s") {
		t.Errorf("ofc = %+v", o)
	}
	if presets["local"].Shaped() || !f.Shaped() || !o.Shaped() {
		t.Error("Shaped: local must be unshaped, faast and ofc shaped")
	}
	if err := (Preset{Name: "x", Store: Link{Bandwidth: 1}}).Validate(); err == nil {
		t.Error("preset without a source validated")
	}
}

func TestSplitUpstream(t *testing.T) {
	for in, want := range map[string][2]string{
		"127.0.0.1:9000":         {"http", "127.0.0.1:9000"},
		"http://127.0.0.1:9000":  {"http", "127.0.0.1:9000"},
		"http://127.0.0.1:9000/": {"http", "127.0.0.1:9000"},
		"https://[::1]:443":      {"https", "[::1]:443"},
	} {
		scheme, addr, err := splitUpstream(in)
		if err != nil || scheme != want[0] || addr != want[1] {
			t.Errorf("splitUpstream(%q) = %q, %q, %v; want %q, %q", in, scheme, addr, err, want[0], want[1])
		}
	}
	for _, in := range []string{"", "localhost", "http://h:1/bucket", "http://h:1/?x=1", "http://host"} {
		if _, _, err := splitUpstream(in); err == nil {
			t.Errorf("splitUpstream(%q): no error", in)
		}
	}
}

// A missing binary says how to get one.
func TestStartBinaryMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "toxiproxy-server")
	_, err := Start(t.Context(), Config{Binary: missing})
	if !errors.Is(err, localstore.ErrBinaryNotFound) || !strings.Contains(err.Error(), "make tools") {
		t.Errorf("Start(missing binary) = %v, want ErrBinaryNotFound saying `make tools`", err)
	}
	t.Setenv(BinaryEnv, missing)
	_, err = FindBinary()
	if !errors.Is(err, localstore.ErrBinaryNotFound) || !strings.Contains(err.Error(), BinaryEnv) ||
		!strings.Contains(err.Error(), "make tools") {
		t.Errorf("FindBinary with $%s missing = %v", BinaryEnv, err)
	}
}

var quiet = slog.New(slog.DiscardHandler)

// fakeServer writes a shell script standing in for toxiproxy.
func fakeServer(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fake-toxiproxy")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// An API that never comes up fails Start with the log's tail, and the
// process is stopped.
func TestStartAPINotReady(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	bin := fakeServer(t, `echo "fake toxiproxy: no API today, args $*"; exec sleep 60`)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Start(ctx, Config{Binary: bin, LogFile: filepath.Join(t.TempDir(), "toxiproxy.log"), GracePeriod: time.Second, Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), "not ready") || !strings.Contains(err.Error(), "no API today, args -host 127.0.0.1 -port") {
		t.Fatalf("Start = %v, want not ready with the log tail", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Start took %v to give up and stop the process", d)
	}
}

// A server that exits at once fails Start with ErrExited, not after the
// timeout.
func TestStartExits(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	bin := fakeServer(t, `echo "fake toxiproxy: giving up" >&2; exit 3`)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Start(ctx, Config{Binary: bin, LogFile: filepath.Join(t.TempDir(), "toxiproxy.log"), Logger: quiet})
	if !errors.Is(err, ErrExited) || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Start = %v, want ErrExited with the log tail", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Start took %v", d)
	}
}

// A taken API port is retried on another port.
func TestStartPortTaken(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	bin := fakeServer(t, `echo "listen tcp: bind: address already in use"; exec sleep 60`)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	log := filepath.Join(t.TempDir(), "toxiproxy.log")
	_, err := Start(ctx, Config{Binary: bin, LogFile: log, GracePeriod: time.Second, Logger: quiet})
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("Start = %v, want errPortTaken after retries", err)
	}
	b, _ := os.ReadFile(log)
	if n := strings.Count(string(b), "address already in use"); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}
