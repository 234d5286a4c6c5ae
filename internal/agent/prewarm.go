package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/prewarm"
	"github.com/hoard-io/hoard/internal/store"
)

// prewarmBatch is how many keys one pre-warm request carries: small, so
// that an invocation arriving mid-batch waits for little.
const prewarmBatch = 16

// Prewarm has the instance's cachelet fetch the objects it owns among
// keys, in the background and only while the instance is idle: an
// invocation cancels the batch in flight, which resumes once the
// invocation ends (Faa$T §3.3: pre-warming never competes with on-demand
// accesses). A second Prewarm replaces the first's remaining keys.
func (in *Instance) Prewarm(keys []api.Key) {
	in.mu.Lock()
	if in.prewarmStop != nil {
		in.prewarmStop()
	}
	ctx, stop := context.WithCancel(context.Background())
	in.prewarmStop = stop
	in.prewarm = api.PrewarmStatus{Requested: len(keys), Running: true}
	in.mu.Unlock()
	go in.runPrewarm(ctx, keys)
}

func (in *Instance) runPrewarm(ctx context.Context, keys []api.Key) {
	defer func() {
		in.mu.Lock()
		in.prewarm.Running = false
		in.mu.Unlock()
	}()
	for len(keys) > 0 {
		// Wait for the instance to be idle.
		batchCtx, ok := in.idleContext(ctx)
		if !ok {
			return
		}
		n := min(prewarmBatch, len(keys))
		batch := make([]control.Key, n)
		for i, k := range keys[:n] {
			batch[i] = control.Key{Bucket: k.Bucket, Key: k.Key}
		}
		res, err := in.control().Prewarm(batchCtx, batch)
		if ctx.Err() != nil {
			return
		}
		if batchCtx.Err() != nil { // an invocation started: retry the batch later
			in.mu.Lock()
			in.prewarm.Paused++
			in.mu.Unlock()
			continue
		}
		if err != nil {
			in.agent.log.Warn("pre-warm batch failed", "instance", in.req.ID, "err", err)
		}
		in.mu.Lock()
		in.prewarm.Done += n
		in.prewarm.Owned += res.Owned
		in.prewarm.Fetched += res.Fetched
		in.prewarm.Bytes += res.Bytes
		in.mu.Unlock()
		keys = keys[n:]
	}
	in.agent.log.Info("pre-warm done", "instance", in.req.ID, "fetched", in.prewarm.Fetched, "bytes", in.prewarm.Bytes)
}

// idleContext waits until the instance is idle and returns a context that
// ends when the next invocation starts (or ctx ends); ok is false when the
// instance is gone or ctx ended.
func (in *Instance) idleContext(ctx context.Context) (context.Context, bool) {
	for {
		in.mu.Lock()
		state := in.state
		if state == api.StateIdle {
			bctx, cancel := context.WithCancel(ctx)
			in.batchStop = cancel
			in.mu.Unlock()
			return bctx, true
		}
		in.mu.Unlock()
		if state == api.StateDead {
			return nil, false
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-in.done:
			return nil, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// pausePrewarm stops the pre-warm batch in flight, if any; called with
// in.mu held when an invocation starts.
func (in *Instance) pausePrewarmLocked() {
	if in.batchStop != nil {
		in.batchStop()
		in.batchStop = nil
	}
}

// saveAccessMetadata reads the cachelet's access metadata and saves it in
// the store, stamped with the unload time, for a later load's pre-warm.
// It is called before the cachelet is stopped, and never fails the unload.
func (in *Instance) saveAccessMetadata() {
	loc := in.req.Metadata
	ctl := in.control()
	if loc.Bucket == "" || ctl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := prewarm.Record{Version: prewarm.RecordVersion, App: in.spec.Name, Instance: in.req.ID, UnloadedAt: time.Now().UTC()}
	objs, err := ctl.AccessMetadata(ctx)
	rec.Objects = objs
	if err != nil {
		in.agent.log.Warn("reading access metadata", "instance", in.req.ID, "err", err)
		return
	}
	if len(rec.Objects) == 0 {
		return
	}
	data, _ := json.Marshal(rec)
	key := fmt.Sprintf("%s%020d-%s.json", loc.Prefix, rec.UnloadedAt.UnixNano(), in.req.ID)
	if _, err := in.agent.cfg.Store.Put(ctx, loc.Bucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{ContentType: "application/json"}); err != nil {
		in.agent.log.Warn("saving access metadata", "instance", in.req.ID, "err", err)
		return
	}
	in.agent.log.Info("access metadata saved", "instance", in.req.ID, "objects", len(rec.Objects), "key", key)
}
