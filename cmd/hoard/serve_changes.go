package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
)

// changeFlags are `hoard serve`'s settings for writers outside hoard
// (cachelet.ExternalConfig, ADR 0028).
type changeFlags struct {
	on        bool
	heartbeat time.Duration
	probe     bool
}

func (c *changeFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.on, "store-changes", false, "follow the store's change notifications (MinIO's listen API) for the buckets read, dropping cached copies of objects changed outside hoard; while a bucket's subscription is not up, reads that would trust a cached copy validate it with the store")
	fs.BoolVar(&c.probe, "store-changes-probe", false, "with --store-changes: write a small probe object under .hoard/changes/ in each bucket followed, every heartbeat/6, whose notifications keep a store's buffered change stream moving (needs write access; removed on exit)")
	fs.DurationVar(&c.heartbeat, "store-changes-heartbeat", 6*time.Second, "with --store-changes: a subscription silent this long is taken as broken (the store pings three times as often; at least 3s)")
}

func (c *changeFlags) apply(cfg *instance.Config) error {
	if !c.on {
		return nil
	}
	if c.heartbeat < 3*time.Second {
		return fmt.Errorf("%w: --store-changes-heartbeat must be at least 3s", errUsage)
	}
	cfg.Cachelet.External = &cachelet.ExternalConfig{Heartbeat: c.heartbeat, Probe: c.probe}
	return nil
}
