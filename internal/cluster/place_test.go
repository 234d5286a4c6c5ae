package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
)

// Shards go to distinct nodes first, as the members name theirs.
func TestPlaceOnDistinctNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		var ms []*Member
		for i := range 6 {
			id := fmt.Sprintf("m%d", i)
			m, err := Join(t.Context(), Config{App: "app", ID: id, PeerAddr: id + ":7000", Registry: f.reg, Node: fmt.Sprintf("node%d", i%3)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			ms = append(ms, m)
		}
		synctest.Wait()
		nodeOf := map[string]string{}
		for _, mem := range ms[0].Members() {
			nodeOf[mem.PeerAddr] = mem.Meta[MetaNode]
		}
		for k := range 20 {
			key := fmt.Sprintf("key-%d", k)
			got := ms[0].Place("b", key, 3)
			seen := map[string]bool{}
			for _, addr := range got {
				if seen[nodeOf[addr]] {
					t.Fatalf("%s: shards %v put two on %s", key, got, nodeOf[addr])
				}
				seen[nodeOf[addr]] = true
			}
			if fmt.Sprint(ms[5].Place("b", key, 3)) != fmt.Sprint(got) {
				t.Fatalf("%s: members disagree on the placement", key)
			}
		}
		if ms[0].Place("b", "k", 7) != nil {
			t.Fatal("7 shards placed on 6 members")
		}
	})
}

// A member's backup holder is another member, every member names the
// same one, and it stays the same once the member has left.
func TestBackupHolderSurvivesItsOrigin(t *testing.T) {
	for leave := range 6 {
		synctest.Test(t, func(t *testing.T) {
			f := newFixture(t)
			var ms []*Member
			for i := range 6 {
				id := fmt.Sprintf("m%d", i)
				m, err := Join(t.Context(), Config{App: "app", ID: id, PeerAddr: id + ":7000", Registry: f.reg})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = m.Close(context.Background()) })
				ms = append(ms, m)
			}
			synctest.Wait()
			before := map[string]string{}
			for _, m := range ms {
				h := ms[0].BackupHolder(m.PeerAddr())
				if h == "" || h == m.PeerAddr() || ms[4].BackupHolder(m.PeerAddr()) != h {
					t.Fatalf("backup holder of %s: %q (another member says %q)", m.PeerAddr(), h, ms[4].BackupHolder(m.PeerAddr()))
				}
				before[m.PeerAddr()] = h
			}
			gone := ms[leave].PeerAddr()
			if err := ms[leave].Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			watcher := ms[(leave+1)%6]
			if got := watcher.BackupHolder(gone); got != before[gone] || len(watcher.Members()) != 5 {
				t.Fatalf("after %s left: its backup holder %q, was %q (%d members)", gone, got, before[gone], len(watcher.Members()))
			}
		})
	}
}

// A durable write's backups are the other members in the key's ring
// order, those on another node first; the first of them owns the key
// once its owner has left, when all are on one node.
func TestDurableBackups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		var ms []*Member
		for i := range 4 {
			id := fmt.Sprintf("m%d", i)
			m, err := Join(t.Context(), Config{App: "app", ID: id, PeerAddr: id + ":7000", Registry: f.reg, Node: fmt.Sprintf("node%d", i%2)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			ms = append(ms, m)
		}
		synctest.Wait()
		nodeOf := map[string]string{}
		for _, mem := range ms[0].Members() {
			nodeOf[mem.PeerAddr] = mem.Meta[MetaNode]
		}
		for k := range 20 {
			key := fmt.Sprintf("key-%d", k)
			owner, _ := ms[0].Owner("b", key)
			var om *Member
			for _, m := range ms {
				if m.PeerAddr() == owner {
					om = m
				}
			}
			addrs, other := om.DurableBackups("b", key)
			if len(addrs) != 3 || other != 2 {
				t.Fatalf("%s: backups %v, %d on other nodes", key, addrs, other)
			}
			// Every member sees the owner's choice.
			for _, m := range ms {
				if got := m.BackupsOf(owner, "b", key); !slices.Equal(got, addrs) {
					t.Fatalf("%s: %s sees backups %v of owner %s, want %v", key, m.ID(), got, owner, addrs)
				}
			}
			for i, a := range addrs {
				if a == owner || (i < other) == (nodeOf[a] == nodeOf[owner]) {
					t.Fatalf("%s: backups %v of owner %s (%s): %s out of place", key, addrs, owner, nodeOf[owner], a)
				}
			}
		}
		if !ms[0].Present("m3") || ms[0].Present("m9") || ms[0].BackupsOf("m9:7000", "b", "k") != nil {
			t.Fatal("Present is wrong")
		}
	})
	// On one node the first backup is the key's next owner.
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		var ms []*Member
		for i := range 3 {
			id := fmt.Sprintf("m%d", i)
			m, err := Join(t.Context(), Config{App: "app", ID: id, PeerAddr: id + ":7000", Registry: f.reg})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Close(context.Background()) })
			ms = append(ms, m)
		}
		synctest.Wait()
		want := map[string]string{}
		for k := range 20 {
			key := fmt.Sprintf("key-%d", k)
			if owner, _ := ms[0].Owner("b", key); owner == ms[2].PeerAddr() {
				addrs, other := ms[2].DurableBackups("b", key)
				if len(addrs) != 2 || other != 0 {
					t.Fatalf("%s: backups %v, %d on other nodes", key, addrs, other)
				}
				want[key] = addrs[0]
			}
		}
		if len(want) == 0 {
			t.Fatal("m2 owns none of the keys")
		}
		if err := ms[2].Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for key, b := range want {
			if owner, _ := ms[0].Owner("b", key); owner != b {
				t.Fatalf("%s: owned by %s once its owner left, its backup was %s", key, owner, b)
			}
		}
		if a, _ := ms[2].DurableBackups("b", "x"); a != nil {
			t.Fatalf("a member that left names backups %v", a)
		}
	})
}
