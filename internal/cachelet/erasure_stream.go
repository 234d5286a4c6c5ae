package cachelet

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
)

// Shards written a stripe at a time.
//
// A fill codes an object and a rebuild codes missing shards stripe by
// stripe, and each piece goes to its holder's shard PUT as soon as it is
// coded: no process holds a whole coded object. Each holder's PUT is one
// streamed request (the manifest, which names every piece's checksum, in
// its signed header, as before); pieces wait for it in a queue of at most
// Window pieces per holder. So the coder holds at most the stripe it
// reads plus (Window+1) pieces per holder: with RS(10+2), 1 MiB chunks
// and a window of 4, 10 MiB + 60 MiB, whatever the object's size. A holder
// that takes no piece for Timeout (or refuses its shard) is dropped and
// the others go on; the holder's own shard is built in place, as it keeps
// it anyway.
//
// The manifest must be whole before the first piece leaves, so a fill
// reads the object twice: once to sum its pieces, once to send them
// (checked against the first sums: the store's bytes of one ETag must not
// change between them). A rebuild knows the manifest from its own shard.

// errShardStalled: a holder took no piece for Timeout.
var errShardStalled = errors.New("cachelet: the shard's holder took no piece in time")

// shardStream is a set of shard writes in progress, one per target.
type shardStream struct {
	e    *ecPath
	outs []*shardOut
	// free holds piece buffers the senders are done with, for the coder
	// to reuse: the pieces in flight are the only ones allocated.
	free chan []byte
}

// shardOut is one target of a shardStream.
type shardOut struct {
	index  int
	addr   string
	local  []byte      // the shard kept here (addr is this cachelet's)
	pieces chan []byte // to the sender; nil for a local one
	cancel context.CancelFunc
	done   chan error // the PUT's result, once pieces is closed
	failed error
}

// openShards starts the writes of shards indexes[i] of k to addrs[i]
// under manifest m (encoded enc).
func (e *ecPath) openShards(ctx context.Context, k cache.Key, m *erasure.Manifest, enc string, indexes []int, addrs []string) *shardStream {
	s := &shardStream{e: e, free: make(chan []byte, (e.cfg.Window+2)*len(indexes))}
	self := e.cfg.Placer.PeerAddr()
	for j, idx := range indexes {
		o := &shardOut{index: idx, addr: addrs[j]}
		s.outs = append(s.outs, o)
		if o.addr == self {
			o.local = make([]byte, 0, m.ShardSize())
			continue
		}
		var octx context.Context
		octx, o.cancel = context.WithCancel(ctx)
		o.pieces = make(chan []byte, e.cfg.Window)
		o.done = make(chan error, 1)
		pr, pw := io.Pipe()
		put := make(chan error, 1)
		go func() {
			err := e.cfg.Peers.ShardPut(octx, o.addr, k.Bucket, k.Object, m.ETag, o.index, enc, pr, m.ShardSize())
			if err != nil {
				pr.CloseWithError(err) // the writer stops sending
			}
			put <- err
		}()
		go func() {
			var werr error
			for p := range o.pieces {
				if werr == nil {
					_, werr = pw.Write(p)
				}
				select {
				case s.free <- p:
				default:
				}
			}
			pw.CloseWithError(werr) // nil: the body ends
			err := <-put
			if err == nil {
				err = werr
			}
			o.done <- err
		}()
	}
	return s
}

// alive is how many targets have not failed.
func (s *shardStream) alive() int {
	n := 0
	for _, o := range s.outs {
		if o.failed == nil {
			n++
		}
	}
	return n
}

// put hands one stripe's pieces (pieces[o.index] for each target, a
// whole chunk, the caller's to reuse afterwards) to the targets still
// writing.
func (s *shardStream) put(ctx context.Context, pieces [][]byte) {
	for _, o := range s.outs {
		if o.failed != nil {
			continue
		}
		if o.pieces == nil {
			o.local = append(o.local, pieces[o.index]...)
			continue
		}
		var p []byte
		select {
		case p = <-s.free:
		default:
		}
		p = append(p[:0], pieces[o.index]...)
		select {
		case o.pieces <- p:
			continue
		default: // the queue is full: wait, within Timeout
		}
		select {
		case o.pieces <- p:
		case <-ctx.Done():
			o.fail(ctx.Err())
		case <-s.e.c.clock.After(s.e.cfg.Timeout):
			o.fail(errShardStalled)
		}
	}
}

func (o *shardOut) fail(err error) {
	o.failed = err
	if o.cancel != nil {
		o.cancel()
	}
}

// close ends every write (abort: as failed) and returns the indexes
// written; the local shard is kept here.
func (s *shardStream) close(k cache.Key, m *erasure.Manifest, enc string, abort error) (written []int) {
	for _, o := range s.outs {
		if abort != nil && o.failed == nil {
			o.fail(abort)
		}
		if o.pieces == nil {
			if o.failed == nil {
				o.failed = s.e.shards.Put(&erasure.Shard{Key: erasure.ShardKey{Bucket: k.Bucket, Key: k.Object, ETag: m.ETag, Index: o.index},
					Manifest: m, Encoded: enc, Data: o.local})
			}
		} else {
			close(o.pieces)
			if err := <-o.done; o.failed == nil {
				o.failed = err
			}
			o.cancel()
		}
		if o.failed == nil {
			written = append(written, o.index)
		} else {
			s.e.c.log.Debug("shard write failed", "bucket", k.Bucket, "key", k.Object, "shard", o.index, "holder", o.addr, "err", o.failed)
		}
	}
	return written
}

// fill reads info's version of k from the store, codes it and writes the
// shards to addrs, a stripe at a time (above); it returns how many were
// written.
func (e *ecPath) fill(ctx context.Context, k cache.Key, info store.ObjectInfo, addrs []string) (int, error) {
	m := erasure.NewManifest(e.cfg.Config, info.ETag, info.Size)
	if err := e.codeObject(ctx, k, m, nil); err != nil {
		return 0, err
	}
	enc := m.Encode()
	indexes := make([]int, len(addrs))
	for i := range indexes {
		indexes[i] = i
	}
	out := e.openShards(ctx, k, m, enc, indexes, addrs)
	err := e.codeObject(ctx, k, m, out)
	return len(out.close(k, m, enc, err)), err
}

// codeObject reads m's version of k from the store and codes it stripe by
// stripe: with out nil, recording each piece's checksum in m; else
// checking each against m and handing the pieces to out.
func (e *ecPath) codeObject(ctx context.Context, k cache.Key, m *erasure.Manifest, out *shardStream) error {
	body, _, _, err := e.c.store.Get(ctx, k.Bucket, k.Object, store.GetOptions{IfMatch: m.ETag})
	if err != nil {
		return err
	}
	defer body.Close()
	sums := m
	if out != nil {
		sums = erasure.NewManifest(e.cfg.Config, m.ETag, m.Size) // this pass's, checked against m
	}
	cd, err := erasure.NewCoder(sums)
	if err != nil {
		return err
	}
	stripe := make([]byte, m.StripeSize())
	left := m.Size
	for s := range m.Stripes() {
		n := min(left, m.StripeSize())
		if _, err := io.ReadFull(body, stripe[:n]); err != nil {
			return fmt.Errorf("reading the object: %w", err)
		}
		left -= n
		pieces, err := cd.Encode(s, stripe[:n])
		if err != nil {
			return err
		}
		if out == nil {
			continue
		}
		for i := range pieces {
			if sums.Sums[i][s] != m.Sums[i][s] {
				return fmt.Errorf("%w: the store's bytes of version %s changed between two reads", erasure.ErrCorrupt, m.ETag)
			}
		}
		out.put(ctx, pieces)
		if out.alive() < m.Data {
			return erasure.ErrTooFewShards
		}
	}
	return nil
}

// recode codes shards indexes[j] of the object m describes (encoded enc)
// again from k verified shards of holders, a window of stripes at a time,
// and writes them to targets[j], at most RebuildRate bytes a second. It
// returns the indexes written. Every piece is checked against the manifest
// before it leaves.
func (e *ecPath) recode(ctx context.Context, k cache.Key, m *erasure.Manifest, enc string, holders []string, indexes []int, targets []string) ([]int, error) {
	cd, err := erasure.NewCoder(m)
	if err != nil {
		return nil, err
	}
	info := infoOf(m)
	out := e.openShards(ctx, k, m, enc, indexes, targets)
	for first := 0; first < m.Stripes() && err == nil; first += e.cfg.Window {
		end := min(first+e.cfg.Window, m.Stripes())
		var w *window
		if w, err = e.fetchWindow(ctx, k, info, holders, first, end, enc); err != nil {
			break
		}
		for s := first; s < end && err == nil; s++ {
			pieces := make([][]byte, m.Shards())
			for i, b := range w.pieces {
				if b != nil {
					j := (s - first) * m.Chunk
					pieces[i] = b[j : j+m.Chunk : j+m.Chunk]
				}
			}
			if err = cd.Reconstruct(pieces); err != nil {
				break
			}
			for _, idx := range indexes {
				if err = m.Verify(idx, s, pieces[idx]); err != nil { // never send what does not match
					e.c.log.Error("erasure rebuild produced a piece that does not verify", "bucket", k.Bucket, "key", k.Object, "shard", idx, "err", err)
					break
				}
			}
			if err == nil {
				out.put(ctx, pieces)
			}
		}
		if err == nil && out.alive() == 0 {
			err = errors.New("cachelet: every shard write of the rebuild failed")
		}
		e.pace(ctx, int64(out.alive()*(end-first)*m.Chunk))
	}
	return out.close(k, m, enc, err), err
}
