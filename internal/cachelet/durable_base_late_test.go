package cachelet

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// writeWithHeadHanging has x take a write of k while the store's HEADs
// hang and its writes fail: the write is acknowledged, logged with its
// base unknown, and queued.
func writeWithHeadHanging(t *testing.T, x *bkMember, data []byte) {
	t.Helper()
	x.st.down.Store(true)
	x.st.headHangs.Store(true)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // past the probe's 2 s
	defer cancel()
	if _, err := x.c.Put(ctx, testBucket, "k", bytes.NewReader(data), int64(len(data)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := toFloat64(x.c.m.durableBase.WithLabelValues("unknown")); got != 1 {
		t.Fatalf("writes logged with an unknown base: %v, want 1", got)
	}
	if got := x.c.known.waiting.Load(); got != 1 {
		t.Fatalf("writes waiting on their base: %d, want 1", got)
	}
}

// A write logged while the store's HEAD hung (its base unknown) asks
// again once the HEAD answers, while its key is still owned here; when
// the key then moves before the write is delivered, its delivery is
// guarded by the base it learned: it yields to a newer version the new
// owner wrote, and lands over the version it was written over.
func TestDurableBaseLearnedLate(t *testing.T) {
	for _, newerInStore := range []bool{true, false} {
		t.Run(map[bool]string{true: "new owner wrote since", false: "nothing since"}[newerInStore], func(t *testing.T) {
			mem, ms := newDurableGroup(t, 3, nil)
			x, n := ms[0], ms[2]
			v1, v2, v3 := object("k", 1, 2000), object("k", 2, 2000), object("k", 3, 2000)
			if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			writeWithHeadHanging(t, x, v2)
			x.st.headHangs.Store(false) // the store's HEADs answer again
			for deadline := time.Now().Add(15 * time.Second); x.c.known.waiting.Load() != 0; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the write never learned its base once the store's HEADs answered")
				}
			}
			if got := toFloat64(x.c.m.durableBase.WithLabelValues("learned")); got != 1 {
				t.Errorf("bases learned: %v, want 1", got)
			}
			moveKeys(ms, n)
			want := v2
			if newerInStore {
				if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v3), int64(len(v3)), store.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				want = v3
			}
			x.st.down.Store(false)
			if err := x.c.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			if got := storeBytes(t, mem, "k"); !bytes.Equal(got, want) {
				t.Fatalf("the store has %q, want %q", got[:min(len(got), 8)], want[:8])
			}
			if got := toFloat64(x.c.m.movedSuperseded); (got == 1) != newerInStore {
				t.Errorf("moved writes that yielded: %v, want 1 only when the new owner wrote since", got)
			}
		})
	}
}

// A write logged while the store's HEAD hung, whose key moves before the
// store answers, cannot learn its base any more (a version read after the
// move may be the new owner's): it is never delivered unconditionally,
// so the new owner's later version stays in the store; its delivery is
// held back, counted, and the write stays queued (and in the log).
func TestDurableMovedWriteBaseUnknownNotDelivered(t *testing.T) {
	mem, ms := newDurableGroup(t, 3, nil)
	x, n := ms[0], ms[2]
	v1, v2, v3 := object("k", 1, 2000), object("k", 2, 2000), object("k", 3, 2000)
	if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	writeWithHeadHanging(t, x, v2)
	moveKeys(ms, n)
	if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v3), int64(len(v3)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	x.st.headHangs.Store(false)
	x.st.down.Store(false)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	if err := x.c.Drain(ctx); err == nil {
		t.Error("the queue drained: the moved write was settled")
	}
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v3) {
		t.Fatalf("the store has %q, want the new owner's v3 (the moved write delivered unconditionally)", got[:min(len(got), 8)])
	}
	if got := toFloat64(x.c.m.baseWaits); got < 1 {
		t.Errorf("deliveries held back for their base: %v, want at least 1", got)
	}
	if got := x.c.known.waiting.Load(); got != 1 {
		t.Errorf("writes waiting on their base: %d, want 1", got)
	}
	if !strings.Contains(x.said(), "it is not delivered unconditionally") {
		t.Error("no log line for the write that waits")
	}
}
