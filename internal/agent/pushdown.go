package agent

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/hoard-io/hoard/internal/api"
)

// Blocks pushed down the function tree as they complete (FaaSNet §3,
// ADR 0027's amendment): besides answering its children's reads, an
// agent streams to each child that asks (GET /v1/packages/{sha}/blocks)
// every whole block of the package it holds, in offset order, then each
// block as it completes (upstream keeps an answer's blocks as they
// arrive), until it has sent them all or nothing new came for pushIdle.
// The child keeps each block that matches its SHA-256 in the package's
// block sums (a mismatch is a lying parent: nothing more is taken from
// agents), and a read of bytes it lacks waits, while blocks keep coming
// (at most pushWait between two, pushWaitMax in all), before asking its
// parent: a child's copy fills as its parent's does, and a block crosses
// each link of the tree once.
//
// Bounds: at most maxPushStreams streams served at once (more get 503);
// one block in memory per stream; each block written within
// pushWriteTimeout (a child that does not read is cut off); a stream
// lasts at most pushStreamMax.

const (
	// pushFrameLen is a frame's header: the block's offset (8 bytes) and
	// length (4), big-endian; the block's bytes follow.
	pushFrameLen = 12
	// maxPushStreams bounds the streams an agent serves at once (a
	// binary tree gives each agent two children per package).
	maxPushStreams = 8
	// pushIdle ends a stream when no new block came for that long.
	pushIdle = 5 * time.Second
	// pushWriteTimeout bounds writing one block to a child.
	pushWriteTimeout = 10 * time.Second
	// pushStreamMax bounds one stream.
	pushStreamMax = 5 * time.Minute
	// pushWait and pushWaitMax bound how long a read waits for pushed
	// blocks before asking the parent itself.
	pushWait    = 250 * time.Millisecond
	pushWaitMax = 2 * time.Second
	// maxPushBlock bounds one pushed block (blockfmt's largest blocks
	// stored incompressible, with their frame).
	maxPushBlock = 16 << 20
)

// blockSums returns the package's block sums, reading them from the
// store when this agent had no parent to check (the tree's root).
func (s *relaySource) blockSums(ctx context.Context) ([]blockSum, error) {
	s.mu.Lock()
	sums := s.sums
	s.mu.Unlock()
	if sums != nil {
		return sums, nil
	}
	sums, err := s.a.loadSums(ctx, api.PackageRef{Bucket: s.bucket, Key: s.key, SumsSHA256: s.sumsSHA}, s.size)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.sums == nil {
		s.sums = sums
	}
	sums = s.sums
	// The sums may name a held package whole (its header is no block).
	became := s.markWholeLocked()
	at := s.whole
	s.mu.Unlock()
	if became {
		s.reportWhole(at)
	}
	return sums, nil
}

// servePackageBlocks streams a package's blocks to a child agent as
// this agent holds them.
func (a *Agent) servePackageBlocks(w http.ResponseWriter, r *http.Request) {
	if a.cfg.CodeFetch != CodeFetchLazy || a.cfg.NoCodeRelay {
		api.WriteError(w, http.StatusNotImplemented, errors.New("this agent does not relay code packages"))
		return
	}
	src := a.relaySourceOf(r.PathValue("sha"))
	if src == nil {
		api.WriteError(w, http.StatusNotFound, errors.New("no such package here"))
		return
	}
	select {
	case a.lazy.streams <- struct{}{}:
		defer func() { <-a.lazy.streams }()
	default:
		api.WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("already streaming %d packages' blocks", maxPushStreams))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), pushStreamMax)
	defer cancel()
	sums, err := src.blockSums(ctx)
	if err != nil {
		api.WriteError(w, http.StatusBadGateway, err)
		return
	}
	// have: the blocks the child holds already, a bit each (sums'
	// order, most significant bit first), in hex; not sent again.
	have, err := hex.DecodeString(r.URL.Query().Get("have"))
	if err != nil || len(have) > (len(sums)+7)/8 {
		api.WriteError(w, http.StatusBadRequest, fmt.Errorf("have must be a hex bitmap of at most %d blocks", len(sums)))
		return
	}
	sent := make([]bool, len(sums))
	left := len(sums)
	for i := range sent {
		if i/8 < len(have) && have[i/8]&(0x80>>(i%8)) != 0 {
			sent[i] = true
			left--
		}
	}
	var largest int64
	for _, b := range sums {
		largest = max(largest, b.end-b.off)
	}
	if largest > maxPushBlock {
		api.WriteError(w, http.StatusInternalServerError, fmt.Errorf("a block of %d bytes is over the %d a stream sends", largest, maxPushBlock))
		return
	}
	buf := make([]byte, pushFrameLen, pushFrameLen+largest) // one block at a time
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	for left > 0 {
		src.mu.Lock()
		progress := src.progress
		var held []int
		for i, b := range sums {
			if !sent[i] && src.coveredLocked(b.off, b.end) {
				held = append(held, i)
			}
		}
		src.mu.Unlock()
		for _, i := range held {
			b := sums[i]
			n := int(b.end - b.off)
			frame := buf[:pushFrameLen+n]
			binary.BigEndian.PutUint64(frame, uint64(b.off))
			binary.BigEndian.PutUint32(frame[8:], uint32(n))
			if _, err := src.file.ReadAt(frame[pushFrameLen:], b.off); err != nil {
				return
			}
			_ = rc.SetWriteDeadline(time.Now().Add(pushWriteTimeout))
			if _, err := w.Write(frame); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
			sent[i] = true
			left--
			a.lazy.pushed.WithLabelValues("sent").Add(float64(n))
		}
		if left == 0 {
			break
		}
		idle := time.NewTimer(pushIdle)
		select {
		case <-progress:
			idle.Stop()
		case <-idle.C:
			return
		case <-ctx.Done():
			idle.Stop()
			return
		}
	}
}

// startPush starts receiving the parent's blocks (when there is a
// parent and the sums to check its blocks).
func (s *relaySource) startPush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.parents) == 0 || s.sums == nil || s.stop != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), pushStreamMax)
	s.stop, s.pushing, s.pushDone = cancel, true, make(chan struct{})
	go func() {
		defer close(s.pushDone)
		defer cancel()
		s.pushDown(ctx)
	}()
}

// pushDown receives the parent's blocks until every block is held, the
// parent ends the stream, the parent lies, or three tries in a row bring
// nothing.
func (s *relaySource) pushDown(ctx context.Context) {
	defer func() {
		s.mu.Lock()
		s.pushing = false
		close(s.progress) // reads waiting for pushed blocks ask the parent now
		s.progress = make(chan struct{})
		s.mu.Unlock()
	}()
	for failures := 0; failures < 3 && ctx.Err() == nil; {
		s.mu.Lock()
		var parent *api.Registration
		if !s.parentBad && s.cur < len(s.parents) {
			p := s.parents[s.cur]
			parent = &p
		}
		s.mu.Unlock()
		if parent == nil {
			return
		}
		got, err := s.receive(ctx, parent)
		var unreachable *unreachableError
		switch {
		case err == nil:
			return
		case errors.Is(err, errReattached):
			continue
		case errors.As(err, &unreachable) && ctx.Err() == nil:
			// The parent does not take connections: it is gone. As a
			// read would, turn to the next agent up, then where the
			// tree says, and go on receiving from there.
			s.a.log.Warn("the agent pushing blocks is unreachable; trying the next", "package", s.sha, "agent", parent.ID, "err", err)
			s.parentFailed(parent.ID)
			s.followTree(ctx, true)
			continue
		case errors.Is(err, errLied):
			s.a.lazy.rejected.Inc()
			s.rejected.Add(1)
			s.a.log.Warn("a block pushed by another agent does not match the package's block sums; fetching from the store", "package", s.sha, "agent", parent.ID)
			s.mu.Lock()
			s.parentBad = true
			s.mu.Unlock()
			return
		case errors.Is(err, errNotHere) && time.Since(s.created) < relayWait:
			// The parent has not mounted the package yet.
		case got == 0:
			failures++
		default:
			failures = 0
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// receive reads one stream of blocks from parent; it returns the bytes
// kept, and nil when the parent ended the stream.
func (s *relaySource) receive(ctx context.Context, parent *api.Registration) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/v1/packages/%s/blocks?have=%s", parent.URL, s.sha, s.haveBitmap()), nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.a.peerToken())
	// The answer's headers within the relay's deadline.
	headers := time.AfterFunc(relayTimeout, cancel)
	resp, err := s.a.pushClient().Do(req)
	headers.Stop()
	if err != nil {
		return 0, &unreachableError{err}
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return 0, errNotHere
	default:
		return 0, fmt.Errorf("%s answered %s", parent.ID, resp.Status)
	}
	// A parent that sends nothing for twice its idle bound is gone.
	silent := time.AfterFunc(2*pushIdle, cancel)
	defer silent.Stop()
	var kept int64
	head := make([]byte, pushFrameLen)
	var buf []byte
	for {
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			if errors.Is(err, io.EOF) {
				return kept, nil
			}
			return kept, err
		}
		silent.Reset(2 * pushIdle)
		off, n := int64(binary.BigEndian.Uint64(head)), int64(binary.BigEndian.Uint32(head[8:]))
		i, found := slices.BinarySearchFunc(s.sums, off, func(b blockSum, off int64) int { return cmp.Compare(b.off, off) })
		if !found || s.sums[i].end-off != n || n > maxPushBlock {
			return kept, fmt.Errorf("%w: %s pushed [%d, +%d), not a block", errLied, parent.ID, off, n)
		}
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		b := buf[:n]
		if _, err := io.ReadFull(resp.Body, b); err != nil {
			return kept, err
		}
		if sha256.Sum256(b) != s.sums[i].sum {
			return kept, errLied
		}
		// After a failure, the tree's new place for this agent: a
		// stream from there instead (followTree reads the tree at most
		// four times a second).
		s.followTree(ctx, false)
		if now := s.currentParent(); now != parent.ID {
			return kept, errReattached
		}
		if s.covered(off, off+n) {
			continue
		}
		if err := s.keepFromParent(b, off); err != nil {
			return kept, err
		}
		kept += n
		s.pushed.Add(n)
		s.fromParent.Add(n)
		s.a.lazy.relayed.WithLabelValues("parent").Add(float64(n))
		s.a.lazy.pushed.WithLabelValues("received").Add(float64(n))
	}
}

// haveBitmap is the blocks held, a bit each in the sums' order, in hex
// (servePackageBlocks' have).
func (s *relaySource) haveBitmap() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	bits := make([]byte, (len(s.sums)+7)/8)
	for i, b := range s.sums {
		if s.coveredLocked(b.off, b.end) {
			bits[i/8] |= 0x80 >> (i % 8)
		}
	}
	return hex.EncodeToString(bits)
}

// errReattached ends a stream from a parent the function tree no
// longer names.
var errReattached = errors.New("reattached elsewhere in the function tree")

// unreachableError is a parent that did not answer a stream's request
// (as opposed to a stream that broke, which may be the parent cutting
// off a child that read too slowly).
type unreachableError struct{ err error }

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// awaitPush waits, while the parent's blocks keep coming, for the file
// to hold [off, end): at most pushWait for each next block and
// pushWaitMax in all. Bytes after the last block (the index, read at
// the mount) are never pushed: no wait for them.
func (s *relaySource) awaitPush(ctx context.Context, off, end int64) {
	if len(s.sums) == 0 || end > s.sums[len(s.sums)-1].end {
		return
	}
	deadline := time.Now().Add(pushWaitMax)
	for {
		s.mu.Lock()
		pushing, progress, held := s.pushing, s.progress, s.coveredLocked(off, end)
		s.mu.Unlock()
		if held || !pushing || time.Now().After(deadline) {
			return
		}
		t := time.NewTimer(pushWait)
		select {
		case <-progress:
			t.Stop()
		case <-t.C:
			return
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// pushClient receives pushed blocks: the relay client's transport
// without its per-request timeout (a stream is bounded by
// pushStreamMax and ends when its parent is silent for 2×pushIdle).
func (a *Agent) pushClient() *http.Client {
	return &http.Client{Transport: a.relayClient().Transport}
}
