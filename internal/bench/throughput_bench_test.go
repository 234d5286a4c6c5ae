package bench

import (
	"net"
	"net/http"
	"testing"
	"time"
)

// BenchmarkThroughputGenerator measures the load generator's own cost:
// one connection's GETs (and PUTs) of 4 KiB against the bare HTTP server
// in this process, the ceiling `hoard bench throughput` reports as
// bare-http. allocs/op is what the generator and the server allocate
// together per request.
func BenchmarkThroughputGenerator(b *testing.B) {
	data := make([]byte, DefaultThroughputSize)
	srv, err := startBareServer(data)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for _, op := range []string{OpGet, OpPut} {
		b.Run(op, func(b *testing.B) {
			do, err := httpOp(b.Context(), client, op, srv.url, data, int64(len(data)), "")
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := do(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
