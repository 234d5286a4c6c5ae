package cachelet

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
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

// moveKeys points every member's ring at owner and tells each of its
// change, as a ring change does.
func moveKeys(ms []*bkMember, owner *bkMember) {
	for _, m := range ms {
		m.c.OwnershipChanging()
		m.router.set(owner.router.self)
		m.c.OwnershipChanged()
	}
}

// A key moves to another owner while its old owner still has a logged
// write of it queued for a slow store, and the new owner writes it
// (v3; written here straight to the store, as its delivery). The old
// owner's late delivery is put only over the version its write
// replaced: v3 stays, the older write is counted and never served. Also
// when the key came back before the old write was delivered. Where the
// key did not move, the owner's delivery is unconditional, as before.
func TestDurableMovedWriteYieldsToLaterWrite(t *testing.T) {
	for _, tc := range []struct {
		name           string
		backup         *BackupConfig
		moved, andBack bool
	}{
		{"moved", nil, true, false},
		{"moved, replicated", &BackupConfig{}, true, false},
		{"moved and back", nil, true, true},
		{"stayed", nil, false, false},
		{"stayed, replicated", &BackupConfig{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem, ms := newDurableGroup(t, 3, tc.backup)
			x, n := ms[0], ms[2] // the old owner, the new one
			v1, v2, v3 := object("k", 1, 2000), object("k", 2, 2000), object("k", 3, 2000)
			if err := putThrough(t, x.c, "k", v1); err != nil {
				t.Fatal(err)
			}
			if err := x.c.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			x.st.down.Store(true) // v2 stays queued at x
			if err := putThrough(t, x.c, "k", v2); err != nil {
				t.Fatal(err)
			}
			if tc.moved {
				moveKeys(ms, n)
			}
			if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v3), int64(len(v3)), store.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if tc.andBack {
				moveKeys(ms, x)
			}
			x.st.down.Store(false)
			if err := x.c.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			want := v2
			if tc.moved {
				want = v3
			}
			if got := storeBytes(t, mem, "k"); !bytes.Equal(got, want) {
				t.Fatalf("the store has %q for k, want %q", got[:min(len(got), 8)], want[:8])
			}
			yielded := toFloat64(x.c.m.movedSuperseded)
			if said := strings.Contains(x.said(), "a write of a key that moved to another owner was not delivered"); said != tc.moved || (yielded == 1) != tc.moved {
				t.Errorf("said it yielded: %v, counted %v; want %v", said, yielded, tc.moved)
			}
			for _, m := range ms {
				if err := m.c.waitHandoff(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if got, _, err := readWith(t.Context(), x.c, "k", nil); err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the old owner reads %q, %v; want %q", got[:min(len(got), 8)], err, want[:8])
			}
		})
	}
}

// A key moves away from its owner and back, written by the other owner
// meanwhile: the version the first owner's last delivery left is stale,
// so a later write there takes its base from the store, and its delivery
// after the key moves away again (guarded: TestDurableMovedWriteYields-
// ToLaterWrite) goes through: an acknowledged write is not dropped for a
// base that went stale.
func TestDurableMovedBackBaseIsFresh(t *testing.T) {
	mem, ms := newDurableGroup(t, 3, nil)
	x, n := ms[0], ms[2]
	v1, v2, v3 := object("k", 1, 2000), object("k", 2, 2000), object("k", 3, 2000)
	k := cache.Key{Bucket: testBucket, Object: "k"}
	if err := putThrough(t, x.c, "k", v1); err != nil {
		t.Fatal(err)
	}
	if err := x.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, complete := x.c.known.lookup(k); !complete {
		t.Fatal("the owner does not know the version its delivery left")
	}
	moveKeys(ms, n)
	if _, complete := x.c.known.lookup(k); complete {
		t.Fatal("the old owner still trusts the version its last delivery left, after the key moved away")
	}
	// The new owner writes the key (straight to the store: its delivery).
	if _, err := mem.Put(t.Context(), testBucket, "k", bytes.NewReader(v2), int64(len(v2)), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	moveKeys(ms, x)
	for _, m := range ms {
		if err := m.c.waitHandoff(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	x.st.down.Store(true) // v3 stays queued at x
	if err := putThrough(t, x.c, "k", v3); err != nil {
		t.Fatal(err)
	}
	moveKeys(ms, n)
	x.st.down.Store(false)
	if err := x.c.Drain(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := storeBytes(t, mem, "k"); !bytes.Equal(got, v3) {
		t.Fatalf("the store has %q for k, want the acknowledged v3", got[:min(len(got), 8)])
	}
	if got := toFloat64(x.c.m.movedSuperseded); got != 0 {
		t.Errorf("moved writes superseded: %v, want 0", got)
	}
}
