package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// ChangesConfig configures `hoard bench changes`: writers outside hoard
// (ADR 28) measured. One cachelet under `owner` follows the store's change
// notifications, one under `strong` checks every read, both over the same
// shaped store link.
type ChangesConfig struct {
	MinIOBinary string
	// Feed is how the owner cachelet follows the store's changes:
	// "listen" (the default: MinIO's listen API, ADR 28) or "relay"
	// (MinIO's webhook to a change relay, which the cachelet follows over
	// GET /v1/changes, ADR 33; no filler then).
	Feed string
	// Latency is the store link's one-way delay; default 10 ms (a 20 ms
	// round trip, the link of issue 16's trace replay).
	Latency time.Duration
	// Writes straight to the store whose notification delay is timed;
	// default 50.
	Writes int
	// Reads of the cached object through each cachelet, alternated;
	// default 300.
	Reads int
	// Size of the object; default 4 KiB.
	Size int64
	// FillerInterval: the pause between filler writes to another key of
	// the bucket, whose notifications push the store's change stream out
	// of the bundled MinIO's buffers (it never flushes the stream; see
	// docs/design/external-writers.md). Default 10 ms; negative: none.
	FillerInterval time.Duration
	// Poll is the pause between reads while waiting for a write to be
	// seen; default 2 ms.
	Poll    time.Duration
	TempDir string
	// Progress receives progress lines; nil discards.
	Progress io.Writer
	Log      *slog.Logger
}

func (c *ChangesConfig) defaults() {
	if c.Latency <= 0 {
		c.Latency = 10 * time.Millisecond
	}
	if c.Writes <= 0 {
		c.Writes = 50
	}
	if c.Reads <= 0 {
		c.Reads = 300
	}
	if c.Size <= 0 {
		c.Size = 4 << 10
	}
	if c.Feed == "" {
		c.Feed = FeedListen
	}
	if c.FillerInterval == 0 {
		c.FillerInterval = 10 * time.Millisecond
	}
	if c.Feed == FeedRelay {
		c.FillerInterval = -1 // the webhook posts each event at once
	}
	if c.Poll <= 0 {
		c.Poll = 2 * time.Millisecond
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// fillerPad is each filler write's user metadata: it rides in every
// notification, so a few writes fill the store's stream buffer.
const fillerPad = 1800

// ChangesReport is what `hoard bench changes` measured in one run.
type ChangesReport struct {
	Feed   string `json:"feed"`
	Link   string `json:"link"`
	Size   int64  `json:"size"`
	Filler string `json:"filler"`
	// Delay: from a write's answer (straight from MinIO) to the first
	// read through the `owner` cachelet that returned its bytes.
	Delay Summary `json:"delay"`
	// StaleReads: reads during those waits that returned the older
	// version (the window the delay measures; never after it).
	StaleReads int `json:"stale_reads"`
	// StrongStale: reads through the `strong` cachelet, made right after
	// each write was answered, that returned the older version (want 0).
	StrongStale int `json:"strong_stale"`
	// Invalidated is the owner cachelet's count of copies dropped by a
	// notification; StoreToDrop its mean time from the store's event time
	// to the drop (hoard_cachelet_store_change_delay_seconds).
	Invalidated float64       `json:"invalidated"`
	StoreToDrop time.Duration `json:"store_to_drop_ns"`
	// Owner and Strong are the hits of the cached object, alternated.
	Owner  Summary `json:"owner"`
	Strong Summary `json:"strong"`
	// OwnerOutcomes and StrongOutcomes count x-hoard-read of those reads;
	// Unfollowed counts owner reads marked x-hoard-changes (validated
	// because the subscription was down).
	OwnerOutcomes  map[string]int `json:"owner_outcomes"`
	StrongOutcomes map[string]int `json:"strong_outcomes"`
	Unfollowed     int            `json:"unfollowed"`
}

// RunChanges runs the experiment: MinIO behind a link of cfg.Latency each
// way; a cachelet under `owner` with --store-changes and one under
// `strong`, in process. It waits until the owner's subscription is up,
// times alternated reads of one cached object through each, then writes
// new versions straight to MinIO one at a time and reads through the
// owner every cfg.Poll until the new bytes come back.
func RunChanges(ctx context.Context, cfg ChangesConfig) (*ChangesReport, error) {
	cfg.defaults()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-changes-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	say := func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }
	if cfg.Feed != FeedListen && cfg.Feed != FeedRelay {
		return nil, fmt.Errorf("bench changes: feed %q: want %s or %s", cfg.Feed, FeedListen, FeedRelay)
	}

	var relay *changeRelay
	var relayLn net.Listener
	var minioEnv []string
	if cfg.Feed == FeedRelay {
		if relay, relayLn, err = newChangeRelay(); err != nil {
			return nil, err
		}
		defer relay.close()
		defer relayLn.Close()
		minioEnv = relay.webhookEnv()
	}
	srv, err := localstore.StartMinIO(ctx, localstore.Config{Binary: cfg.MinIOBinary, DataDir: filepath.Join(tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: "benchchanges", SecretKey: "benchchanges-secret", Logger: cfg.Log, Env: minioEnv})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	shaper, err := netshape.Start(ctx, netshape.Config{Logger: cfg.Log, LogFile: filepath.Join(tmp, "toxiproxy.log")})
	if err != nil {
		return nil, err
	}
	defer shaper.Close()
	link := netshape.Link{Latency: cfg.Latency}
	px, err := shaper.Shape(ctx, "store", srv.Endpoint(), link, link)
	if err != nil {
		return nil, err
	}
	rep := &ChangesReport{Feed: cfg.Feed, Link: link.String() + " each way", Size: cfg.Size, Filler: "none",
		OwnerOutcomes: map[string]int{}, StrongOutcomes: map[string]int{}}
	if cfg.FillerInterval > 0 {
		rep.Filler = fmt.Sprintf("a write of another key every %v (%d B of metadata)", cfg.FillerInterval, fillerPad)
	}

	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	const bucket, key = "changesbench", "table/part-0"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return nil, err
	}
	version := func(i int) []byte {
		b := bytes.Repeat([]byte{'.'}, int(cfg.Size))
		copy(b, fmt.Sprintf("version %08d", i))
		return b
	}
	put := func(i int) error {
		v := version(i)
		_, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(v), int64(len(v)), "", "", minio.PutObjectOptions{})
		return err
	}
	if err := put(0); err != nil {
		return nil, err
	}
	if relay != nil {
		if err := relay.start(ctx, relayLn, srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), bucket, cfg.Log); err != nil {
			return nil, err
		}
	}

	start := func(consistency string, follow bool) (*instance.Instance, *minio.Core, error) {
		s, err := cachelet.ParseConsistency(consistency)
		if err != nil {
			return nil, nil, err
		}
		ccfg := cachelet.Config{Cache: cache.Config{Budget: 64 << 20}}
		s.Apply(&ccfg)
		if follow {
			ccfg.External = &cachelet.ExternalConfig{Heartbeat: 3 * time.Second}
			if relay != nil {
				ccfg.External.Listener = relay.client()
			}
		}
		in, err := instance.Start(ctx, instance.Config{
			MetricsListen: "off", Region: benchRegion, AccessKey: clientKey, SecretKey: clientSec,
			Store:    s3store.Config{Endpoint: px.Endpoint, AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey(), Region: benchRegion},
			Cachelet: ccfg,
		}, cfg.Log)
		if err != nil {
			return nil, nil, err
		}
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			closeInstance(in)
			return nil, nil, err
		}
		return in, core, nil
	}
	owner, ownerC, err := start("owner", true)
	if err != nil {
		return nil, err
	}
	defer closeInstance(owner)
	strong, strongC, err := start("strong", false)
	if err != nil {
		return nil, err
	}
	defer closeInstance(strong)

	filled := make(chan struct{})
	go func() {
		defer close(filled)
		if cfg.FillerInterval < 0 {
			return
		}
		pad := map[string]string{"pad": strings.Repeat("f", fillerPad)}
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = direct.PutObject(ctx, bucket, fmt.Sprintf("filler/%d", i%8), bytes.NewReader(nil), 0, "", "",
				minio.PutObjectOptions{UserMetadata: pad})
			select {
			case <-ctx.Done():
			case <-time.After(cfg.FillerInterval):
			}
		}
	}()
	defer func() { cancel(); <-filled }()

	// read returns the version read through core and its answer's header.
	rbuf := make([]byte, readBufSize)
	read := func(core *minio.Core) (int, map[string]string, time.Duration, error) {
		t0 := time.Now()
		body, _, hdr, err := core.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		if err != nil {
			return 0, nil, 0, err
		}
		var b bytes.Buffer
		_, err = io.CopyBuffer(&b, body, rbuf)
		body.Close()
		took := time.Since(t0)
		if err != nil {
			return 0, nil, 0, err
		}
		v := -1
		if int64(b.Len()) != cfg.Size {
			return 0, nil, 0, fmt.Errorf("read %d bytes, want %d", b.Len(), cfg.Size)
		}
		if _, err := fmt.Sscanf(b.String(), "version %08d", &v); err != nil || !bytes.Equal(b.Bytes(), version(v)) {
			return 0, nil, 0, fmt.Errorf("unexpected bytes %.24q", b.String())
		}
		return v, map[string]string{"read": hdr.Get("x-hoard-read"), "changes": hdr.Get("x-hoard-changes")}, took, nil
	}

	// The owner's subscription up (the first read subscribes).
	deadline := time.Now().Add(60 * time.Second)
	for gaugeValue(owner.Registry(), "hoard_cachelet_store_subscriptions_up") != 1 {
		if time.Now().After(deadline) {
			return rep, errors.New("the owner cachelet's change subscription never came up (is the store's change stream moving?)")
		}
		if _, _, _, err := read(ownerC); err != nil {
			return rep, fmt.Errorf("owner: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	say("subscription up; store link %s, filler: %s", rep.Link, rep.Filler)

	// Hits, alternated.
	for _, c := range []*minio.Core{ownerC, strongC} {
		if _, _, _, err := read(c); err != nil { // cached again after the drop on subscribing
			return rep, err
		}
	}
	var ownT, strT []time.Duration
	for range cfg.Reads {
		_, h, d, err := read(ownerC)
		if err != nil {
			return rep, fmt.Errorf("owner: %w", err)
		}
		ownT = append(ownT, d)
		rep.OwnerOutcomes[h["read"]]++
		if h["changes"] != "" {
			rep.Unfollowed++
		}
		_, h, d, err = read(strongC)
		if err != nil {
			return rep, fmt.Errorf("strong: %w", err)
		}
		strT = append(strT, d)
		rep.StrongOutcomes[h["read"]]++
	}
	rep.Owner, rep.Strong = Summarize(ownT, cfg.Size), Summarize(strT, cfg.Size)
	say("hits: owner+changes p50 %s p99 %s; strong p50 %s p99 %s", FormatDuration(rep.Owner.P50), FormatDuration(rep.Owner.P99),
		FormatDuration(rep.Strong.P50), FormatDuration(rep.Strong.P99))

	// Writes straight to the store, one at a time.
	var delays []time.Duration
	for i := 1; i <= cfg.Writes; i++ {
		if err := put(i); err != nil {
			return rep, err
		}
		written := time.Now()
		if v, _, _, err := read(strongC); err != nil {
			return rep, fmt.Errorf("strong: %w", err)
		} else if v != i {
			rep.StrongStale++
		}
		deadline := written.Add(30 * time.Second)
		for {
			v, _, _, err := read(ownerC)
			if err != nil {
				return rep, fmt.Errorf("owner: %w", err)
			}
			if v == i {
				delays = append(delays, time.Since(written))
				break
			}
			if v > i || v < i-1 {
				return rep, fmt.Errorf("owner served version %d while waiting for %d", v, i)
			}
			rep.StaleReads++
			if time.Now().After(deadline) {
				return rep, fmt.Errorf("write %d straight to the store never seen through the owner cachelet", i)
			}
			time.Sleep(cfg.Poll)
		}
		if _, _, _, err := read(ownerC); err != nil { // cached again
			return rep, err
		}
	}
	rep.Delay = Summarize(delays, 0)
	rep.Invalidated = counterValue(owner.Registry(), "hoard_cachelet_store_changes_total", "action", "invalidated")
	if sum, n := histogramValue(owner.Registry(), "hoard_cachelet_store_change_delay_seconds"); n > 0 {
		rep.StoreToDrop = time.Duration(sum / float64(n) * float64(time.Second))
	}
	say("outside writes unseen for p50 %s p99 %s max %s (%d writes); strong stale reads %d",
		FormatDuration(rep.Delay.P50), FormatDuration(rep.Delay.P99), FormatDuration(rep.Delay.Max), len(delays), rep.StrongStale)
	return rep, nil
}

// gaugeValue reads a gauge without labels from reg; -1 when absent.
func gaugeValue(reg prometheus.Gatherer, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// counterValue reads the counter name{label=value} from reg; 0 when absent.
func counterValue(reg prometheus.Gatherer, name, label, value string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// histogramValue reads a histogram without labels from reg: its sum and
// count.
func histogramValue(reg prometheus.Gatherer, name string) (float64, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount()
		}
	}
	return 0, 0
}
