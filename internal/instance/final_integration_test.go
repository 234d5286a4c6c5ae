//go:build integration

package instance_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/localstore"
)

// TestFinalOutputsServe: `hoard serve --final-outputs` over real MinIO,
// under `local` (written back in the background) and `strong`. Writes
// under the final-outputs prefix reach the store and leave memory (the
// next read of each is a miss with the right bytes); a write elsewhere is
// kept (its next read is a hit).
func TestFinalOutputsServe(t *testing.T) {
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	ctx := context.Background()
	const bucket = "results"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, consistency := range []string{"local", "strong"} {
		t.Run(consistency, func(t *testing.T) {
			p := newHoardProc(t, dir, "fin", i)
			p.start(t, bin, "fin", "", srv.Endpoint(), "--consistency", consistency, "--final-outputs", bucket+"/out/")
			(&faultCluster{}).waitHealthy(t, p)
			p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
			const n = 5
			val := func(k string) []byte { return []byte(fmt.Sprintf("%s written under %s", k, consistency)) }
			for j := range n {
				k := fmt.Sprintf("out/%s-%d", consistency, j)
				if err := putValue(ctx, p.client, bucket, k, val(k)); err != nil {
					t.Fatal(err)
				}
			}
			kept := "in/" + consistency
			if err := putValue(ctx, p.client, bucket, kept, val(kept)); err != nil {
				t.Fatal(err)
			}
			when := "written"
			if consistency == "local" {
				when = "persisted"
			}
			metric := fmt.Sprintf(`hoard_cachelet_final_outputs_dropped_total{when=%q}`, when)
			if got := p.metricReaches(t, metric, float64(n)); got < float64(n) {
				t.Fatalf("%s = %v, want %d", metric, got, n)
			}
			for j := range n {
				k := fmt.Sprintf("out/%s-%d", consistency, j)
				stored, err := getValue(ctx, direct, bucket, k)
				if err != nil || string(stored) != string(val(k)) {
					t.Fatalf("store has %q (%v) for %s", stored, err, k)
				}
				got, how := getRead(t, p.endpoint(), bucket, k)
				if string(got) != string(val(k)) || how != "local_miss" {
					t.Errorf("read of final output %s: %q as %s, want its bytes as local_miss", k, got, how)
				}
			}
			if got, how := getRead(t, p.endpoint(), bucket, kept); string(got) != string(val(kept)) || how != "local_hit" {
				t.Errorf("read of %s written outside the final outputs: %q as %s, want a local_hit", kept, got, how)
			}
		})
	}
}
