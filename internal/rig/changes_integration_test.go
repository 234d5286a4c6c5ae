//go:build integration

package rig

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

const relaySpec = `
name: rel
memory: 96MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
buckets: {data: read-write}
cache: {budget: 32MiB, consistency: owner, store_changes: relay}
functions:
  read: {handler: fns.read}
`

const relayOtherSpec = `
name: other
memory: 96MiB
keep_alive: 1h
buckets: {trig: read-write}
functions:
  read: {handler: fns.read}
`

// TestChangeRelayPlatform is issue 16's "writers outside hoard" on the
// platform, end to end, MinIO's webhook sending at once (no queue): an
// application under `owner` with store_changes: relay reads a key
// through its cachelet (cached, served from memory), the key is
// overwritten straight in MinIO, and once MinIO's webhook has told the
// controller and the controller its cachelet, the cachelet serves the
// new bytes; the delay is reported (p50/p99 over $HOARD_RELAY_WRITES
// writes, default 30). Then the store's notifications of the bucket are
// turned off (a webhook that stops delivering): the controller's probe
// notices, the cachelet's subscription goes down, and every read is
// validated: an outside write is served at once, never stale. Another
// application's token cannot follow the bucket, and no token at all is
// refused.
func TestChangeRelayPlatform(t *testing.T) {
	relayRun(t, false, 30)
}

// TestChangeRelayPlatformQueued is the delay with MinIO's webhook
// queueing its events on disk, as `hoard up` runs it: MinIO sends from
// its queue on a 3-second poll ($HOARD_RELAY_WRITES writes, default 5).
func TestChangeRelayPlatformQueued(t *testing.T) {
	relayRun(t, true, 5)
}

func relayRun(t *testing.T, queued bool, n int) {
	e := startPlatform(t, netshape.Link{}, queued)
	c := e.p.Controller
	e.deploy(t, relaySpec)
	e.deploy(t, relayOtherSpec)
	ctx := context.Background()
	e.put(t, "data", "k", "v0")
	// An instance, and its cachelet.
	if rec := invoke(t, c, "rel", "read", map[string]any{"bucket": "data", "keys": []string{"k"}}); !rec.OK {
		t.Fatalf("read: %+v", rec.Error)
	}
	var in api.InstanceInfo
	for _, i := range e.p.Agent.Instances() {
		if i.App == "rel" {
			in = i
		}
	}
	if in.Endpoint == "" {
		t.Fatal("no instance of rel")
	}
	creds, err := c.Credentials("rel")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := s3store.New(s3store.Config{Endpoint: in.Endpoint, AccessKey: creds.AccessKey, SecretKey: creds.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := func() string {
		t.Helper()
		body, _, _, err := cl.Get(ctx, "data", "k", store.GetOptions{})
		if err != nil {
			t.Fatalf("read through the cachelet: %v", err)
		}
		defer body.Close()
		b, err := io.ReadAll(body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	metric := func(name string) float64 { return scrape(t, in.MetricsURL)[name] }
	// The first read of the bucket subscribes; the relay confirms it
	// with a probe (within ProbeInterval + delivery).
	if got := read(); got != "v0" {
		t.Fatalf("read %q, want v0", got)
	}
	eventually(t, "the cachelet's relayed subscription up", 30*time.Second, func() bool {
		return metric("hoard_cachelet_store_subscriptions_up") == 1
	})

	t.Run("attackers", func(t *testing.T) {
		other, _ := c.Credentials("other")
		for _, tc := range []struct {
			name, token string
			want        int
		}{{"no token", "", 401}, {"another application's token", other.PlatformToken, 403}, {"the store's events token", testEventsToken, 403}} {
			req, _ := http.NewRequest(http.MethodGet, e.p.ControllerURL+"/v1/changes?bucket=data", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("%s following rel's bucket: %d, want %d", tc.name, resp.StatusCode, tc.want)
			}
		}
	})

	if s := os.Getenv("HOARD_RELAY_WRITES"); s != "" {
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("HOARD_RELAY_WRITES=%q", s)
		}
	}
	var delays, hits []time.Duration
	validationsBefore := metric("hoard_cachelet_unsubscribed_validations_total")
	prev := "v0"
	for i := 1; i <= n; i++ {
		// The cached copy is served from memory.
		t0 := time.Now()
		if got := read(); got != prev {
			t.Fatalf("write %d: read %q before the outside write, want %q", i, got, prev)
		}
		hits = append(hits, time.Since(t0))
		next := fmt.Sprintf("v%d-%s", i, strings.Repeat("x", i))
		e.put(t, "data", "k", next) // straight to MinIO
		written := time.Now()
		for {
			got := read()
			if got == next {
				break
			}
			if got != prev {
				t.Fatalf("write %d: read %q, neither the old %q nor the new %q", i, got, prev, next)
			}
			if time.Since(written) > 30*time.Second {
				t.Fatalf("write %d: still served the old bytes 30s after the outside write", i)
			}
			time.Sleep(time.Millisecond) // polling pace
		}
		delays = append(delays, time.Since(written))
		prev = next
	}
	if v := metric("hoard_cachelet_unsubscribed_validations_total"); v != validationsBefore {
		t.Errorf("%v reads validated while the subscription was up; want 0 (local hits)", v-validationsBefore)
	}
	if inv := metric(`hoard_cachelet_store_changes_total{action="invalidated"}`); inv < float64(n) {
		t.Errorf("%v copies invalidated by relayed notifications, want at least %d", inv, n)
	}
	t.Logf("queued webhook %v; notification delay (outside write acknowledged -> cachelet serves it), %d writes: p50 %s p99 %s max %s", queued, n,
		pctl(delays, 50), pctl(delays, 99), pctl(delays, 100))
	t.Logf("cached read through the cachelet while subscribed: p50 %s p99 %s", pctl(hits, 50), pctl(hits, 99))

	if queued {
		return
	}
	t.Run("webhook stopped: reads validated, nothing stale", func(t *testing.T) {
		u, _ := url.Parse(e.minio.Endpoint())
		mc, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4("storekey", "storesecret123", "")})
		if err != nil {
			t.Fatal(err)
		}
		if err := mc.RemoveAllBucketNotification(ctx, "data"); err != nil {
			t.Fatal(err)
		}
		stopped := time.Now()
		eventually(t, "the subscription down once the store stops notifying", 60*time.Second, func() bool {
			return metric("hoard_cachelet_store_subscriptions_up") == 0
		})
		t.Logf("subscription down %s after the store stopped notifying", time.Since(stopped).Round(time.Millisecond))
		var validated []time.Duration
		for i := range 10 {
			next := fmt.Sprintf("cut-%d", i)
			e.put(t, "data", "k", next)
			t0 := time.Now()
			if got := read(); got != next {
				t.Fatalf("with the relay cut, read %q right after the outside write of %q: stale", got, next)
			}
			validated = append(validated, time.Since(t0))
			for range 3 {
				t0 := time.Now()
				if got := read(); got != next {
					t.Fatalf("read %q, want %q", got, next)
				}
				validated = append(validated, time.Since(t0))
			}
		}
		if v := metric("hoard_cachelet_unsubscribed_validations_total"); v <= validationsBefore {
			t.Errorf("no read validated with the subscription down")
		}
		t.Logf("read through the cachelet with the relay cut (validated): p50 %s p99 %s", pctl(validated, 50), pctl(validated, 99))
	})
}

// pctl is the p-th percentile of ds (nearest rank).
func pctl(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s)+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(10 * time.Microsecond)
}
