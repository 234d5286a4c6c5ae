package bench

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkProxyFloors measures what a proxy in front of MinIO costs a
// 4 KiB GET on this machine, whatever it is built with: MinIO direct
// (store), through the bare TCP forwarder (tcp-fwd: one more hop,
// nothing parsed), through the bare net/http proxy `hoard bench
// access`'s store-http target uses (net-http: hoard's front's parts),
// and through a valyala/fasthttp proxy (fasthttp: its server and its
// HostClient, the request and answer passed on as they came), the
// fastest HTTP/1.1 stack ADR 0034 measured. The client is the one
// `hoard bench access` reads with (minio-go, each request signed). The
// targets are read in rotation, one GET to each in turn, so that load
// from elsewhere falls on all alike; each path is read with a GET and
// with a conditional GET answered 304 (-304), what a read under strong
// sends. Each round gives every target's p50 and its ratio to the
// store's (store-304's), and the table their medians:
//
//	go test -run XXX -bench ProxyFloors -benchtime 1x ./internal/bench
//
// HOARD_PROXYBENCH_ROUNDS (default 5) and HOARD_PROXYBENCH_GETS (GETs
// per target a round, default 1000) change the run. It needs MinIO
// (make tools) and is skipped without it.
func BenchmarkProxyFloors(b *testing.B) {
	rounds, gets := envInt(b, "HOARD_PROXYBENCH_ROUNDS", 5), envInt(b, "HOARD_PROXYBENCH_GETS", 1000)
	ctx := context.Background()
	const size = 4 << 10
	srv, store, key := startBenchStore(b, size)
	u, err := url.Parse(srv.Endpoint())
	if err != nil {
		b.Fatal(err)
	}
	fwd, err := StartForwarder(u.Host)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fwd.Close() })
	hf, err := StartHTTPForwarder(u.Host)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { hf.Close() })
	fastAddr := startFastHTTPProxy(b, u.Host)

	// Each path read twice: a GET, and a conditional GET answered 304
	// (what a read under strong sends; its ratio is to store-304's).
	var names []string
	getters := map[string]Getter{}
	want := map[string]int64{}
	base := map[string]string{}
	for _, p := range []struct{ name, addr string }{{"store", ""}, {"tcp-fwd", fwd.Addr()}, {"net-http", hf.Addr()}, {"fasthttp", fastAddr}} {
		c := store
		if p.addr != "" {
			if c, err = NewS3Client("http://"+p.addr, srv.AccessKey(), srv.SecretKey(), benchRegion); err != nil {
				b.Fatal(err)
			}
		}
		names = append(names, p.name, p.name+"-304")
		getters[p.name], want[p.name], base[p.name] = NewS3Getter(c, benchBucket), size, "store"
		getters[p.name+"-304"], want[p.name+"-304"], base[p.name+"-304"] = &ConditionalGetter{Core: c, Bucket: benchBucket}, 0, "store-304"
	}
	p50 := map[string][]float64{}
	for b.Loop() {
		for range rounds {
			lat := map[string][]time.Duration{}
			for i := range (gets + 1) * len(names) {
				name := names[i%len(names)]
				start := time.Now()
				n, err := getters[name].Get(ctx, key)
				if err == nil && n != want[name] {
					err = fmt.Errorf("%d bytes, want %d", n, want[name])
				}
				if err != nil {
					b.Fatalf("%s: %v", name, err)
				}
				if i >= len(names) { // the first of each: warm-up
					lat[name] = append(lat[name], time.Since(start))
				}
			}
			for _, name := range names {
				slices.Sort(lat[name])
				p50[name] = append(p50[name], float64(lat[name][len(lat[name])/2].Nanoseconds())/1e3)
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d rounds of %d 4 KiB GETs a target, in rotation; p50 µs and ratio to store (-304: to store-304), by round (median)\n", rounds, gets)
	for _, name := range names {
		ratios := make([]float64, len(p50[name]))
		parts := make([]string, len(ratios))
		for i := range ratios {
			ratios[i] = p50[name][i] / p50[base[name]][i]
			parts[i] = fmt.Sprintf("%.2f", ratios[i])
		}
		fmt.Fprintf(&out, "%-13s p50 %6.0f µs   ÷ %-9s %s (median %.2f)\n", name, medianF(p50[name]), base[name], strings.Join(parts, ", "), medianF(ratios))
		if name != base[name] {
			b.ReportMetric(medianF(ratios), name+"/"+base[name]+"-p50")
		}
	}
	fmt.Print(out.String())
}

// startFastHTTPProxy runs a fasthttp reverse proxy on loopback in front
// of upstream: every request passed on as it came (its Host kept, so a
// request signed for the proxy still holds), every answer passed back.
func startFastHTTPProxy(b *testing.B, upstream string) string {
	hc := &fasthttp.HostClient{Addr: upstream, MaxConns: MaxConnections, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
		DisableHeaderNamesNormalizing: true, DisablePathNormalizing: true}
	s := &fasthttp.Server{ReadTimeout: 30 * time.Second, NoDefaultDate: true, NoDefaultContentType: true, NoDefaultServerHeader: true,
		DisableHeaderNamesNormalizing: true,
		Handler: func(c *fasthttp.RequestCtx) {
			if err := hc.Do(&c.Request, &c.Response); err != nil {
				c.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			}
		}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	b.Cleanup(func() { _ = s.Shutdown() })
	return ln.Addr().String()
}

// envInt is a positive integer from the environment, or def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
