package erasure

import (
	"github.com/hoard-io/hoard/internal/ring"
)

// Place returns the members holding shards 0..n-1 of bucket/key: n
// distinct members of r in ring order from the key's owner, preferring
// members on nodes not yet used (nodeOf names a member's node; nil or ""
// for a member means unknown, which counts as a node of its own). It
// returns nil when r has fewer than n members: an object is sharded only
// where every shard has a member of its own. Every cachelet with the same
// ring and node names computes the same placement.
func Place(r *ring.Ring, nodeOf func(id string) string, bucket, key string, n int) []string {
	if n <= 0 || r.Len() < n {
		return nil
	}
	order := r.Owners(bucket, key, r.Len())
	if nodeOf == nil {
		return order[:n]
	}
	out := make([]string, 0, n)
	used := make(map[string]bool)
	taken := make([]bool, len(order))
	// Rounds: each takes, in ring order, members on nodes no earlier
	// pick of the round used, until n are placed.
	for len(out) < n {
		clear(used)
		for i, id := range order {
			if taken[i] || len(out) == n {
				continue
			}
			node := nodeOf(id)
			if node != "" && used[node] {
				continue
			}
			if node != "" {
				used[node] = true
			}
			taken[i] = true
			out = append(out, id)
		}
	}
	return out
}
