package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/instance"
)

// changeFlags are `hoard serve`'s settings for writers outside hoard
// (cachelet.ExternalConfig, ADR 0028, ADR 0033).
type changeFlags struct {
	mode      changesMode
	heartbeat time.Duration
	probe     bool
}

// changesMode is --store-changes: off, listen, relay or auto; standing
// alone (true) it is listen, as before it had modes.
type changesMode cacheconfig.ChangesMode

func (m *changesMode) String() string {
	if m == nil || *m == changesMode(cacheconfig.ChangesOff) {
		return "off"
	}
	return string(*m)
}

func (m *changesMode) Set(s string) error {
	v, err := cacheconfig.ParseChangesMode(s)
	if err != nil {
		return fmt.Errorf("%q: want off, listen, relay or auto", s)
	}
	*m = changesMode(v)
	return nil
}

// IsBoolFlag lets --store-changes stand alone (listen).
func (m *changesMode) IsBoolFlag() bool { return true }

// register registers the flags; def (a document's cache.store_changes,
// an application's spec) is --store-changes's default.
func (c *changeFlags) register(fs *flag.FlagSet, def cacheconfig.ChangesMode) {
	c.mode = changesMode(def)
	fs.Var(&c.mode, "store-changes", "follow the store's changes for the buckets read, dropping cached copies of objects changed outside hoard: off, listen (the store's change stream, MinIO's listen API), relay (the controller's relay of the store's event notifications, GET /v1/changes at --platform-url with the application's token) or auto (relay with --platform-url, listen without); standing alone: listen. While a bucket's subscription is not up, reads that would trust a cached copy validate it with the store")
	fs.BoolVar(&c.probe, "store-changes-probe", false, "with --store-changes listen: write a small probe object under .hoard/changes/ in each bucket followed, every heartbeat/6, whose notifications keep a store's buffered change stream moving (needs write access; removed on exit)")
	fs.DurationVar(&c.heartbeat, "store-changes-heartbeat", 6*time.Second, "with --store-changes: a subscription silent this long is taken as broken (the store or controller pings three times as often; at least 3s)")
}

func (c *changeFlags) apply(cfg *instance.Config) error {
	mode := cacheconfig.ChangesMode(c.mode).Resolve(cfg.PlatformURL != "")
	if mode == cacheconfig.ChangesOff {
		return nil
	}
	if c.heartbeat < 3*time.Second {
		return fmt.Errorf("%w: --store-changes-heartbeat must be at least 3s", errUsage)
	}
	if mode == cacheconfig.ChangesRelay {
		if cfg.PlatformURL == "" || cfg.PlatformToken == "" {
			return fmt.Errorf("%w: --store-changes relay needs the controller: --platform-url and the application's token (HOARD_PLATFORM_TOKEN)", errUsage)
		}
		if c.probe {
			return fmt.Errorf("%w: --store-changes-probe is for --store-changes listen (the controller probes the relay itself)", errUsage)
		}
	}
	cfg.ChangesRelay = mode == cacheconfig.ChangesRelay
	cfg.Cachelet.External = &cachelet.ExternalConfig{Heartbeat: c.heartbeat, Probe: c.probe}
	return nil
}
