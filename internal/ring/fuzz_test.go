package ring

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// FuzzRing builds rings from arbitrary member lists (one ID per line) and
// looks up arbitrary objects: nothing panics, every owner is a member,
// Owners agrees with Owner, and With and Without undo each other exactly.
// weak selects a hash with 64 positions, so collisions are the rule.
func FuzzRing(f *testing.F) {
	f.Add("a\nb\nc", "photos", "cat.jpg", uint8(3), false)
	f.Add("cachelet-1@127.0.0.1:9200\ncachelet-2@127.0.0.1:9201", "b", "k/with/slashes", uint8(100), false)
	f.Add("x", "", "", uint8(0), true)
	f.Add("a\na", "b", "k", uint8(1), false)
	f.Add("a\n\nb", "b", "k", uint8(1), true)
	f.Add("", "b", "k", uint8(5), false)
	f.Add("z\ny\nx\nw\nv", "bucket", "\x00\xff", uint8(7), true)
	f.Fuzz(func(t *testing.T, list, bucket, key string, vnodes uint8, weak bool) {
		var ids []string
		if list != "" {
			ids = strings.Split(list, "\n")
		}
		if len(ids) > 32 {
			ids = ids[:32]
		}
		cfg := Config{VirtualNodes: 1 + int(vnodes)%64}
		if weak {
			cfg.Hash = func(b []byte) uint64 { return SHA256(b) % 64 }
		}
		r, err := New(cfg, ids)
		sorted := slices.Clone(ids)
		slices.Sort(sorted)
		switch {
		case slices.Contains(ids, ""):
			if !errors.Is(err, ErrEmptyID) {
				t.Fatalf("New(%q) = %v, want ErrEmptyID", ids, err)
			}
			return
		case len(slices.Compact(sorted)) != len(ids):
			if !errors.Is(err, ErrDuplicateMember) {
				t.Fatalf("New(%q) = %v, want ErrDuplicateMember", ids, err)
			}
			return
		case err != nil:
			t.Fatalf("New(%q): %v", ids, err)
		}

		owner := r.Owner(bucket, key)
		if (owner == "") != (r.Len() == 0) || owner != "" && !r.Contains(owner) {
			t.Fatalf("Owner = %q of members %q", owner, r.Members())
		}
		all := r.Owners(bucket, key, r.Len()+1)
		if len(all) != r.Len() {
			t.Fatalf("Owners(all) = %q of members %q", all, r.Members())
		}
		if len(all) > 0 && all[0] != owner {
			t.Fatalf("Owners[0] = %q, Owner = %q", all[0], owner)
		}
		if got := slices.Sorted(slices.Values(all)); !slices.Equal(got, r.Members()) {
			t.Fatalf("Owners(all) = %q: not the members %q once each", all, r.Members())
		}

		for _, id := range r.Members() {
			less, err := r.Without(id)
			if err != nil {
				t.Fatal(err)
			}
			if Moved(r, less, bucket, key) != (owner == id) {
				t.Fatalf("removing %q moved the object from %q to %q", id, owner, less.Owner(bucket, key))
			}
			back, err := less.With(id)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameRing(back, r); d != "" {
				t.Fatalf("Without(%q).With(%q): %s", id, id, d)
			}
		}
		newcomer := bucket + "/" + key
		if r.Contains(newcomer) {
			return
		}
		more, err := r.With(newcomer)
		if err != nil {
			t.Fatal(err)
		}
		if got := more.Owner(bucket, key); got != owner && got != newcomer {
			t.Fatalf("adding %q moved the object from %q to %q", newcomer, owner, got)
		}
		if d := sameRing(more, mustNew(t, cfg, slices.Concat(ids, []string{newcomer})...)); d != "" {
			t.Fatalf("With(%q) differs from New: %s", newcomer, d)
		}
		back, err := more.Without(newcomer)
		if err != nil {
			t.Fatal(err)
		}
		if d := sameRing(back, r); d != "" {
			t.Fatalf("With(%q).Without(%q): %s", newcomer, newcomer, d)
		}
	})
}
