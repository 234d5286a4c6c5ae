package onewrite

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"
)

// BenchmarkHold times GETs over one kept-alive connection to two net/http
// servers answering the same bytes with S3's headers, one holding its
// answers (Listen, ConnContext, Hold) and one not, a request to each in
// turn so that load from elsewhere falls on both alike; it reports each
// one's p50 and their ratio:
//
//	go test -run XXX -bench Hold -benchtime 20000x ./internal/onewrite
func BenchmarkHold(b *testing.B) {
	for _, size := range []int{4 << 10, 16 << 10, 48 << 10} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			body := payload(size)
			length := strconv.Itoa(size)
			h := func(hold bool) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hd := w.Header()
					hd["Content-Length"] = []string{length}
					hd["Content-Type"] = []string{"binary/octet-stream"}
					hd["Etag"] = []string{`"620f0b67a91f7f74151bc5be745b7110"`}
					hd["Last-Modified"] = []string{"Sun, 29 Nov 2026 20:57:41 GMT"}
					hd["Accept-Ranges"] = []string{"bytes"}
					hd["X-Amz-Request-Id"] = []string{"E28EE7DA9530DD42"}
					if hold {
						defer Hold(w, r, int64(size))()
					}
					_, _ = w.Write(body)
				})
			}
			var urls []string
			for _, hold := range []bool{false, true} {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					b.Fatal(err)
				}
				srv := &http.Server{Handler: h(hold), ReadHeaderTimeout: 10 * time.Second}
				if hold {
					srv.ConnContext = ConnContext
					ln = Listen(ln)
				}
				go func() { _ = srv.Serve(ln) }()
				b.Cleanup(func() { _ = srv.Close() })
				urls = append(urls, "http://"+ln.Addr().String()+"/")
			}
			tr := &http.Transport{MaxIdleConnsPerHost: 1, DisableCompression: true}
			b.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			buf := make([]byte, 64<<10)
			get := func(url string) time.Duration {
				start := time.Now()
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				n := 0
				for {
					m, err := resp.Body.Read(buf)
					n += m
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				resp.Body.Close()
				if n != size {
					b.Fatalf("%d bytes, want %d", n, size)
				}
				return time.Since(start)
			}
			var plain, held []time.Duration
			for b.Loop() {
				plain = append(plain, get(urls[0]))
				held = append(held, get(urls[1]))
			}
			slices.Sort(plain)
			slices.Sort(held)
			p, h50 := plain[len(plain)/2], held[len(held)/2]
			b.ReportMetric(float64(p.Nanoseconds())/1e3, "plain-p50-µs")
			b.ReportMetric(float64(h50.Nanoseconds())/1e3, "held-p50-µs")
			b.ReportMetric(float64(h50)/float64(p), "held/plain")
		})
	}
}
