package agent

import (
	"context"
	"time"
)

// Fetching a package whole ahead of its readers (Config.CodeFetchAhead):
// an agent that reads a lazily mounted package from the store, the root
// of its function tree, fetches every byte of it in the background, in
// order and in fetchAheadChunk ranges, as soon as it is mounted. Each
// range is kept as it arrives, so the push streams carry it down the
// tree at once; reads of the instances go on as before, served from what
// is held or fetched themselves (one upstream fetch at a time: a read
// waits for at most one range in flight). Without it, the root fetches
// what its instances read, so how fast the tree fills follows how fast
// they read.

// fetchAheadChunk is one background fetch: large enough that a
// request's round trip costs a few percent at the store's pace, small
// enough that a read waiting behind it waits a fraction of a second.
const fetchAheadChunk = 4 << 20

// startFetchAhead starts fetching the whole package in the background;
// close stops it and waits.
func (s *relaySource) startFetchAhead() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aheadStop != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.aheadStop, s.aheadDone = cancel, make(chan struct{})
	go func() {
		defer close(s.aheadDone)
		defer cancel()
		s.fetchAhead(ctx)
	}()
}

// fetchAhead fetches every range of the package not held yet, in order,
// until all are held, one fails, or ctx ends.
func (s *relaySource) fetchAhead(ctx context.Context) {
	buf := make([]byte, fetchAheadChunk)
	for off := int64(0); off < s.size && ctx.Err() == nil; off += fetchAheadChunk {
		n := min(fetchAheadChunk, s.size-off)
		if s.covered(off, off+n) {
			continue
		}
		fctx, cancel := context.WithTimeout(ctx, relayTimeout)
		err := s.FetchAt(fctx, buf[:n], off)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				s.a.log.Warn("fetching a package ahead of its readers stopped; they fetch what they read", "package", s.sha, "offset", off, "err", err)
			}
			return
		}
	}
	if ctx.Err() == nil {
		s.a.log.Info("package fetched ahead of its readers", "package", s.sha, "bytes", s.size, "took", time.Since(s.created).Round(time.Millisecond))
	}
}
