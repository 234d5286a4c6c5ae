package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
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

// fetchAheadChunk is one background fetch (whole blocks, at least
// one): large enough that a request's round trip costs a few percent at
// the store's pace, small enough that a read waiting behind it waits a
// fraction of a second.
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
	s.aheadStop, s.aheadDone, s.aheadChecking = cancel, make(chan struct{}), true
	go func() {
		defer close(s.aheadDone)
		defer cancel()
		s.fetchAhead(ctx)
	}()
}

// fetchAhead fetches the package's blocks in order, a chunk of whole
// blocks at a time, each checked against its SHA-256 in the block sums
// (those already held too: the store's bytes are otherwise checked only
// as they are read), then what follows the last block, until all are
// held, a fetch fails, or ctx ends. The package is counted whole only
// once it has checked every block; a block that does not match stops
// it, and the package is never counted whole (wholeLocked).
func (s *relaySource) fetchAhead(ctx context.Context) {
	defer func() {
		// Checked, or given up: whole as without a fetch ahead (unless a
		// block was bad).
		s.mu.Lock()
		s.aheadChecking = false
		became := s.markWholeLocked()
		at := s.whole
		s.mu.Unlock()
		if became {
			s.reportWhole(at)
		}
	}()
	stop := func(what string, err error) {
		if ctx.Err() == nil {
			s.a.log.Warn("fetching a package ahead of its readers stopped; they fetch what they read", "package", s.sha, "at", what, "err", err)
		}
	}
	sums, err := s.blockSums(ctx)
	if err != nil || len(sums) == 0 {
		stop("the block sums", err)
		return
	}
	var largest int64
	for _, b := range sums {
		largest = max(largest, b.end-b.off)
	}
	buf := make([]byte, max(fetchAheadChunk, largest+sums[0].off))
	for i := 0; i < len(sums) && ctx.Err() == nil; {
		start, j := sums[i].off, i+1
		if i == 0 {
			start = 0 // the header with the first block
		}
		for j < len(sums) && sums[j].end-start <= fetchAheadChunk {
			j++
		}
		p := buf[:sums[j-1].end-start]
		fctx, cancel := context.WithTimeout(ctx, relayTimeout)
		err := s.FetchAt(fctx, p, start)
		cancel()
		if err != nil {
			stop(fmt.Sprintf("offset %d", start), err)
			return
		}
		for _, b := range sums[i:j] {
			if sha256.Sum256(p[b.off-start:b.end-start]) != b.sum {
				s.mu.Lock()
				s.aheadBad = true
				s.mu.Unlock()
				s.a.log.Error("a block of the package does not match its SHA-256 in the block sums", "package", s.sha, "offset", b.off)
				return
			}
		}
		i = j
	}
	if last := sums[len(sums)-1].end; ctx.Err() == nil && last < s.size {
		fctx, cancel := context.WithTimeout(ctx, relayTimeout)
		err := s.FetchAt(fctx, make([]byte, s.size-last), last)
		cancel()
		if err != nil {
			stop("the index", err)
			return
		}
	}
	if ctx.Err() == nil {
		s.a.log.Info("package fetched ahead of its readers", "package", s.sha, "bytes", s.size, "took", time.Since(s.created).Round(time.Millisecond))
	}
}
