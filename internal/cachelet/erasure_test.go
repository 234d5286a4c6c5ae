package cachelet

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
)

// placeRouter places an object's shards on the first n members.
type placeRouter struct{ *staticRouter }

func (r placeRouter) Place(_, _ string, n int) []string {
	if len(r.all) < n {
		return nil
	}
	return r.all[:n]
}

// newECGroup is six cachelets with RS(3+2) over objects of 64 KiB and up
// (4 KiB chunks): members 0-4 hold the shards, member 5 none.
func newECGroup(t *testing.T) *group {
	t.Helper()
	return newGroup(t, 6, func(c *Config) {
		c.Cache.Budget = 4 << 20
		c.Cache.MaxObjectSize = 2 << 20
		c.Router = placeRouter{c.Router.(*staticRouter)}
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 4 << 10}, Memory: 1 << 20}
	})
}

// waitShards waits until each holder holds one shard of the object.
func (g *group) waitShards(t *testing.T, etag string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, c := range g.members[:5] {
			if c.ec.shards.Get(testBucket, "big", etag) != nil {
				n++
			}
		}
		if n == 5 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 5 shards held", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// corrupt flips a bit of the shard member i holds (behind the store's
// back, as a memory fault or a rogue member would).
func (g *group) corrupt(t *testing.T, i int, etag string, at int) {
	t.Helper()
	sh := g.members[i].ec.shards.Get(testBucket, "big", etag)
	if sh == nil {
		t.Fatalf("member %d holds no shard", i)
	}
	sh.Data[at] ^= 0x40
}

func (g *group) readRange(t *testing.T, i int, off, end int64) ([]byte, Outcome) {
	t.Helper()
	obj, err := g.members[i].Get(t.Context(), testBucket, "big", &store.ByteRange{Start: off, End: end})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Body.Close()
	b, err := io.ReadAll(obj.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, obj.Outcome
}

func TestErasureReadsNeverWrongBytes(t *testing.T) {
	g := newECGroup(t)
	want := make([]byte, 300_001) // 25 stripes of 12 KiB, the last partial
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")

	// The first read goes to the owner (member 0), which shards it.
	g.mustRead(t, 5, "big", want, PassThrough) // streamed, not kept whole
	g.waitShards(t, info.ETag)
	// Each holder's counters show its shard (what the dashboard shows).
	for i, c := range g.members[:5] {
		h := c.Counters().Erasure
		if h == nil || h.Shards != 1 || h.HeldBytes <= 0 || h.BudgetBytes <= 0 || h.BudgetBytes > 1<<20 || h.LossProbability != 0 {
			t.Fatalf("member %d's erasure counters: %+v", i, h)
		}
	}
	if g.members[0].ec.coded(int64(len(want))) != 25*5*4096 {
		t.Fatalf("coded size %d", g.members[0].ec.coded(int64(len(want))))
	}
	g.mustRead(t, 5, "big", want, ErasureHit)
	if got, o := g.readRange(t, 5, 50_000, 123_456); o != ErasureHit || !bytes.Equal(got, want[50_000:123_457]) {
		t.Fatalf("ranged read: outcome %s, equal %v", o, bytes.Equal(got, want[50_000:123_457]))
	}
	if got, o := g.readRange(t, 5, -10, -1); o != ErasureHit || !bytes.Equal(got, want[len(want)-10:]) {
		t.Fatalf("suffix read: outcome %s", o)
	}

	// Two holders' shards damaged: they do not verify, the other three
	// decode.
	const mid = 12 * 4096 // stripe 12, in the read's fourth window
	g.corrupt(t, 0, info.ETag, mid)
	g.corrupt(t, 3, info.ETag, mid)
	g.mustRead(t, 5, "big", want, ErasureHit)
	// A third: the windows before stripe 12 decode, the store serves the
	// rest, never the damaged bytes.
	g.corrupt(t, 4, info.ETag, mid)
	g.mustRead(t, 5, "big", want, ErasureHit)
	if v := toFloat64(g.members[5].ec.reads.WithLabelValues("fallback")); v != 1 {
		t.Fatalf("fallbacks to the store mid-read: %v, want 1", v)
	}
	// Damaged from the first stripe: a miss, served the ordinary way (the
	// owner, which reads the store).
	for _, i := range []int{0, 3, 4} {
		g.corrupt(t, i, info.ETag, 0)
	}
	got, o, err := g.read(t, 5, "big")
	if err != nil || !bytes.Equal(got, want) || o == ErasureHit {
		t.Fatalf("three damaged shards: outcome %s, err %v, equal %v", o, err, bytes.Equal(got, want))
	}

	// A new version in the store: the old shards are never read back.
	want2 := bytes.Repeat([]byte("new version "), 30_000)
	g.put(t, "big", want2)
	got, o, err = g.read(t, 5, "big")
	if err != nil || !bytes.Equal(got, want2) || o == ErasureHit {
		t.Fatalf("after a change in the store: outcome %s, err %v, equal %v", o, err, bytes.Equal(got, want2))
	}
}

func TestErasureWriteDropsOldShards(t *testing.T) {
	g := newECGroup(t)
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	// Written through member 5: sharded at once.
	res, err := g.members[5].Put(t.Context(), testBucket, "big", bytes.NewReader(want), int64(len(want)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.waitShards(t, res.ETag)
	g.mustRead(t, 5, "big", want, ErasureHit)
	// A second write through member 5 drops the first version's shards.
	want2 := make([]byte, 200_000)
	_, _ = rand.Read(want2)
	res2, err := g.members[5].Put(t.Context(), testBucket, "big", bytes.NewReader(want2), int64(len(want2)), store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.waitShards(t, res2.ETag)
	deadline := time.Now().Add(10 * time.Second)
	for {
		old := 0
		for _, c := range g.members[:5] {
			if c.ec.shards.Get(testBucket, "big", res.ETag) != nil {
				old++
			}
		}
		if old == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d holders still hold the old version's shards", old)
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.mustRead(t, 5, "big", want2, ErasureHit)
}

// Small objects never take the erasure path.
func TestErasureThreshold(t *testing.T) {
	g := newECGroup(t)
	small := bytes.Repeat([]byte{7}, 1000)
	g.put(t, "small", small)
	g.mustRead(t, 5, "small", small, RemoteMiss)
	g.mustRead(t, 5, "small", small, LocalHit)
	if g.members[5].ec.knows(cache.Key{Bucket: testBucket, Object: "small"}) {
		t.Fatal("a small object noted as large")
	}
	for _, c := range g.members {
		if s := c.ErasureStats(); s.Shards != 0 {
			t.Fatalf("a small object sharded: %+v", s)
		}
	}
}

func TestErasureSettings(t *testing.T) {
	want := &cacheconfig.Erasure{DataShards: 4, ParityShards: 2, Threshold: 1 << 20, Memory: 8 << 20, BackupMemory: 2 << 20, Chunk: 64 << 10}
	var c Config
	if err := c.ApplySettings(cacheconfig.Settings{Erasure: want}); err != nil {
		t.Fatal(err)
	}
	if got := c.Settings().Erasure; got == nil || *got != *want {
		t.Fatalf("round trip: %+v, want %+v", got, want)
	}
	if err := c.ApplySettings(cacheconfig.Settings{Erasure: &cacheconfig.Erasure{DataShards: 4}}); err == nil {
		t.Fatal("no parity shards accepted")
	}
	// A cachelet on its own has no one to hold shards.
	c = Config{Cache: cache.Config{Budget: 1 << 20}, Erasure: &ErasureConfig{}}
	if _, err := New(c, nil, nil, nil); !errors.Is(err, errNoApplication) {
		t.Fatalf("alone: %v", err)
	}
}

func TestErasureWarmUp(t *testing.T) {
	g := newGroup(t, 6, func(c *Config) {
		c.Cache.Budget = 4 << 20
		c.Cache.MaxObjectSize = 2 << 20
		c.Router = placeRouter{c.Router.(*staticRouter)}
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 4 << 10},
			Memory: 1 << 20, WarmUp: 10 * time.Millisecond, RebuildDelay: time.Millisecond}
	})
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want, PassThrough)
	g.waitShards(t, info.ETag)
	shard := g.members[3].ec.shards.Get(testBucket, "big", info.ETag)

	// The loop runs on its own and reports each visit of the shard held.
	deadline := time.Now().Add(10 * time.Second)
	for g.members[3].ErasureCounters().WarmUpBytes < 2*int64(len(shard.Data)) {
		if time.Now().After(deadline) {
			t.Fatal("no warm-up ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	n := g.members[3].ErasureCounters()
	if n.WarmUps < 2 || n.LastWarmUp.IsZero() {
		t.Fatalf("warm-up counters %+v, shard of %d bytes", n, len(shard.Data))
	}
	if toFloat64(g.members[3].ec.warmBytes) < float64(2*len(shard.Data)) {
		t.Fatalf("hoard_erasure_warmup_bytes_total %v", toFloat64(g.members[3].ec.warmBytes))
	}

	// A shard gone bad behind the store's back: a warm-up finds it before
	// a read does, drops it, and the rebuild that follows restores a good
	// one.
	g.corrupt(t, 3, info.ETag, 5000)
	deadline = time.Now().Add(10 * time.Second)
	for toFloat64(g.members[3].ec.warmDropped) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the damaged shard was not dropped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.waitShards(t, info.ETag)
	again := g.members[3].ec.shards.Get(testBucket, "big", info.ETag)
	if again == shard || again.Manifest.Verify(again.Key.Index, 0, again.Data) != nil {
		t.Fatal("the shard was not rebuilt whole")
	}
	g.mustRead(t, 5, "big", want, ErasureHit)

	// The damage found counts in the risk, the more the longer a damaged
	// shard can go unnoticed between warm-ups.
	e := g.members[3].ec
	soon, late := e.risk(), e.riskWith(time.Hour)
	if soon <= 0 || late <= soon || late > 1 {
		t.Fatalf("loss probability %v with warm-ups every 10ms, %v every hour", soon, late)
	}
}

// SetBudget sets the whole budget: the shards keep their share of it
// (Memory of Cache.Budget at the start), evicting to fit, and the budget
// reported back is the one set.
func TestErasureSetBudget(t *testing.T) {
	g := newECGroup(t) // budget 4 MiB, shards 1 MiB of it and backups 256 KiB besides
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want, PassThrough)
	g.waitShards(t, info.ETag)
	c := g.members[3]
	if b, used := c.Budget(); b != 4<<20 || used == 0 {
		t.Fatalf("at the start: budget %d, used %d; want 4 MiB", b, used)
	}
	shard := int64(len(c.ec.shards.Get(testBucket, "big", info.ETag).Data))

	c.SetBudget(2 << 20)
	ecBudget := func() int64 { return c.ec.shards.Stats().Budget + c.ec.bk.store.Stats().Budget }
	if b, _ := c.Budget(); b != 2<<20 || c.cache.Stats().Budget != 1408<<10 || ecBudget() != 640<<10 || c.ec.bk.store.Stats().Budget != 128<<10 {
		t.Fatalf("after SetBudget(2 MiB): whole %d, memory tier %d, shards and backups %d", b, c.cache.Stats().Budget, ecBudget())
	}
	if n := c.Counters(); n.BudgetBytes != 2<<20 || n.CacheBytes < shard {
		t.Fatalf("counters %+v, want the whole budget and the shard held", n)
	}
	// Below the shard's size: the shard goes, and is reported freed.
	if freed := c.SetBudget(2 * shard); freed < shard || c.ec.shards.Stats().Bytes != 0 {
		t.Fatalf("SetBudget(%d): freed %d, shards left %+v", 2*shard, freed, c.ec.shards.Stats())
	}
	c.SetBudget(4 << 20)
	if b, _ := c.Budget(); b != 4<<20 || ecBudget() != 1280<<10 {
		t.Fatalf("raised back: whole %d, shards and backups %d", b, ecBudget())
	}
	// The object still reads right: a holder lost its shard, k are left.
	g.mustRead(t, 5, "big", want, ErasureHit)
}

// backupRouter names member i+1 the backup holder of member i.
type backupRouter struct{ placeRouter }

func (r backupRouter) BackupHolder(origin string) string {
	i := slices.Index(r.all, origin)
	if i < 0 {
		return ""
	}
	return r.all[(i+1)%len(r.all)]
}

// A backup sends only the shards changed since the last one; the holder
// keeps them verified and apart from its own.
func TestErasureBackupDelta(t *testing.T) {
	g := newGroup(t, 6, func(c *Config) {
		c.Cache.Budget = 4 << 20
		c.Cache.MaxObjectSize = 2 << 20
		c.Router = backupRouter{placeRouter{c.Router.(*staticRouter)}}
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 4 << 10},
			Memory: 1 << 20, Backup: time.Hour}
	})
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want, PassThrough)
	g.waitShards(t, info.ETag)
	c, holder := g.members[2], g.members[3]
	own := holder.ec.shards.Get(testBucket, "big", info.ETag)
	if n := c.ec.backupOnce(t.Context()); n != 1 {
		t.Fatalf("first backup sent %d shards, want its one", n)
	}
	if n := c.ec.backupOnce(t.Context()); n != 0 {
		t.Fatalf("a backup with nothing changed sent %d shards", n)
	}
	mine := c.ec.shards.Get(testBucket, "big", info.ETag)
	kept := holder.ec.bk.store.Peek(mine.Key)
	if kept == nil || !bytes.Equal(kept.Data, mine.Data) || holder.ec.shards.Get(testBucket, "big", info.ETag) != own {
		t.Fatal("the backup holder does not keep the shard apart from its own")
	}
	if toFloat64(c.ec.bk.sentBytes) != float64(len(mine.Data)) {
		t.Fatalf("hoard_erasure_backup_bytes_total %v", toFloat64(c.ec.bk.sentBytes))
	}

	// A new version: only its shard goes.
	want2 := bytes.Repeat([]byte("second version "), 15_000)
	g.put(t, "big", want2)
	info2, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want2, PassThrough)
	g.waitShards(t, info2.ETag)
	// The share backed up enters the loss probability: a member lost,
	// the risk is lower with the shard backed up than before.
	c.ec.mu.Lock()
	c.ec.losses = append(c.ec.losses, time.Now())
	c.ec.mu.Unlock()
	before := c.ec.risk()
	if n := c.ec.backupOnce(t.Context()); n != 1 {
		t.Fatalf("backup after a new version sent %d shards, want 1", n)
	}
	if after := c.ec.risk(); c.ec.backedUpShare(1) != 1 || after <= 0 || after >= before {
		t.Fatalf("loss probability %v before the backup, %v after (share backed up %v)", before, after, c.ec.backedUpShare(1))
	}

	// Damaged bytes are refused, and the holder keeps nothing of them.
	bad := bytes.Clone(mine.Data)
	bad[100] ^= 1
	k := mine.Key
	k.Key = "other"
	err := g.members[4].PeerShardBackup(t.Context(), g.addrs[2], k.Bucket, k.Key, k.ETag, k.Index, mine.Encoded, bytes.NewReader(bad), int64(len(bad)))
	if err == nil || g.members[4].ec.bk.store.Peek(k) != nil {
		t.Fatalf("a damaged backup: %v", err)
	}
}

// Stale backups are dropped: a shard its origin no longer holds (written
// over), everything of an origin that starts again, what a holder keeps
// for a member whose holder it no longer is, and a version a write
// changed; each counted by reason.
func TestErasureBackupsDropStale(t *testing.T) {
	g := newGroup(t, 6, func(c *Config) {
		c.Cache.Budget = 4 << 20
		c.Cache.MaxObjectSize = 2 << 20
		sr := c.Router.(*staticRouter)
		c.Router, c.Members = backupRouter{placeRouter{sr}}, sr
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 4 << 10},
			Memory: 1 << 20, Backup: time.Hour}
	})
	dropped := func(c *Cachelet, reason string) float64 { return toFloat64(c.ec.bk.dropped.WithLabelValues(reason)) }
	v1 := make([]byte, 200_000)
	_, _ = rand.Read(v1)
	g.put(t, "big", v1)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", v1, PassThrough)
	g.waitShards(t, info.ETag)
	g.mustRead(t, 0, "big", v1, ErasureHit) // member 0 knows the version it will write over
	// Member 4 holds a shard; member 5, outside the placement, its backup.
	c, holder := g.members[4], g.members[5]
	if n := c.ec.backupOnce(t.Context()); n != 1 {
		t.Fatalf("first backup sent %d shards, want 1", n)
	}
	old := c.ec.shards.Get(testBucket, "big", info.ETag).Key
	if holder.ec.bk.store.Peek(old) == nil {
		t.Fatal("the holder keeps no backup")
	}

	// Written over through member 0: the placement drops its shards; the
	// backup outside it is dropped at the origin's next pass.
	v2 := bytes.Repeat([]byte("second version "), 15_000)
	if _, err := g.members[0].Put(t.Context(), testBucket, "big", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); c.ec.shards.Peek(old) != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the origin still holds the shard written over")
		}
	}
	info2, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.waitShards(t, info2.ETag) // written as shards
	g.mustRead(t, 5, "big", v2, ErasureHit)
	if holder.ec.bk.store.Peek(old) == nil {
		t.Fatal("the backup went before the origin's pass named it")
	}
	// The pass sends the new version's shard and drops the old one's.
	if n := c.ec.backupOnce(t.Context()); n != 1 {
		t.Fatalf("backup of the new version sent %d shards, want 1", n)
	}
	cur := c.ec.shards.Get(testBucket, "big", info2.ETag)
	if holder.ec.bk.store.Peek(old) != nil || holder.ec.bk.store.Peek(cur.Key) == nil || dropped(holder, dropNotHeld) != 1 {
		t.Fatalf("after the origin's pass: old backup kept %v, new kept %v, dropped not_held %v",
			holder.ec.bk.store.Peek(old) != nil, holder.ec.bk.store.Peek(cur.Key) != nil, dropped(holder, dropNotHeld))
	}

	// The origin starts again at the same address, holding nothing: its
	// first pass drops all it had backed up.
	c.ec.shards.Delete(testBucket, "big", "")
	c.ec.bk.mu.Lock()
	c.ec.bk.to, c.ec.bk.sent = "", map[erasure.ShardKey]*erasure.Shard{}
	c.ec.bk.mu.Unlock()
	if n := c.ec.backupOnce(t.Context()); n != 0 || holder.ec.bk.store.Peek(cur.Key) != nil || dropped(holder, dropReset) != 1 {
		t.Fatalf("a restarted origin's pass: sent %d, backup kept %v, dropped reset %v", n, holder.ec.bk.store.Peek(cur.Key) != nil, dropped(holder, dropReset))
	}

	// Member 5 keeps backups for member 4 (its holder), for member 2
	// (whose holder is member 3) and for an address no longer a member:
	// a prune drops member 2's alone.
	keep := func(origin string, index int) erasure.ShardKey {
		sh := g.members[index].ec.shards.Get(testBucket, "big", info2.ETag)
		if err := holder.PeerShardBackup(t.Context(), origin, testBucket, "big", info2.ETag, sh.Key.Index, sh.Encoded, bytes.NewReader(sh.Data), int64(len(sh.Data))); err != nil {
			t.Fatal(err)
		}
		return sh.Key
	}
	mine, moved, gone := keep(g.addrs[4], 1), keep(g.addrs[2], 2), keep("127.0.0.1:1", 3)
	holder.ec.pruneBackups()
	if holder.ec.bk.store.Peek(moved) != nil || holder.ec.bk.store.Peek(mine) == nil || holder.ec.bk.store.Peek(gone) == nil || dropped(holder, dropMoved) != 1 {
		t.Fatalf("prune: moved kept %v, own origin's kept %v, departed's kept %v, dropped moved %v",
			holder.ec.bk.store.Peek(moved) != nil, holder.ec.bk.store.Peek(mine) != nil, holder.ec.bk.store.Peek(gone) != nil, dropped(holder, dropMoved))
	}

	// A write's invalidation drops the version's backups with its shards.
	if err := holder.Delete(t.Context(), testBucket, "big"); err != nil {
		t.Fatal(err)
	}
	if holder.ec.bk.store.Stats().Shards != 0 || dropped(holder, dropInvalidated) != 2 {
		t.Fatalf("after a delete: %d backups kept, dropped invalidated %v", holder.ec.bk.store.Stats().Shards, dropped(holder, dropInvalidated))
	}
}

// The budget is split before the memory tier takes its defaults: an
// erasure memory above half the budget (and the backups' memory, a
// quarter of it by default, apart) leaves a tier whose largest object and
// reservations are taken from the tier's own budget, and only a split
// that really does not fit is refused, with an error naming the parts.
func TestErasureBudgetSplit(t *testing.T) {
	ec := func(memory int64) *ErasureConfig {
		return &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2}, Memory: memory}
	}
	c := Config{Cache: cache.Config{Budget: 16 << 20}, Erasure: ec(12 << 20)}
	if err := c.Validate(); err != nil {
		t.Fatalf("erasure memory 12 MiB of 16 MiB: %v", err)
	}
	if c.Erasure.BackupMemory != 3<<20 {
		t.Fatalf("backup memory %d, want a quarter of the erasure memory", c.Erasure.BackupMemory)
	}
	if c.Cache.Budget != 16<<20 || c.Cache.MaxObjectSize != 512<<10 || c.Cache.MaxFillReserve != 256<<10 || c.Cache.MaxUploadReserve != 256<<10 {
		t.Fatalf("the tier's settings: %+v; want the whole budget kept and defaults from the tier's 1 MiB", c.Cache)
	}
	if err := c.Validate(); err != nil || c.Cache.MaxObjectSize != 512<<10 {
		t.Fatalf("validated again: %v, largest object %d", err, c.Cache.MaxObjectSize)
	}
	// A cachelet starts with it (the tier's cache validates its own
	// budget again).
	g := newGroup(t, 1, func(c *Config) {
		c.Cache = cache.Config{Budget: 16 << 20}
		c.Router = placeRouter{c.Router.(*staticRouter)}
		c.Erasure = ec(12 << 20)
	})
	if got := g.members[0].cache.Stats().Budget; got != 1<<20 {
		t.Fatalf("memory tier's budget %d, want 1 MiB", got)
	}
	if s, b := g.members[0].ec.shards.Stats().Budget, g.members[0].ec.bk.store.Stats().Budget; s != 12<<20 || b != 3<<20 {
		t.Fatalf("shards' budget %d, backups' %d: want 12 and 3 MiB, apart", s, b)
	}
	if b, _ := g.members[0].Budget(); b != 16<<20 {
		t.Fatalf("whole budget %d", b)
	}

	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"erasure memory the whole budget", Config{Cache: cache.Config{Budget: 16 << 20}, Erasure: ec(16 << 20)},
			"erasure memory 16777216 and backup memory 4194304 must together be below the budget 16777216"},
		{"with the backups' quarter, the whole budget", Config{Cache: cache.Config{Budget: 16 << 20}, Erasure: ec(13 << 20)},
			"erasure memory 13631488 and backup memory 3407872 must together be below the budget 16777216"},
		{"largest object above the tier", Config{Cache: cache.Config{Budget: 16 << 20, MaxObjectSize: 8 << 20}, Erasure: ec(12 << 20)},
			"the memory tier's budget 1048576 (the budget 16777216 less the erasure memory 12582912 and backup memory 3145728): cache: max object size 8388608"},
		{"no budget", Config{Erasure: ec(0)}, "positive budget"},
	} {
		before := tc.cfg
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if a, b := tc.cfg.Cache, before.Cache; a.Budget != b.Budget || a.MaxObjectSize != b.MaxObjectSize || a.MaxFillReserve != b.MaxFillReserve || a.MaxUploadReserve != b.MaxUploadReserve {
			t.Errorf("%s: a refused split changed the tier's settings: %+v", tc.name, tc.cfg.Cache)
		}
	}
}

// A cachelet that holds no shards still sees members leave, and the risk
// it reports is a probability: not zero, not NaN (faults per shard held
// once divided zero by zero there).
func TestErasureRiskHoldingNoShards(t *testing.T) {
	g := newECGroup(t)
	e := g.members[0].ec
	if held := e.shards.Stats().Shards; held != 0 {
		t.Fatalf("a fresh member holds %d shards", held)
	}
	now := g.members[0].clock.Now()
	e.mu.Lock()
	e.losses = append(e.losses, now, now)
	e.mu.Unlock()
	if p := e.risk(); !(p > 0 && p < 1) {
		t.Fatalf("loss probability %v after two members lost, holding no shards", p)
	}
}

// A holder of a shard that never read the object itself reads it from the
// shards on its first read (it learned the object is large from the
// shard's manifest), rather than through the owner, which would read the
// store again to answer; a member that holds no shard and never read it
// goes the ordinary way.
func TestErasureHolderReadsShardsFirst(t *testing.T) {
	g := newECGroup(t)
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want, PassThrough) // the owner (0) fills and shards it
	g.waitShards(t, info.ETag)
	for i := 1; i < 5; i++ {
		k := cache.Key{Bucket: testBucket, Object: "big"}
		if _, trusted := g.members[i].ec.trusted(k); !g.members[i].ec.knows(k) || trusted {
			t.Fatalf("holder %d: knows the key %v, trusts its version %v; want known, not trusted without the store's word", i, g.members[i].ec.knows(k), trusted)
		}
		g.mustRead(t, i, "big", want, ErasureHit)
	}
	if hits := toFloat64(g.members[0].m.peerServed.WithLabelValues("remote_miss")) + toFloat64(g.members[0].m.peerServed.WithLabelValues("remote_hit")); hits != 1 {
		t.Fatalf("the owner served %v reads to peers; want only the first one's", hits)
	}
}
