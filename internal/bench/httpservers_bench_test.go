package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/gnet/v2"
	"github.com/panjf2000/gnet/v2/pkg/logging"
	"github.com/valyala/fasthttp"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/loadgen"
	"github.com/hoard-io/hoard/internal/onewrite"
	"github.com/hoard-io/hoard/internal/s3api"
	"github.com/hoard-io/hoard/internal/s3auth"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// BenchmarkHTTPServers measures HTTP/1.1 servers answering a GET of the
// same 4 KiB with `hoard bench throughput`'s load generator (its
// closed-loop runner and per-connection requests), beside the S3 front
// answering a presigned GET of a cached 4 KiB object as a local hit:
//
//	go test -run XXX -bench HTTPServers -benchtime 1x ./internal/bench
//
// Targets: net/http as the bench's bare-http target runs it (net-http),
// net/http with its per-response header work cut to the minimum
// (net-http-tuned), valyala/fasthttp (fasthttp), a gnet event loop
// answering every complete request head with one prebuilt response
// (gnet-raw: no HTTP parsing beyond finding the head's end, the ceiling
// of any server on this machine), and the S3 front under net/http
// configured as `hoard serve` configures it (hoard-local). Every server
// runs in this process, on the generator's cores. Each round measures
// every target in turn, one connection then 64, and the order rotates
// between rounds; then every target again over one connection, in
// rotation (one request to each in turn, for half a point's time per
// target), so that load from elsewhere falls on all alike. The table
// gives the median over rounds of p50, p99 and ops/s, and each round's
// ratio of hoard-local to net-http, sequential and in rotation. "cpu µs" is
// the process's CPU time (user and system, generator and servers
// together, warm-up included) per request: unlike wall time, it is
// hardly stretched by other processes on a busy machine, and with every
// core busy (64 connections) ops/s is about cores / CPU per request.
// HOARD_HTTPBENCH_ROUNDS (default 5) and HOARD_HTTPBENCH_DURATION
// (default 1s a point) change the run.
func BenchmarkHTTPServers(b *testing.B) {
	rounds, dur := 5, time.Second
	if v := os.Getenv("HOARD_HTTPBENCH_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("HOARD_HTTPBENCH_ROUNDS=%q: want a positive integer", v)
		}
		rounds = n
	}
	if v := os.Getenv("HOARD_HTTPBENCH_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("HOARD_HTTPBENCH_DURATION=%q: want a positive duration", v)
		}
		dur = d
	}
	data := make([]byte, DefaultThroughputSize)
	for i := range data {
		data[i] = byte('a' + i%26)
	}
	ctx := b.Context()
	targets := startHTTPTargets(b, data)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        MaxConnections,
		MaxIdleConnsPerHost: MaxConnections,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
		WriteBufferSize:     64 << 10,
		ReadBufferSize:      64 << 10,
	}
	b.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}

	type point struct{ p50, p99, rate, cpu []float64 }
	conns := []int{1, 64}
	res := map[string]map[int]*point{}
	for _, t := range targets {
		res[t.name] = map[int]*point{}
		for _, c := range conns {
			res[t.name][c] = &point{}
		}
	}
	measure := func(t httpTarget, c int) {
		ops := make([]loadgen.Op, c)
		done := make([]int, c) // each worker's operations, warm-up included
		for i := range ops {
			op, err := httpOp(ctx, client, OpGet, t.url, data, int64(len(data)), expectRead(t))
			if err != nil {
				b.Fatal(err)
			}
			ops[i] = func(ctx context.Context) error {
				done[i]++
				return op(ctx)
			}
		}
		cpu0 := selfCPU(b)
		r, err := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: c, Warmup: dur / 4, Duration: dur}, ops)
		if err != nil {
			b.Fatalf("%s, %d connections: %v", t.name, c, err)
		}
		cpu := selfCPU(b) - cpu0
		total := 0
		for _, n := range done {
			total += n
		}
		p := res[t.name][c]
		p.cpu = append(p.cpu, float64(cpu.Nanoseconds())/1e3/float64(max(total, 1)))
		p.p50 = append(p.p50, float64(r.P50.Nanoseconds())/1e3)
		p.p99 = append(p.p99, float64(r.P99.Nanoseconds())/1e3)
		p.rate = append(p.rate, r.Rate)
	}
	// rotated[name] holds, per round, a target's p50 over one connection
	// measured in rotation: one request to each target in turn, so that
	// load from elsewhere falls on all alike (the sequential points above
	// each take their own second of it).
	rotated := map[string][]float64{}
	measureRotated := func() {
		ops := make([]loadgen.Op, len(targets))
		for i, t := range targets {
			op, err := httpOp(ctx, client, OpGet, t.url, data, int64(len(data)), expectRead(t))
			if err != nil {
				b.Fatal(err)
			}
			ops[i] = op
		}
		lat := make([][]time.Duration, len(targets))
		deadline := time.Now().Add(dur * time.Duration(len(targets)) / 2)
		for i := 0; i < 2*len(targets) || time.Now().Before(deadline); i++ {
			j := i % len(targets)
			start := time.Now()
			if err := ops[j](ctx); err != nil {
				b.Fatalf("%s, in rotation: %v", targets[j].name, err)
			}
			if i >= len(targets) { // the first of each: warm-up
				lat[j] = append(lat[j], time.Since(start))
			}
		}
		for j, t := range targets {
			slices.Sort(lat[j])
			rotated[t.name] = append(rotated[t.name], float64(lat[j][len(lat[j])/2].Nanoseconds())/1e3)
		}
	}
	for b.Loop() {
		for round := range rounds {
			for i := range targets {
				t := targets[(i+round)%len(targets)]
				for _, c := range conns {
					measure(t, c)
				}
			}
			measureRotated()
		}
	}
	med := func(v []float64) float64 {
		s := slices.Clone(v)
		slices.Sort(s)
		return s[len(s)/2]
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d rounds, %v a point, 4 KiB GETs, medians over rounds\n", rounds, dur)
	fmt.Fprintf(&out, "%-15s %10s %10s %10s %12s %12s %12s %12s\n", "target", "1c p50 µs", "1c p99 µs", "1c ops/s",
		"1c cpu µs", "64c ops/s", "64c p50 µs", "64c cpu µs")
	for _, t := range targets {
		one, many := res[t.name][1], res[t.name][64]
		fmt.Fprintf(&out, "%-15s %10.0f %10.0f %10.0f %12.1f %12.0f %12.0f %12.1f\n", t.name, med(one.p50), med(one.p99), med(one.rate),
			med(one.cpu), med(many.rate), med(many.p50), med(many.cpu))
	}
	ratios := func(what string, num, den []float64) []float64 {
		r := make([]float64, len(num))
		for i := range num {
			r[i] = num[i] / den[i]
		}
		parts := make([]string, len(r))
		for i, x := range r {
			parts[i] = fmt.Sprintf("%.2f", x)
		}
		fmt.Fprintf(&out, "%s by round: %s (median %.2f)\n", what, strings.Join(parts, ", "), med(r))
		return r
	}
	fmt.Fprintf(&out, "1 connection in rotation (one request to each target in turn), p50 µs, median over rounds:")
	for _, t := range targets {
		fmt.Fprintf(&out, " %s %.0f", t.name, med(rotated[t.name]))
	}
	fmt.Fprintln(&out)
	h, n := res["hoard-local"], res["net-http"]
	r1 := ratios("hoard-local / net-http p50, 1 connection", h[1].p50, n[1].p50)
	r1r := ratios("hoard-local / net-http p50, 1 connection in rotation", rotated["hoard-local"], rotated["net-http"])
	r64 := ratios("hoard-local / net-http ops/s, 64 connections", h[64].rate, n[64].rate)
	ratios("fasthttp / net-http p50, 1 connection", res["fasthttp"][1].p50, n[1].p50)
	ratios("fasthttp / net-http ops/s, 64 connections", res["fasthttp"][64].rate, n[64].rate)
	ratios("net-http-tuned / net-http ops/s, 64 connections", res["net-http-tuned"][64].rate, n[64].rate)
	ratios("gnet-raw / net-http ops/s, 64 connections", res["gnet-raw"][64].rate, n[64].rate)
	c64 := ratios("net-http / hoard-local CPU per request, 64 connections", n[64].cpu, h[64].cpu)
	ratios("net-http / fasthttp CPU per request, 64 connections", n[64].cpu, res["fasthttp"][64].cpu)
	ratios("net-http / fasthttp CPU per request, 1 connection", n[1].cpu, res["fasthttp"][1].cpu)
	fmt.Print(out.String())
	b.ReportMetric(med(r1), "hoard/net-http-p50-1c")
	b.ReportMetric(med(r1r), "hoard/net-http-p50-1c-rotated")
	b.ReportMetric(med(r64), "hoard/net-http-ops-64c")
	b.ReportMetric(med(c64), "net-http/hoard-cpu-64c")
}

// selfCPU is the process's user and system CPU time so far: the
// generator's and every server's, which share the process.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// httpTarget is one server under test: its name and the URL to GET.
type httpTarget struct{ name, url string }

// expectRead is the X-Hoard-Read a target's answers must carry: a local
// hit from the S3 front, nothing from the others.
func expectRead(t httpTarget) string {
	if t.name == "hoard-local" {
		return string(cachelet.LocalHit)
	}
	return ""
}

// startHTTPTargets starts every server of BenchmarkHTTPServers on
// loopback, each answering GETs with data.
func startHTTPTargets(b *testing.B, data []byte) []httpTarget {
	var ts []httpTarget
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		return ln
	}

	bare, err := startBareServer(data)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(bare.Close)
	ts = append(ts, httpTarget{"net-http", bare.url})

	// net/http with the least header work: values assigned under their
	// canonical keys, no Date (net/http formats one per response).
	length := []string{strconv.Itoa(len(data))}
	tuned := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h["Content-Length"] = length
		h["Date"] = nil
		_, _ = w.Write(data)
	})}
	tln := listen()
	go func() { _ = tuned.Serve(tln) }()
	b.Cleanup(func() { _ = tuned.Close() })
	ts = append(ts, httpTarget{"net-http-tuned", "http://" + tln.Addr().String() + "/" + tpHotKey})

	fs := &fasthttp.Server{ReadTimeout: 10 * time.Second, NoDefaultDate: true, NoDefaultContentType: true,
		Handler: func(c *fasthttp.RequestCtx) { c.Response.SetBodyRaw(data) }}
	fln := listen()
	go func() { _ = fs.Serve(fln) }()
	b.Cleanup(func() { _ = fs.Shutdown() })
	ts = append(ts, httpTarget{"fasthttp", "http://" + fln.Addr().String() + "/" + tpHotKey})

	ts = append(ts, httpTarget{"gnet-raw", startGnetRaw(b, data)})
	ts = append(ts, httpTarget{"hoard-local", startHoardFront(b, data)})
	return ts
}

// gnetRaw answers every complete request head on a connection with one
// prebuilt 200 response carrying data, from gnet's event loops.
type gnetRaw struct {
	gnet.BuiltinEventEngine
	resp []byte
	port chan int
	eng  gnet.Engine
}

func (g *gnetRaw) OnBoot(eng gnet.Engine) gnet.Action {
	g.eng = eng
	port := 0
	if fd, err := eng.Dup(); err == nil {
		if sa, err := syscall.Getsockname(fd); err == nil {
			if in4, ok := sa.(*syscall.SockaddrInet4); ok {
				port = in4.Port
			}
		}
		_ = syscall.Close(fd)
	}
	g.port <- port
	return gnet.None
}

var headEnd = []byte("\r\n\r\n")

func (g *gnetRaw) OnTraffic(c gnet.Conn) gnet.Action {
	buf, _ := c.Peek(-1)
	used := 0
	for {
		i := bytes.Index(buf[used:], headEnd)
		if i < 0 {
			break
		}
		used += i + len(headEnd)
		if _, err := c.Write(g.resp); err != nil {
			return gnet.Close
		}
	}
	if used > 0 {
		_, _ = c.Discard(used)
	}
	if c.InboundBuffered() > 64<<10 {
		return gnet.Close // a head this long is not one of ours
	}
	return gnet.None
}

// startGnetRaw runs a gnetRaw server on a port of the kernel's choosing
// and returns its URL.
func startGnetRaw(b *testing.B, data []byte) string {
	g := &gnetRaw{port: make(chan int, 1),
		resp: append([]byte("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(data))+"\r\n\r\n"), data...)}
	done := make(chan error, 1)
	go func() {
		done <- gnet.Run(g, "tcp://127.0.0.1:0", gnet.WithMulticore(true), gnet.WithReusePort(false), gnet.WithLogLevel(logging.ErrorLevel))
	}()
	var port int
	select {
	case port = <-g.port:
	case err := <-done:
		b.Fatalf("gnet: %v", err)
	case <-time.After(10 * time.Second):
		b.Fatal("gnet did not start in 10s")
	}
	if port == 0 {
		b.Fatal("gnet: no port")
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.eng.Stop(ctx)
	})
	return fmt.Sprintf("http://127.0.0.1:%d/%s", port, tpHotKey)
}

// benchCreds knows the benchmark's client key.
type benchCreds struct{}

func (benchCreds) Secret(ak string) (string, bool) { return clientSec, ak == clientKey }

// startHoardFront serves the S3 front over a cachelet reading locally
// (read mode local: a hit asks no store) with data cached under
// benchBucket/tpHotKey, from a net/http server configured as `hoard
// serve` configures its own, and returns a presigned GET of it.
func startHoardFront(b *testing.B, data []byte) string {
	ctx := context.Background()
	st := memstore.New()
	if err := st.CreateBucket(ctx, benchBucket, benchRegion); err != nil {
		b.Fatal(err)
	}
	if _, err := st.Put(ctx, benchBucket, tpHotKey, bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	cl, err := cachelet.New(cachelet.Config{Cache: cache.Config{Budget: 64 << 20}, ReadMode: cachelet.ReadLocal}, st, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	ver, err := s3auth.New(s3auth.Config{Region: benchRegion}, benchCreds{})
	if err != nil {
		b.Fatal(err)
	}
	api, err := s3api.New(s3api.Config{Region: benchRegion}, cl, ver, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: api, ConnContext: onewrite.ConnContext, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(onewrite.Listen(ln)) }()
	b.Cleanup(func() { _ = srv.Close() })
	core, err := NewS3Client("http://"+ln.Addr().String(), clientKey, clientSec, benchRegion)
	if err != nil {
		b.Fatal(err)
	}
	url, err := presign(ctx, core, OpGet, tpHotKey)
	if err != nil {
		b.Fatal(err)
	}
	// The miss that fills the cache.
	if _, err := NewS3Getter(core, benchBucket).Get(ctx, tpHotKey); err != nil && !errors.Is(err, context.Canceled) {
		b.Fatal(err)
	}
	return url
}
