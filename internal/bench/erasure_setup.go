package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hoard-io/hoard/internal/rig"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// What the erasure experiments on the several-nodes rig (erasure-nodes,
// erasure-rig) set up alike: the rig with store keys the bench knows, the
// bucket their objects go to, applications with an instance on every
// node, and the count of the shards those hold.

// ecBucket holds the erasure experiments' objects.
const ecBucket = "data"

// ecNodes is a several-nodes rig (startTreeRig) whose store the bench
// reaches with keys of its own.
type ecNodes struct {
	*rig.Nodes
	dir                   string      // the rig's directory, removed by close
	st                    store.Store // the store, as the bench reaches it
	storeKey, storeSecret string
}

// startECNodes starts the rig with nodes nodes (network names from
// prefix), the store's access key storeKey with a random secret, and
// makes ecBucket; opts change the rig's config after the keys are set.
func startECNodes(ctx context.Context, env Env, nodes int, prefix, storeKey string, opts ...func(*rig.NodesConfig)) (*ecNodes, error) {
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	r := &ecNodes{storeKey: storeKey, storeSecret: hex.EncodeToString(secret)}
	opts = append([]func(*rig.NodesConfig){func(c *rig.NodesConfig) {
		c.StoreAccessKey, c.StoreSecretKey = r.storeKey, r.storeSecret
	}}, opts...)
	n, dir, err := startTreeRig(ctx, env, nodes, prefix, nil, opts...)
	if err != nil {
		return nil, err
	}
	r.Nodes, r.dir = n, dir
	if r.st, err = s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: r.storeKey, SecretKey: r.storeSecret}, slog.New(slog.DiscardHandler)); err != nil {
		r.close()
		return nil, err
	}
	if err := r.st.CreateBucket(ctx, ecBucket, ""); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

// close stops the rig and removes its directory.
func (r *ecNodes) close() {
	r.Nodes.Close()
	os.RemoveAll(r.dir)
}

// ecNodesSpec is an application of the erasure experiments: one instance
// on each of nodes nodes (min_instances), reading ecBucket, its cache of
// budget with erasure as its cache.erasure ("" for none: objects kept
// whole), and one function fn (handler fns.fn).
func ecNodesSpec(name, memory, timeout string, nodes int, budget, erasure, fn string) string {
	cache := "cache: {budget: " + budget + "}"
	if erasure != "" {
		cache = "cache: {budget: " + budget + ", erasure: " + erasure + "}"
	}
	return fmt.Sprintf(`name: %s
memory: %s
timeout: %s
keep_alive: 1h
max_instances: %d
buckets: {%s: read-only}
scaling: {min_instances: %d}
%s
functions:
  %s: {handler: fns.%s}
`, name, memory, timeout, nodes, ecBucket, nodes, cache, fn, fn)
}

// shardsHeld counts the erasure shards app's instances hold: per node,
// and in all.
func shardsHeld(ctx context.Context, n *rig.Nodes, app string) (map[string]int, int, error) {
	held, err := shardsPerNode(ctx, n, app)
	if err != nil {
		return nil, 0, err
	}
	total := 0
	for _, k := range held {
		total += k
	}
	return held, total, nil
}

// waitShards waits, up to d, until app's instances hold want shards in
// all (sharding streams from the owner's fill, after the read that
// started it), and returns the shards per node then.
func waitShards(ctx context.Context, n *rig.Nodes, app string, want int, d time.Duration) (map[string]int, error) {
	deadline := time.Now().Add(d)
	for {
		held, got, err := shardsHeld(ctx, n, app)
		if err != nil {
			return nil, err
		}
		if got >= want {
			return held, nil
		}
		if time.Now().After(deadline) {
			return held, fmt.Errorf("%d shards held after %v, want %d: per node %v", got, d, want, held)
		}
		select {
		case <-ctx.Done():
			return held, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
