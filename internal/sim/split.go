package sim

// Split divides a config validated by Validate into at most n parts with the cache
// configurations (policy, size) shared out in order, so that n replays of
// the same events, one per part, can run side by side; Merge joins their
// reports into the one Run would have made. The keep-alive policies go
// with the first part, as do prediction and erasure placement; with Lifecycle every part also replays the first
// keep-alive policy, which its caches' lives follow.
func (c Config) Split(n int) []Config {
	pairs := c.Runs
	n = max(1, min(n, len(pairs)))
	parts := make([]Config, n)
	for i := range parts {
		part := c
		lo, hi := i*len(pairs)/n, (i+1)*len(pairs)/n
		part.Runs = make([]CacheRun, 0, hi-lo)
		part.Runs = append(part.Runs, pairs[lo:hi]...)
		part.Policies, part.CacheSizes = []Eviction{}, []int64{}
		if i > 0 {
			// Prediction and erasure placement are replayed once, with
			// the first part (Merge keeps its sections).
			part.Predict, part.Erasure = false, nil
			part.KeepAlives = []KeepAlive{}
			if c.Lifecycle && len(c.KeepAlives) > 0 {
				part.KeepAlives = c.KeepAlives[:1]
			}
		}
		parts[i] = part
	}
	return parts
}

// Merge joins the reports of a split config's parts, in order.
func Merge(parts []Report) Report {
	if len(parts) == 0 {
		return Report{}
	}
	r := parts[0]
	r.Caches = nil
	for _, p := range parts {
		r.Caches = append(r.Caches, p.Caches...)
	}
	return r
}
