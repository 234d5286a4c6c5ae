package instance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/hoard-io/hoard/internal/cachelet"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
	"github.com/hoard-io/hoard/internal/writelog"
)

// DrainLog delivers the writes of a durable log that no cachelet serves
// any more to the store, and returns: the log of instance cfg.ID in the
// disk tier's directory (writelog/ID), as a node agent finds it after
// that instance's cachelet crashed (ADR 0030, amendment "on the
// platform"). It opens no listener and joins no ring: a cachelet of its
// own, with only the log, the store (cfg.Store, the application's own
// identity) and the placeholder key, replays the log's writes with the
// guard every replay has (a write yields to a newer version another
// route put in the store) and waits until the store has them all, until
// ctx ends. It returns how many writes it found, and nil only when every
// one is delivered or superseded: the log is then empty. Else the log
// keeps what is left, for the next cachelet that opens it.
func DrainLog(ctx context.Context, cfg Config, log *slog.Logger) (int, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	switch {
	case !cfg.DurableWrites:
		return 0, errors.New("instance: draining a durable log needs DurableWrites")
	case cfg.Disk.Dir == "":
		return 0, errors.New("instance: draining a durable log needs the disk tier's directory (Disk.Dir)")
	case cfg.ID == "" || filepath.Base(cfg.ID) != cfg.ID || cfg.ID == "." || cfg.ID == "..":
		return 0, fmt.Errorf("instance: draining a durable log needs the instance ID whose log it is (got %q)", cfg.ID)
	}
	if cfg.Store.Region == "" {
		cfg.Store.Region = cmp.Or(cfg.Region, "us-east-1")
	}
	if err := cfg.Store.Validate(); err != nil {
		return 0, err
	}
	if cfg.Cachelet.Cache.Budget == 0 {
		cfg.Cachelet.Cache.Budget = DefaultBudget()
	}
	lcfg := cfg.DurableLog
	lcfg.Dir = filepath.Join(cfg.Disk.Dir, "writelog", cfg.ID)
	lcfg.Logger = log.With("component", "writelog")
	wlog, pending, err := writelog.Open(lcfg)
	if err != nil {
		return 0, fmt.Errorf("instance: %w", err)
	}
	if len(pending) == 0 {
		return 0, wlog.Close()
	}
	key, err := placeholderKey(&cfg, lcfg.Dir)
	if err != nil {
		return len(pending), errors.Join(fmt.Errorf("instance: durable log: %w", err), wlog.Close())
	}
	st, err := s3store.New(cfg.Store, log.With("component", "store"))
	if err != nil {
		return len(pending), errors.Join(fmt.Errorf("instance: store: %w", err), wlog.Close())
	}
	ccfg := cachelet.Config{Cache: cfg.Cachelet.Cache, Clock: cfg.Cachelet.Clock,
		WriteTarget: cachelet.WriteLocal, ReadMode: cachelet.ReadLocal,
		Log: wlog, Replay: pending, ShadowKey: key, DrainTimeout: 5 * time.Second,
		Sweep: cachelet.SweepConfig{Off: true}} // it serves no reads: nothing to sweep
	cl, err := cachelet.New(ccfg, st, log.With("component", "cachelet"), nil)
	if err != nil {
		return len(pending), errors.Join(fmt.Errorf("instance: %w", err), wlog.Close())
	}
	err = cl.Drain(ctx)
	if serr := wlog.Sync(ctx); err == nil {
		err = serr
	}
	err = errors.Join(err, cl.Close())
	if left := wlog.Stats().LiveRecords; err == nil && left > 0 {
		err = fmt.Errorf("instance: %d records of the durable log are not done (not in the store, or kept for another member)", left)
	}
	err = errors.Join(err, wlog.Close())
	return len(pending), err
}
