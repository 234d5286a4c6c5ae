package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// benchSecret is the peer secret of the applications the benchmarks start.
var benchSecret = []byte("hoard-bench-application-peer-secret")

// storeEndpoint is how the cachelets of a benchmark reach the store.
type storeEndpoint struct {
	Endpoint, AccessKey, SecretKey string
}

// startEtcd starts an embedded etcd keeping its data under dir. Its logs
// are discarded: it reports its own shutdown as errors, and a failure to
// start comes back as Start's error.
func startEtcd(ctx context.Context, dir string) (*etcdembed.Server, error) {
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	srv, err := etcdembed.Start(sctx, etcdembed.Config{Dir: dir})
	if err != nil {
		return nil, fmt.Errorf("bench: start etcd: %w", err)
	}
	return srv, nil
}

// appCluster is n cachelets of one application, each an in-process
// instance with its own etcd membership registry (one etcd client each, as
// in separate processes), all over one store.
type appCluster struct {
	ins   []*instance.Instance
	cores []*minio.Core // an S3 client of each cachelet
	regs  []*etcdmembership.Registry
}

// startAppCluster starts n cachelets of app, configured by cfg (budget,
// consistency), and waits until every one of them sees all n in its ring.
func startAppCluster(ctx context.Context, etcdEndpoints []string, st storeEndpoint, app string, n int, cfg cachelet.Config, log *slog.Logger) (_ *appCluster, err error) {
	c := &appCluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	for i := range n {
		reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcdEndpoints})
		if err != nil {
			return nil, err
		}
		c.regs = append(c.regs, reg)
		in, err := instance.Start(ctx, instance.Config{
			MetricsListen: "off",
			Region:        benchRegion,
			AccessKey:     clientKey,
			SecretKey:     clientSec,
			Store: s3store.Config{
				Endpoint: st.Endpoint, AccessKey: st.AccessKey, SecretKey: st.SecretKey, Region: benchRegion,
			},
			Cachelet: cfg,
			Registry: reg,
			App:      app,
			ID:       fmt.Sprintf("%s-%d", app, i),
			Secret:   benchSecret,
		}, log.With("cachelet", i))
		if err != nil {
			return nil, fmt.Errorf("bench: start cachelet %d of %s: %w", i, app, err)
		}
		c.ins = append(c.ins, in)
		core, err := NewS3Client(in.Endpoint(), clientKey, clientSec, benchRegion)
		if err != nil {
			return nil, err
		}
		c.cores = append(c.cores, core)
	}
	if err := c.waitRings(ctx, 30*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// waitRings waits until every cachelet's ring holds all of them, in the
// same order.
func (c *appCluster) waitRings(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		want := c.ins[0].Cluster().Ring().Members()
		agree := len(want) == len(c.ins)
		for _, in := range c.ins[1:] {
			agree = agree && slices.Equal(in.Cluster().Ring().Members(), want)
		}
		if agree {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: the %d cachelets did not agree on their ring within %s", len(c.ins), limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond): // watches deliver asynchronously
		}
	}
}

// owner returns the index of the cachelet that owns bucket/key.
func (c *appCluster) owner(bucket, key string) (int, error) {
	addr, _ := c.ins[0].Cluster().Owner(bucket, key)
	for i, in := range c.ins {
		if in.PeerAddr() == addr {
			return i, nil
		}
	}
	return -1, fmt.Errorf("bench: the owner %q of %s/%s is none of the cachelets", addr, bucket, key)
}

// drain waits until every cachelet has persisted what it queued.
func (c *appCluster) drain(ctx context.Context) error {
	var errs []error
	for i, in := range c.ins {
		if err := in.Cachelet().Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain cachelet %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

// Close stops the cachelets, then their registries.
func (c *appCluster) Close() {
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, in := range c.ins {
		_ = in.Close(cctx)
	}
	for _, r := range c.regs {
		_ = r.Close()
	}
	c.ins, c.regs, c.cores = nil, nil, nil
}
