package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/membership"
)

// Backoff between failed re-lists of a watch (etcd unreachable).
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// Watch implements membership.Registry. It reads the app's members before
// returning, so etcd's errors for that read (wrapped) are returned too;
// later failures are retried until ctx ends.
func (r *Registry) Watch(ctx context.Context, app string) (<-chan membership.Snapshot, error) {
	if err := membership.ValidateName(app); err != nil {
		return nil, fmt.Errorf("etcd membership: watch: %w", err)
	}
	if r.isClosed() {
		return nil, fmt.Errorf("etcd membership: watch: %w", membership.ErrClosed)
	}
	out := make(chan membership.Snapshot)
	w := &watcher{r: r, app: app, prefix: r.appPrefix(app), out: out}
	if err := w.list(ctx); err != nil {
		return nil, fmt.Errorf("etcd membership: watch %s: %w", app, err)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("etcd membership: watch: %w", membership.ErrClosed)
	}
	r.wg.Add(1)
	r.mu.Unlock()

	go func() {
		defer r.wg.Done()
		defer close(out)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(r.ctx, cancel)
		defer stop()
		w.run(ctx)
	}()
	return out, nil
}

// watcher keeps one app's members as of revision rev, from a list followed
// by watch events, and offers snapshots of them to out.
type watcher struct {
	r       *Registry
	app     string
	prefix  string
	rev     int64
	members map[string]membership.Member

	out     chan<- membership.Snapshot
	pending membership.Snapshot
	send    chan<- membership.Snapshot // out while pending is untaken, else nil
	sent    []membership.Member        // members of the last snapshot made
	anySent bool
}

// list replaces the watcher's state with a fresh read of the app's keys.
func (w *watcher) list(ctx context.Context) error {
	resp, err := w.r.c.Get(ctx, w.prefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	w.members = make(map[string]membership.Member, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		w.put(kv)
	}
	w.rev = resp.Header.Revision
	return nil
}

// put applies one key's value to the state; a value that does not decode is
// logged and treated as absent rather than stopping the watch.
func (w *watcher) put(kv *mvccpb.KeyValue) {
	id := strings.TrimPrefix(string(kv.Key), w.prefix)
	var m membership.Member
	if err := json.Unmarshal(kv.Value, &m); err != nil {
		w.r.log.Warn("etcd membership: malformed member", "key", string(kv.Key), "err", err)
		delete(w.members, id)
		return
	}
	// The key, not the value, is the truth about who the member is.
	m.App, m.ID = w.app, id
	w.members[id] = m
}

// offer makes the current state the pending snapshot, unless its members
// are those of the last snapshot made. A pending snapshot the receiver has
// not taken yet is replaced: a slow receiver skips states, never the latest.
func (w *watcher) offer() {
	s := membership.NewSnapshot(w.app, w.rev, slices.Collect(maps.Values(w.members)))
	if w.anySent && slices.EqualFunc(s.Members, w.sent, equal) {
		return
	}
	w.sent, w.anySent = s.Members, true
	// The receiver owns what it gets: give it copies.
	out := make([]membership.Member, len(s.Members))
	for i, m := range s.Members {
		out[i] = m.Clone()
	}
	s.Members = out
	w.pending, w.send = s, w.out
}

func equal(a, b membership.Member) bool {
	return a.ID == b.ID && a.App == b.App && a.PeerAddr == b.PeerAddr && a.S3Addr == b.S3Addr && maps.Equal(a.Meta, b.Meta)
}

// run sends the listed state, then follows etcd's watch from the next
// revision, offering a snapshot after each batch of events. When the watch
// breaks (compaction past our revision, leader lost, connection trouble)
// run re-lists and resumes from the new revision. It returns when ctx ends.
func (w *watcher) run(ctx context.Context) {
	w.offer()
	for w.follow(ctx) {
		// Re-list until it works, waiting between tries so that a watch that
		// breaks at once does not spin.
		for backoff := minBackoff; ; backoff = min(2*backoff, maxBackoff) {
			if !w.idle(ctx, backoff) {
				return
			}
			err := w.list(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.r.log.Info("etcd membership: re-list failed", "app", w.app, "err", err)
		}
		w.offer()
	}
}

// follow watches from w.rev+1 and applies events until the watch breaks
// (it returns true) or ctx ends (false).
func (w *watcher) follow(ctx context.Context) bool {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	events := w.r.c.Watch(wctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(w.rev+1))
	for {
		select {
		case <-ctx.Done():
			return false
		case w.send <- w.pending:
			w.send = nil
		case resp, ok := <-events:
			if !ok {
				return ctx.Err() == nil
			}
			if err := resp.Err(); err != nil {
				if errors.Is(err, rpctypes.ErrCompacted) {
					w.r.log.Info("etcd membership: watch revision compacted, re-listing", "app", w.app, "rev", w.rev+1, "compact_rev", resp.CompactRevision)
				} else {
					w.r.log.Info("etcd membership: watch broken, re-listing", "app", w.app, "err", err)
				}
				return true
			}
			if len(resp.Events) == 0 {
				continue // progress notification
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					delete(w.members, strings.TrimPrefix(string(ev.Kv.Key), w.prefix))
				} else {
					w.put(ev.Kv)
				}
				w.rev = ev.Kv.ModRevision
			}
			w.offer()
		}
	}
}

// idle waits for d while still handing the pending snapshot over. It
// returns false if ctx ended.
func (w *watcher) idle(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case w.send <- w.pending:
			w.send = nil
		case <-t.C:
			return true
		}
	}
}
