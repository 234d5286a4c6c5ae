package cachelet

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/store"
)

func TestCounters(t *testing.T) {
	e := newEnv(t, nil)
	small, large := object("small", 1, 3000), object("large", 1, testMaxSize+1)
	e.storePut("small", small)
	e.storePut("large", large)
	before := e.c.Counters()
	if before != (Counters{BudgetBytes: testBudget}) {
		t.Fatalf("a new cachelet's counters: %+v", before)
	}

	e.mustRead("small", small, LocalMiss)
	e.mustRead("small", small, LocalHit)
	e.mustRead("small", small, LocalHit)
	e.mustRead("large", large, PassThrough)
	if _, _, err := e.read("small", &store.ByteRange{Start: 0, End: 99}); err != nil {
		t.Fatal(err)
	}
	e.cput("written", object("written", 1, 500))
	if _, err := e.c.Copy(t.Context(), store.CopySource{Bucket: testBucket, Key: "small"}, testBucket, "copy", store.CopyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Copy(t.Context(), store.CopySource{Bucket: testBucket, Key: "missing"}, testBucket, "copy2", store.CopyOptions{}); err == nil {
		t.Fatal("copy of a missing object succeeded")
	}

	got := e.c.Counters()
	// Times are real: they are checked apart, then left out.
	if got.StoreFit.N != 2 || got.WriteNanos <= 0 || got.Reads.LocalMiss.Nanos <= 0 {
		t.Fatalf("the store's fit holds %d reads (want the miss and the pass-through), writes took %d ns, the miss %d ns",
			got.StoreFit.N, got.WriteNanos, got.Reads.LocalMiss.Nanos)
	}
	got = untimed(got)
	want := Counters{
		Reads: ReadCounters{
			LocalMiss:   ReadCount{Count: 1, Bytes: 3000},
			LocalHit:    ReadCount{Count: 3, Bytes: 2*3000 + 100}, // the range counts what it sent
			PassThrough: ReadCount{Count: 1, Bytes: int64(len(large))},
		},
		Writes:       2, // the failed copy does not count
		CacheBytes:   3000 + 500,
		CacheObjects: 2,
		BudgetBytes:  testBudget,
	}
	if got != want {
		t.Fatalf("counters\n got %+v\nwant %+v", got, want)
	}

	// The JSON the platform reads.
	data, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"reads":{"local_hit":{"count":3,"bytes":6100,"nanos":0},"local_miss":{"count":1,"bytes":3000,"nanos":0},` +
		`"remote_hit":{"count":0,"bytes":0,"nanos":0},"remote_miss":{"count":0,"bytes":0,"nanos":0},"pass_through":{"count":1,"bytes":262145,"nanos":0},"disk_hit":{"count":0,"bytes":0,"nanos":0}},` +
		`"writes":2,"cache_bytes":3500,"cache_objects":2,"budget_bytes":1048576,"evicted_again":0,"not_admitted":0,"write_nanos":0,` +
		`"store_fit":{"n":0,"sum_s":0,"sum_t":0,"sum_s2":0,"sum_st":0}}`
	if string(data) != wantJSON {
		t.Fatalf("JSON\n got %s\nwant %s", data, wantJSON)
	}
}

// Reads through the key's owner count as remote hits and misses where they
// were asked for; the owner does not count what it served its peers.
func TestCountersRemote(t *testing.T) {
	g := newGroup(t, 3)
	a, b := object("a", 1, 5000), object("b", 1, 7000)
	g.put(t, "a", a)
	g.put(t, "b", b)
	g.mustRead(t, 0, "a", a, LocalMiss)
	g.mustRead(t, 1, "a", a, RemoteHit)
	g.mustRead(t, 1, "b", b, RemoteMiss)
	g.mustRead(t, 1, "b", b, LocalHit)

	if got := untimed(g.members[1].Counters()).Reads; got != (ReadCounters{
		LocalHit: ReadCount{Count: 1, Bytes: 7000}, RemoteHit: ReadCount{Count: 1, Bytes: 5000}, RemoteMiss: ReadCount{Count: 1, Bytes: 7000},
	}) {
		t.Fatalf("the reader's counters: %+v", got)
	}
	if got := untimed(g.members[0].Counters()).Reads; got != (ReadCounters{LocalMiss: ReadCount{Count: 1, Bytes: 5000}}) {
		t.Fatalf("the owner's counters: %+v (reads for peers must not count)", got)
	}
	if _, err := g.members[2].Put(t.Context(), testBucket, "c", bytes.NewReader(a), int64(len(a)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := g.members[2].Counters().Writes; w != 1 {
		t.Fatalf("writes = %d, want 1", w)
	}
}

func TestEvictedAgain(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Cache.Budget = 10000; c.Cache.MaxObjectSize = 6000 })
	a, b := object("a", 1, 6000), object("b", 1, 6000)
	e.storePut("a", a)
	e.storePut("b", b)
	for range 3 { // a and b cannot both fit: each read evicts the other
		e.mustRead("a", a, LocalMiss)
		e.settle()
		e.mustRead("b", b, LocalMiss)
		e.settle()
	}
	// Evictions: a, b, a, b, a (the first of each is not a repeat).
	if got := e.c.Counters().EvictedAgain; got != 3 {
		t.Errorf("EvictedAgain = %d; want 3", got)
	}
}

// TestSettledCounters: a read whose body is still open is not counted
// yet; SettledCounters waits for it to close (and gives up at its
// deadline with what is counted).
func TestSettledCounters(t *testing.T) {
	e := newEnv(t, nil)
	e.storePut("k", object("k", 1, 3000))
	obj, err := e.c.Get(t.Context(), testBucket, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	body := obj.Body
	io.Copy(io.Discard, body)
	short, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	before := e.c.SettledCounters(short).Reads
	if n := before.LocalHit.Count + before.LocalMiss.Count; n != 0 {
		t.Fatalf("an open read was counted: %+v", before)
	}
	go func() {
		time.Sleep(20 * time.Millisecond) // the server closing the body a moment after the client read it
		body.Close()
	}()
	after := e.c.SettledCounters(t.Context()).Reads
	if n := after.LocalHit.Count + after.LocalMiss.Count; n != 1 {
		t.Fatalf("SettledCounters did not wait for the read: %+v", after)
	}
}

// untimed is c without its times, which are real.
func untimed(c Counters) Counters {
	r := &c.Reads
	for _, rc := range []*ReadCount{&r.LocalHit, &r.LocalMiss, &r.RemoteHit, &r.RemoteMiss, &r.PassThrough, &r.DiskHit} {
		rc.Nanos = 0
	}
	c.WriteNanos, c.StoreFit = 0, admission.StoreFit{}
	return c
}
