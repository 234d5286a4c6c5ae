package cachelet

import (
	"bytes"
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
