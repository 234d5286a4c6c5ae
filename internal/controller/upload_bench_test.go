package controller

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// BenchmarkDeployPackage deploys a 256 MiB package of incompressible data
// over HTTP, streamed (spooled to a file, checked and stored from it),
// beside the same-run baseline of the earlier in-memory path without its
// 64 MiB limit (the body read whole, checked from memory, stored from a
// copy): time per deploy and the peak heap in use of the process (client
// and controller). The store keeps nothing of the package (sinkStore).
//
//	go test -run '^$' -bench DeployPackage -benchtime 3x ./internal/controller
func BenchmarkDeployPackage(b *testing.B) {
	const size = 256 << 20
	sink := &sinkStore{Store: memstore.New()}
	c, _, _ := setupWith(b, Config{Store: sink, UploadDir: b.TempDir()})
	path, pkg := bigApp(b, "model", size)
	inMemory := func(w http.ResponseWriter, r *http.Request) {
		data, err := io.ReadAll(r.Body)
		if err != nil {
			api.WriteError(w, http.StatusBadRequest, err)
			return
		}
		p, err := appspec.ReadPackage(data)
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		info, err := c.deploy(r.Context(), p, strings.NewReader(string(data)))
		if err != nil {
			api.WriteError(w, statusOf(err), err)
			return
		}
		api.WriteJSON(w, http.StatusCreated, info)
	}
	for _, way := range []struct {
		name string
		h    http.Handler
	}{{"in-memory", http.HandlerFunc(inMemory)}, {"streamed", c.Handler("admin-token-0123456789", nil)}} {
		b.Run(way.name, func(b *testing.B) {
			srv := httptest.NewServer(way.h)
			defer srv.Close()
			client := api.NewControllerClient(srv.URL, "admin-token-0123456789", nil)
			var total time.Duration
			var peak uint64
			n := 0
			for b.Loop() {
				var err error
				t0 := time.Now()
				base, top := peakHeap(func() { _, err = sendFile(context.Background(), client, path) })
				total += time.Since(t0)
				if err != nil {
					b.Fatal(err)
				}
				if sink.n != pkg.Size {
					b.Fatalf("stored %d bytes of %d", sink.n, pkg.Size)
				}
				peak = max(peak, top-base)
				n++
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/deploy")
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(pkg.Size)/(1<<20), "MiB-package")
		})
	}
}
