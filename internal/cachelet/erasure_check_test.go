package cachelet

import (
	"bytes"
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// newECGroupWith is newECGroup under a write target and read mode.
func newECGroupWith(t *testing.T, target WriteTarget, read ReadMode) *group {
	t.Helper()
	return newGroup(t, 6, func(c *Config) {
		c.Cache.Budget = 4 << 20
		c.Cache.MaxObjectSize = 2 << 20
		c.WriteTarget, c.ReadMode = target, read
		c.Router = placeRouter{c.Router.(*staticRouter)}
		c.Erasure = &ErasureConfig{Config: erasure.Config{DataShards: 3, ParityShards: 2, Threshold: 64 << 10, ChunkSize: 4 << 10}, Memory: 1 << 20}
	})
}

// storeCalls is the store's HEADs and GETs since the last ResetCounts.
func storeCalls(st *memstore.Store) (heads, gets int) {
	return st.Calls(memstore.OpStat), st.GetCounts().Total
}

// A read served from shards asks the store for the version exactly once
// under strong, and not at all under owner and local once the cachelet
// trusts the version: under owner a cachelet other than the key's owner
// asks the owner instead. A write is never read over, in any setting.
func TestErasureReadVersionChecks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target WriteTarget
		read   ReadMode
		heads  int // store HEADs per read from shards
	}{
		{"strong", WriteStore, ReadVersionCheck, 1},
		{"owner", WriteOwner, ReadOwner, 0},
		{"local", WriteLocal, ReadLocal, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newECGroupWith(t, tc.target, tc.read)
			st := g.st
			want := make([]byte, 200_000)
			_, _ = rand.Read(want)
			g.put(t, "big", want)
			info, _ := st.Stat(t.Context(), testBucket, "big")
			if got, _, err := g.read(t, 5, "big"); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("first read: %v", err)
			}
			g.waitShards(t, info.ETag)
			// Member 5 holds no shard and is not the owner; member 0
			// is the owner.
			for _, i := range []int{5, 0, 5} {
				st.ResetCounts()
				g.mustRead(t, i, "big", want, ErasureHit)
				if heads, gets := storeCalls(st); heads != tc.heads || gets != 0 {
					t.Fatalf("a read from shards at member %d: %d store HEADs and %d GETs, want %d and 0", i, heads, gets, tc.heads)
				}
			}

			// A write through member 5 is read back there, never the
			// shards of the version before; under strong and owner the
			// owner reads it back too. Under local no other cachelet
			// learns of a write: the owner may still serve the version
			// it saw, or have the read cut short when that version's
			// shards go mid-read (the store no longer has it), but
			// never bytes of two versions as one.
			next := bytes.Repeat([]byte("n"), 150_000)
			if _, err := g.members[5].Put(t.Context(), testBucket, "big", bytes.NewReader(next), int64(len(next)), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{5, 0} {
				got, o, err := g.read(t, i, "big")
				if tc.read == ReadLocal && i != 5 && (err != nil || bytes.Equal(got, want)) {
					continue
				}
				if err != nil || !bytes.Equal(got, next) {
					t.Fatalf("member %d after the write: %v, outcome %s, new bytes %v", i, err, o, bytes.Equal(got, next))
				}
			}
		})
	}
}

// Under strong, the reads of one sharded object that arrive while its
// version check is on the wire share the next one: N readers behind a
// held HEAD cost two HEADs, and each is served the right bytes.
func TestErasureVersionChecksShared(t *testing.T) {
	g := newECGroup(t)
	want := make([]byte, 200_000)
	_, _ = rand.Read(want)
	g.put(t, "big", want)
	info, _ := g.st.Stat(t.Context(), testBucket, "big")
	g.mustRead(t, 5, "big", want, PassThrough)
	g.waitShards(t, info.ETag)

	c := g.members[5]
	joins := toFloat64(c.m.validationJoins)
	g.st.ResetCounts()
	hold := g.st.HoldStat(testBucket, "big")
	defer hold.Release()
	const n = 5
	errs := make(chan error, n+1)
	var wg sync.WaitGroup
	read := func() {
		defer wg.Done()
		got, o, err := g.read(t, 5, "big")
		switch {
		case err != nil:
			errs <- err
		case o != ErasureHit || !bytes.Equal(got, want):
			errs <- errWrong(o)
		}
	}
	wg.Add(1)
	go read() // its own HEAD, held on the wire
	<-hold.Reached()
	wg.Add(n)
	for range n {
		go read() // join the next one
	}
	deadline := time.Now().Add(10 * time.Second)
	for toFloat64(c.m.validationJoins)-joins < n {
		if time.Now().After(deadline) {
			t.Fatalf("%v of %d reads joined", toFloat64(c.m.validationJoins)-joins, n)
		}
		time.Sleep(time.Millisecond)
	}
	hold.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if heads, gets := storeCalls(g.st); heads != 2 || gets != 0 {
		t.Fatalf("%d reads: %d HEADs and %d GETs, want 2 and 0", n+1, heads, gets)
	}
}

type errWrong Outcome

func (e errWrong) Error() string { return "wrong bytes or outcome " + string(e) }
