package cachelet

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// The owner is lost and its key goes to a member that is not its backup
// (an application with two members per node: the owner's ring successor
// on its node, the backup on another). The backup delivers the copy
// guarded, without a cached copy of its own; the new owner, which read
// the store's older version once its handoff's bound ran out before the
// delivery landed, is told to drop it: its reads then return the
// delivered write, not the older version for good.
func TestReplicatedBackupIsNotTheNewOwner(t *testing.T) {
	mem, ms := newBackupGroup(t, 3, BackupConfig{})
	a, b, n := ms[0], ms[1], ms[2] // owner, backup (first in address order), new owner
	v1, v2 := object("k", 1, 2000), object("k", 2, 2000)
	if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v1), int64(len(v1)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	a.st.down.Store(true) // the write stays queued at the owner
	if err := putThrough(t, a.c, "k", v2); err != nil {
		t.Fatal(err)
	}
	if got := toFloat64(b.c.bk.m.received.WithLabelValues("kept")); got != 1 {
		t.Fatalf("backup kept %v, want 1", got)
	}
	// The owner is lost; n owns its keys now. The backup's store is
	// down, so its delivery waits.
	a.srv.Close()
	b.st.down.Store(true)
	b.router.gone("m0")
	b.router.set(n.router.self)
	b.c.OwnershipChanging()
	b.c.OwnershipChanged()
	if got := toFloat64(b.c.bk.m.takenOver); got != 1 {
		t.Fatalf("taken over %v, want 1", got)
	}
	// The new owner serves past its handoff's bound: it reads the
	// store's older version (the window ADR 0030 states).
	n.router.gone("m0")
	n.router.set(n.router.self)
	got, _, err := readWith(t.Context(), n.c, "k", nil)
	if err != nil || !bytes.Equal(got, v1) {
		t.Fatalf("new owner read %d bytes, %v; want the store's v1", len(got), err)
	}
	// The backup's delivery lands: the store has the write, and the new
	// owner no longer serves the older version.
	b.st.down.Store(false)
	if err := b.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v2) {
		t.Fatalf("store has %d bytes, want v2", len(got))
	}
	// The members are told right after the delivery, not before Drain
	// returns: the new owner serves v2 within the backup's timeout.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got, _, err = readWith(t.Context(), n.c, "k", nil)
		if err == nil && bytes.Equal(got, v2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("new owner read %q (%d bytes), %v 5 s after the backup delivered; want v2", got[:min(len(got), 8)], len(got), err)
		}
	}
}

// Under durable writes a write handed to a key's new owner during its
// handoff waits for the handoff (which waits for the old owner's
// delivery) and is taken by the new owner, instead of being refused and
// written to the store by the writer while the old owner still has an
// older write of the key queued.
func TestDurableWriteDuringHandoffWaits(t *testing.T) {
	mem, ms := newDurableGroup(t, 3, nil)
	x, w, n := ms[0], ms[1], ms[2] // the old owner, a writer, the new owner
	v1, v2, v3 := object("k", 1, 2000), object("k", 2, 2000), object("k", 3, 2000)
	if err := putThrough(t, x.c, "k", v1); err != nil {
		t.Fatal(err)
	}
	if err := x.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	x.st.down.Store(true) // v2 stays queued at x: n's handoff waits for it
	if err := putThrough(t, x.c, "k", v2); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*bkMember{x, n} {
		m.c.OwnershipChanging()
		m.router.set(n.router.self)
		m.c.OwnershipChanged()
	}
	// The writer's own handoff is over already (it would hold its
	// client's write back otherwise; it ends at its 10 s bound, or when
	// its flushes end before the new owner's do).
	w.router.set(n.router.self)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
		defer cancel()
		_, err := w.c.Put(ctx, testBucket, "k", bytes.NewReader(v3), int64(len(v3)), store.PutOptions{})
		done <- err
	}()
	// Refused, the writer would have written v3 to the store by now.
	time.Sleep(300 * time.Millisecond)
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v1) {
		t.Fatalf("the store has %q during the handoff; want v1 (v3 waits, v2 is queued)", got[:min(len(got), 8)])
	}
	x.st.down.Store(false)
	if err := <-done; err != nil {
		t.Fatalf("write during the handoff: %v", err)
	}
	for _, m := range ms {
		if err := m.c.Drain(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v3) {
		t.Fatalf("the store has %q, want v3", got[:min(len(got), 8)])
	}
	if got := toFloat64(w.c.m.peerFallbacks); got != 0 {
		t.Errorf("the writer fell back to the store %v times; want 0 (the new owner took the write)", got)
	}
}
