//go:build integration && linux

package instance_test

// The erasure-coded path with real processes: eight `hoard serve`
// cachelets of one application (RS(3+2) over 1 MiB objects and up), MinIO
// as the store, an embedded etcd. A large object is sharded over five of
// them; a read with two holders killed decodes from the other three; once
// they left the ring, their shards are rebuilt onto the two new members of
// the placement, which then serve reads when two more holders are killed;
// with a third killed it is a miss served from the store; the bytes are
// right every time.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/ring"
)

// sample returns the value of the metric line that starts with series
// (name and labels, e.g. `hoard_erasure_reads_total{result="hit"}`), 0
// when absent.
func (p *hoardProc) sample(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatalf("%s: scrape: %v", p.id, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

func TestErasureCodedObject(t *testing.T) {
	const app, n, bucket, key = "ecapp", 8, "ecbucket", "large/object.bin"
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	eps := strings.Join(etcd.Endpoints(), ",")
	members := watchMembers(t, etcd.Endpoints(), app)

	var procs []*hoardProc
	var ids []string
	fc := &faultCluster{app: app, store: srv}
	for i := range n {
		p := newHoardProc(t, dir, app, i)
		p.start(t, bin, app, eps, srv.Endpoint(), "--erasure", "3+2", "--erasure-threshold", "1MiB", "--erasure-chunk", "64KiB", "--erasure-warmup", "200ms", "--erasure-backup", "200ms",
			// Backup holders are chosen by hashing each origin's address, so
			// one member may back up every holder: room for all five shards
			// of two versions at once (10.6 MiB) keeps every backup held.
			"--erasure-backup-memory", "12MiB")
		p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
		procs = append(procs, p)
		ids = append(ids, p.id)
	}
	for _, p := range procs {
		fc.waitHealthy(t, p)
		// The backups' memory is apart from the shards'.
		if shards, backups := p.sample(t, "hoard_erasure_budget_bytes"), p.sample(t, "hoard_erasure_backup_budget_bytes"); shards != 16<<20 || backups != 12<<20 {
			t.Fatalf("%s: shard budget %v, backup budget %v: want 16 MiB (a quarter of the budget) and 12 MiB apart", p.id, shards, backups)
		}
	}
	if _, ok := members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, ids) }); !ok {
		t.Fatalf("etcd never listed members %v", ids)
	}
	time.Sleep(300 * time.Millisecond) // every cachelet's own watch catches up
	r, err := ring.New(ring.Config{}, ids)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]*hoardProc{}
	for _, p := range procs {
		byID[p.id] = p
	}
	holders := erasure.Place(r, nil, bucket, key, 5)
	// Once the first two holders are gone, the placement on the six left.
	r6, err := r.Without(holders[0])
	if err == nil {
		r6, err = r6.Without(holders[1])
	}
	if err != nil {
		t.Fatal(err)
	}
	holders6 := erasure.Place(r6, nil, bucket, key, 5)
	var reader *hoardProc // a cachelet holding no shard, before or after: every shard comes over the network
	for _, p := range procs {
		if !slices.Contains(holders, p.id) && !slices.Contains(holders6, p.id) {
			reader = p
			break
		}
	}
	owner := byID[holders[0]]

	direct := faultClient(t, srv.Endpoint(), storeAK, storeSK)
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 3<<20+12345) // 3 MiB and a partial stripe: 17 stripes of 192 KiB
	_, _ = rand.Read(want)
	if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	read := func(what string) {
		t.Helper()
		got, err := getValue(ctx, reader.client, bucket, key)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %d bytes, err %v: want the object's %d bytes", what, len(got), err, len(want))
		}
	}
	readRange := func(what string, off, length int64) {
		t.Helper()
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(off, off+length-1); err != nil {
			t.Fatal(err)
		}
		obj, err := reader.client.GetObject(ctx, bucket, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer obj.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(obj); err != nil || !bytes.Equal(buf.Bytes(), want[off:off+length]) {
			t.Fatalf("%s: %d bytes, err %v", what, buf.Len(), err)
		}
	}
	hits := func() float64 { return reader.sample(t, `hoard_erasure_reads_total{result="hit"}`) }
	misses := func() float64 { return reader.sample(t, `hoard_erasure_reads_total{result="miss"}`) }

	// The first read goes to the owner, which streams it from the store
	// and shards it in the background.
	read("first read")
	deadline := time.Now().Add(30 * time.Second)
	for owner.sample(t, `hoard_erasure_fills_total{result="full"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("owner %s never sharded the object\n%s", owner.id, owner.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range holders {
		if got := byID[id].sample(t, "hoard_erasure_held_bytes"); got == 0 {
			t.Fatalf("holder %s holds no shard", id)
		}
	}
	read("read of the sharded object")
	if hits() != 1 {
		t.Fatalf("erasure hits %v after a read of a sharded object, want 1", hits())
	}
	readRange("ranged read", 1<<20+77, 300000)
	if hits() != 2 {
		t.Fatalf("erasure hits %v after a ranged read, want 2", hits())
	}

	// Each holder backs its shard up to its backup holder.
	sent := func(id string) float64 { return byID[id].sample(t, `hoard_erasure_backups_total{result="sent"}`) }
	sent0 := map[string]float64{}
	deadline = time.Now().Add(30 * time.Second)
	for _, id := range holders {
		for sent(id) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("holder %s never backed its shard up\n%s", id, byID[id].logTail())
			}
			time.Sleep(50 * time.Millisecond)
		}
		sent0[id] = sent(id)
	}

	// A write through the cachelets: the next read has the new bytes,
	// the old version's shards are dropped and the new one is sharded.
	want = make([]byte, len(want))
	_, _ = rand.Read(want)
	if _, err := reader.client.PutObject(ctx, bucket, key, bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	read("read after a write")
	// The writer shards the new version in the background: that read was
	// served from its shards or not, as the race went; later reads of
	// the new version count from here.
	h0 := hits()
	if h0 != 2 && h0 != 3 {
		t.Fatalf("erasure hits %v after a read of the new version just written, want 2 or 3", h0)
	}
	fills := func() float64 {
		var sum float64
		for _, p := range procs {
			sum += p.sample(t, `hoard_erasure_fills_total{result="full"}`)
		}
		return sum
	}
	// The writer shards what it wrote; the old version's shards are
	// dropped in the background.
	const shardBytes = 17 * 64 << 10 // 17 stripes of 64 KiB per shard
	oneShardEach := func() (string, bool) {
		for _, id := range holders {
			if got := byID[id].sample(t, "hoard_erasure_held_bytes"); got != shardBytes {
				return fmt.Sprintf("holder %s holds %v bytes of shards, want one shard (%d)", id, got, shardBytes), false
			}
		}
		return "", true
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		why, ok := oneShardEach()
		if ok && fills() >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the write (%v fills): %s\n%s", fills(), why, reader.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Every holder's warm-up visits its shard (and reports what it read).
	deadline = time.Now().Add(30 * time.Second)
	for _, id := range holders {
		for byID[id].sample(t, "hoard_erasure_warmup_bytes_total") < shardBytes || byID[id].sample(t, `hoard_erasure_warmup_dropped_total`) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("holder %s: warm-ups read %v bytes, dropped %v shards; want at least its shard's %d and none dropped", id,
					byID[id].sample(t, "hoard_erasure_warmup_bytes_total"), byID[id].sample(t, "hoard_erasure_warmup_dropped_total"), shardBytes)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The new version's shards are backed up too (a delta: one shard each).
	deadline = time.Now().Add(30 * time.Second)
	for _, id := range holders[:2] {
		for sent(id) < sent0[id]+1 {
			if time.Now().After(deadline) {
				t.Fatalf("holder %s never backed the new version's shard up", id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// The old version's backups are dropped (invalidated with its shards,
	// or named by their origin's next backup): the members keep one
	// backup per shard held, of the new version alone.
	backupsHeld := func() (held, dropped float64) {
		for _, p := range procs {
			held += p.sample(t, "hoard_erasure_backup_held_bytes")
			// Whichever path dropped them: named by the origin's next
			// pass, invalidated with the shards, or (when a pass races
			// the write) dropped as moved or reset.
			for _, r := range []string{"not_held", "invalidated", "moved", "reset"} {
				dropped += p.sample(t, `hoard_erasure_backup_dropped_total{reason="`+r+`"}`)
			}
		}
		return held, dropped
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		held, dropped := backupsHeld()
		if held == float64(len(holders)*shardBytes) && dropped >= float64(len(holders)) {
			break
		}
		if time.Now().After(deadline) {
			var evicted float64
			for _, p := range procs {
				evicted += p.sample(t, "hoard_erasure_backup_evicted_total")
			}
			t.Fatalf("backups held %v bytes, want %d (one shard per holder); stale ones dropped %v, want %d; evicted %v", held, len(holders)*shardBytes, dropped, len(holders), evicted)
		}
		time.Sleep(50 * time.Millisecond)
	}
	read("read of the new version")
	if hits() != h0+1 {
		t.Fatalf("erasure hits %v after a read of the new version, want %v", hits(), h0+1)
	}
	m0 := misses() // reads while the new version was being sharded

	// Two holders (the owner among them) killed: three shards are left,
	// enough to decode.
	for _, id := range holders[:2] {
		byID[id].signal(t, syscall.SIGKILL)
		<-byID[id].exited
	}
	read("read with two holders killed")
	if hits() != h0+2 || misses() != m0 {
		t.Fatalf("with two holders killed: hits %v misses %v, want %v and %v", hits(), misses(), h0+2, m0)
	}

	// The two leave the ring (lease expiry): the first of the new
	// placement holding a shard rebuilds the two missing ones onto the
	// two members that hold none.
	if _, ok := members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return len(got) == n-2 }); !ok {
		t.Fatal("the killed holders never left the ring")
	}
	rebuilt := func() float64 {
		var sum float64
		for _, id := range holders6 {
			sum += byID[id].sample(t, `hoard_erasure_rebuilds_total{result="rebuilt"}`)
		}
		return sum
	}
	deadline = time.Now().Add(30 * time.Second)
	allHold := func() bool {
		for _, id := range holders6 {
			if byID[id].sample(t, "hoard_erasure_held_bytes") == 0 {
				return false
			}
		}
		return true
	}
	// The killed holders' backup holders (the ring's first owner of each
	// one's peer address other than itself) that survive write their
	// backups to the new placement as soon as they see the departure,
	// before the rebuild's delay: those shards need no rebuild.
	restored := func() float64 {
		var sum float64
		for _, p := range procs {
			if !slices.Contains(holders[:2], p.id) {
				sum += p.sample(t, `hoard_erasure_backup_restores_total{result="restored"}`)
			}
		}
		return sum
	}
	backedBySurvivor := 0
	for _, id := range holders[:2] {
		for _, o := range r.Owners("hoard-backup", byID[id].peer, 2) {
			if o != id {
				if !slices.Contains(holders[:2], o) {
					backedBySurvivor++
				}
				break
			}
		}
	}
	// (Two leases may expire apart: a pass over seven members may come
	// first, and the one over six completes the placement.)
	for rebuilt()+restored() < 2 || !allHold() {
		if time.Now().After(deadline) {
			t.Fatalf("shards rebuilt: %v, restored from backups %v, want 2 in all; every member of the new placement %v holding one: %v", rebuilt(), restored(), holders6, allHold())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The first departure seen is restored from its backup before the
	// rebuild's delay ends; the second may already have been rebuilt by
	// the pass the first started (its holder unreachable, though still in
	// the ring), so one restore is what is certain when both killed
	// holders' backup holders survived.
	if backedBySurvivor == 2 && restored() < 1 {
		for _, p := range procs {
			if !slices.Contains(holders[:2], p.id) {
				t.Logf("%s: restored %v failed %v held backups %v", p.id, p.sample(t, `hoard_erasure_backup_restores_total{result="restored"}`),
					p.sample(t, `hoard_erasure_backup_restores_total{result="failed"}`), p.sample(t, "hoard_erasure_backup_held_bytes"))
			}
		}
		t.Fatalf("no shard restored from backups, though both killed holders' backup holders survived")
	}
	// The two losses make the risk visible (once the reader's own watch
	// has seen both).
	deadline = time.Now().Add(20 * time.Second)
	for reader.sample(t, "hoard_erasure_member_losses_total") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the reader counted %v members lost, want 2", reader.sample(t, "hoard_erasure_member_losses_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l, p := reader.sample(t, "hoard_erasure_member_losses_total"), reader.sample(t, "hoard_erasure_loss_probability"); l != 2 || !(p > 0 && p < 1) { // NaN is no probability either
		t.Fatalf("after two members lost: losses %v, loss probability %v; want 2 and a probability", l, p)
	}
	var survivors, fresh []string // holders of original shards, and of rebuilt ones
	for _, id := range holders6 {
		if slices.Contains(holders, id) {
			survivors = append(survivors, id)
		} else {
			fresh = append(fresh, id)
		}
	}
	// Two of the three original survivors killed: what is left to decode
	// is one original shard and the two rebuilt ones.
	for _, id := range survivors[:2] {
		byID[id].signal(t, syscall.SIGKILL)
		<-byID[id].exited
	}
	read("read from rebuilt shards")
	if hits() != h0+3 || misses() != m0 {
		t.Fatalf("after the rebuild, two more holders killed: hits %v misses %v, want %v and %v", hits(), misses(), h0+3, m0)
	}
	// A third: two shards cannot be decoded (nor rebuilt); the store
	// serves the read.
	byID[survivors[2]].signal(t, syscall.SIGKILL)
	<-byID[survivors[2]].exited
	read("read with three holders killed")
	if hits() != h0+3 || misses() != m0+1 {
		t.Fatalf("with three holders killed: hits %v misses %v, want %v and %v", hits(), misses(), h0+3, m0+1)
	}
	t.Logf("reader %s, holders %v, after the rebuild %v (rebuilt onto %v)", reader.id, holders, holders6, fresh)
}
