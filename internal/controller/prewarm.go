package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/prewarm"
	"github.com/hoard-io/hoard/internal/store"
)

// maxMetadataRecords bounds the unload records kept per application; older
// ones are deleted when a selection is made.
const maxMetadataRecords = 200

// metadataLocation is where an application's instances save their access
// metadata when they unload: in the platform's bucket, not charged to the
// application's cache.
func (c *Controller) metadataLocation(app string) api.Location {
	return api.Location{Bucket: c.cfg.SystemBucket, Prefix: "meta/" + app + "/"}
}

// SelectPrewarm merges the application's unload records within the window
// its invocation frequency sizes and selects what to pre-warm. Records
// beyond the newest maxMetadataRecords, or older than the longest window,
// are deleted.
func (c *Controller) SelectPrewarm(ctx context.Context, appName string) (*api.Selection, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	meanGap := a.meanGap()
	budget := int64(a.spec.Cache.Budget) * int64(max(a.current(), 1))
	c.mu.Unlock()
	cfg := prewarm.Config{MaxBytes: budget}
	window := cfg.Window(meanGap)
	loc := c.metadataLocation(appName)
	now := c.clk.Now()

	var keys []string
	opts := store.ListOptions{Prefix: loc.Prefix}
	for {
		page, err := c.cfg.Store.List(ctx, loc.Bucket, opts)
		if errors.Is(err, store.ErrNoSuchBucket) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("listing access metadata: %w", err)
		}
		for _, o := range page.Objects {
			keys = append(keys, o.Key)
		}
		if !page.IsTruncated {
			break
		}
		opts.ContinuationToken = page.NextContinuationToken
	}
	// Keys sort by unload time (zero-padded nanoseconds): newest last.
	var stale []string
	if len(keys) > maxMetadataRecords {
		stale, keys = keys[:len(keys)-maxMetadataRecords], keys[len(keys)-maxMetadataRecords:]
	}
	var records []prewarm.Record
	for _, k := range keys {
		body, _, _, err := c.cfg.Store.Get(ctx, loc.Bucket, k, store.GetOptions{})
		if err != nil {
			continue
		}
		var r prewarm.Record
		err = json.NewDecoder(io.LimitReader(body, 64<<20)).Decode(&r)
		body.Close()
		if err != nil || r.Version != prewarm.RecordVersion {
			c.log.Warn("skipping an unreadable access metadata record", "key", k, "err", err)
			continue
		}
		if now.Sub(r.UnloadedAt) > cfg.MaxWindowOrDefault() {
			stale = append(stale, k)
			continue
		}
		records = append(records, r)
	}
	if len(stale) > 0 {
		if _, err := c.cfg.Store.DeleteMany(ctx, loc.Bucket, stale); err != nil {
			c.log.Warn("deleting old access metadata", "app", appName, "err", err)
		}
	}
	selected, err := prewarm.Select(prewarm.Merge(records, now, window), cfg)
	if err != nil {
		return nil, err
	}
	sel := &api.Selection{Records: len(records), Window: window.String(), Objects: selected}
	for _, s := range selected {
		sel.Bytes += s.Size
	}
	return sel, nil
}

// meanGap is the mean time between the application's recent invocations
// (0 when unknown); the caller holds c.mu.
func (a *app) meanGap() time.Duration {
	var first, last time.Time
	n := 0
	for _, r := range a.records {
		if r.Trigger == "pipeline" {
			continue
		}
		if first.IsZero() {
			first = r.Start
		}
		last = r.Start
		n++
	}
	if n < 2 {
		return 0
	}
	return last.Sub(first) / time.Duration(n-1)
}

// Preload makes sure the application has an idle instance of its deployed
// version, starting one if needed, and with warm set pre-warms it from the
// application's access history: every instance's cachelet fetches the
// selected objects it owns, while idle. It returns the selection (nil
// without warm).
func (c *Controller) Preload(ctx context.Context, appName string, warm bool) (*api.Selection, error) {
	return c.preload(ctx, appName, warm)
}

// preloadNow is the keep-alive policy's scheduled pre-load: an instance
// loaded and pre-warmed before the next invocation is expected.
func (c *Controller) preloadNow(ctx context.Context, appName string) (*api.Selection, error) {
	c.log.Info("pre-loading ahead of the next expected invocation", "app", appName)
	if a, err := c.app(appName); err == nil {
		c.mu.Lock()
		a.event(c.clk.Now(), "preload", "pre-loading ahead of the next expected invocation (%s)", a.decision.Reason)
		c.mu.Unlock()
	}
	return c.preload(ctx, appName, true)
}

func (c *Controller) preload(ctx context.Context, appName string, warm bool) (*api.Selection, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	in := a.idle()
	c.mu.Unlock()
	if in == nil {
		got, _, err := c.acquire(ctx, a)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		got.preloaded = true
		c.mu.Unlock()
		c.releaseIdle(a, got)
		in = got
	}
	if !warm {
		return nil, nil
	}
	sel, err := c.SelectPrewarm(ctx, appName)
	if err != nil {
		return nil, err
	}
	sel.Instance = in.id
	if len(sel.Objects) == 0 {
		return sel, nil
	}
	keys := make([]api.Key, len(sel.Objects))
	for i, o := range sel.Objects {
		keys[i] = api.Key{Bucket: o.Bucket, Key: o.Key}
	}
	// Each cachelet fetches the keys it owns: ask every instance.
	c.mu.Lock()
	var targets []*inst
	for _, x := range a.instances {
		if x.rev == a.rec.Package.SHA256 {
			targets = append(targets, x)
		}
	}
	c.mu.Unlock()
	for _, x := range targets {
		if err := c.agents.at(x.agentURL).Prewarm(ctx, x.id, api.PrewarmRequest{Keys: keys}); err != nil {
			c.log.Warn("pre-warm request failed", "instance", x.id, "err", err)
		}
	}
	c.mu.Lock()
	a.event(c.clk.Now(), "prewarm", "%d objects (%d bytes) selected from %d unload records over %s", len(keys), sel.Bytes, sel.Records, sel.Window)
	c.mu.Unlock()
	c.m.prewarms.WithLabelValues(appName).Inc()
	c.m.prewarmObjects.WithLabelValues(appName).Add(float64(len(keys)))
	c.log.Info("pre-warming", "app", appName, "objects", len(keys), "bytes", sel.Bytes, "records", sel.Records, "window", sel.Window)
	return sel, nil
}
