package ring

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"testing"
)

// constHash puts every point and every object at the same position, so
// every owner is decided by tie-breaking alone.
func constHash([]byte) uint64 { return 42 }

func mustNew(t testing.TB, cfg Config, members ...string) *Ring {
	t.Helper()
	r, err := New(cfg, members)
	if err != nil {
		t.Fatalf("New(%q): %v", members, err)
	}
	return r
}

// sameRing reports how a and b differ in structure, "" if they do not.
func sameRing(a, b *Ring) string {
	switch {
	case a.vnodes != b.vnodes:
		return fmt.Sprintf("vnodes %d != %d", a.vnodes, b.vnodes)
	case !slices.Equal(a.members, b.members):
		return fmt.Sprintf("members %q != %q", a.members, b.members)
	case !slices.Equal(a.points, b.points):
		return "points differ"
	case !slices.Equal(a.owners, b.owners):
		return "point owners differ"
	}
	return ""
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		in      Config
		wantV   int
		wantErr bool
	}{
		{"zero is the default", Config{}, DefaultVirtualNodes, false},
		{"one", Config{VirtualNodes: 1}, 1, false},
		{"max", Config{VirtualNodes: MaxVirtualNodes}, MaxVirtualNodes, false},
		{"negative", Config{VirtualNodes: -1}, 0, true},
		{"too many", Config{VirtualNodes: MaxVirtualNodes + 1}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			err := c.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, want error %v", err, tt.wantErr)
			}
			if err == nil && c.VirtualNodes != tt.wantV {
				t.Errorf("VirtualNodes = %d, want %d", c.VirtualNodes, tt.wantV)
			}
			if c.Hash != nil {
				t.Errorf("Validate set Hash; nil must stay nil (the allocation-free default)")
			}
		})
	}
}

func TestSHA256(t *testing.T) {
	// First 8 bytes of SHA-256("") = e3b0c442 98fc1c14, big-endian.
	if got, want := SHA256(nil), uint64(0xe3b0c44298fc1c14); got != want {
		t.Errorf("SHA256(\"\") = %#x, want %#x", got, want)
	}
	// The key's name is bucket + "/" + key, hashed with the default.
	r := mustNew(t, Config{}, "a")
	if got, want := r.keyHash("b", "k"), SHA256([]byte("b/k")); got != want {
		t.Errorf("keyHash(b, k) = %#x, want SHA256(\"b/k\") = %#x", got, want)
	}
	if !slices.Contains(r.points, SHA256([]byte("a#0"))) {
		t.Errorf("points of a do not include SHA256(\"a#0\")")
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		members []string
		want    error // nil: any error
	}{
		{"empty id", Config{}, []string{"a", ""}, ErrEmptyID},
		{"duplicate", Config{}, []string{"a", "b", "a"}, ErrDuplicateMember},
		{"bad config", Config{VirtualNodes: -3}, []string{"a"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg, tt.members)
			if err == nil {
				t.Fatalf("New(%q) = %v, want error", tt.members, r)
			}
			if tt.want != nil && !errors.Is(err, tt.want) {
				t.Errorf("New(%q) = %v, want %v", tt.members, err, tt.want)
			}
		})
	}
}

func TestNewDoesNotKeepCallersSlice(t *testing.T) {
	in := []string{"b", "a"}
	r := mustNew(t, Config{}, in...)
	in[0] = "zzz"
	if got := r.Members(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("Members() = %q after caller changed its slice", got)
	}
	r.Members()[0] = "zzz"
	if !r.Contains("a") || r.Contains("zzz") {
		t.Errorf("changing Members()'s result changed the ring")
	}
}

func TestEmptyRing(t *testing.T) {
	r := mustNew(t, Config{})
	if got := r.Owner("b", "k"); got != "" {
		t.Errorf("Owner = %q, want \"\"", got)
	}
	if got := r.Owners("b", "k", 3); got != nil {
		t.Errorf("Owners = %q, want nil", got)
	}
	if r.Len() != 0 || len(r.Members()) != 0 || r.Contains("") {
		t.Errorf("empty ring: Len %d, Members %q", r.Len(), r.Members())
	}
	one, err := r.With("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := one.Owner("b", "k"); got != "a" {
		t.Errorf("one-member Owner = %q, want a", got)
	}
	back, err := one.Without("a")
	if err != nil {
		t.Fatal(err)
	}
	if d := sameRing(back, r); d != "" {
		t.Errorf("With(a).Without(a) differs from the empty ring: %s", d)
	}
}

func TestOwnersCounts(t *testing.T) {
	r := mustNew(t, Config{}, "a", "b", "c")
	tests := []struct{ n, want int }{{-1, 0}, {0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 3}, {100, 3}}
	for _, tt := range tests {
		got := r.Owners("photos", "cat.jpg", tt.n)
		if len(got) != tt.want {
			t.Errorf("Owners(n=%d) = %q, want %d members", tt.n, got, tt.want)
		}
	}
}

// With a hash that collides everywhere, the owner is the smallest ID and
// Owners lists members in ID order, however the ring was built.
func TestCollisionsBreakTiesByID(t *testing.T) {
	cfg := Config{VirtualNodes: 3, Hash: constHash}
	r := mustNew(t, cfg, "c", "a", "b")
	if got := r.Owner("x", "y"); got != "a" {
		t.Errorf("Owner = %q, want a", got)
	}
	if got := r.Owners("x", "y", 3); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Errorf("Owners = %q, want [a b c]", got)
	}
	r2, err := r.Without("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := r2.Owner("x", "y"); got != "b" {
		t.Errorf("after removing a: Owner = %q, want b", got)
	}
	r3, err := r2.With("0")
	if err != nil {
		t.Fatal(err)
	}
	if got := r3.Owner("x", "y"); got != "0" {
		t.Errorf("after adding 0: Owner = %q, want 0", got)
	}
	if d := sameRing(r3, mustNew(t, cfg, "b", "c", "0")); d != "" {
		t.Errorf("Without/With differs from New: %s", d)
	}
}

func TestWithWithoutErrors(t *testing.T) {
	r := mustNew(t, Config{}, "a", "b")
	if _, err := r.With("a"); !errors.Is(err, ErrDuplicateMember) {
		t.Errorf("With(a) = %v, want ErrDuplicateMember", err)
	}
	if _, err := r.With(""); !errors.Is(err, ErrEmptyID) {
		t.Errorf("With(\"\") = %v, want ErrEmptyID", err)
	}
	if _, err := r.Without("c"); !errors.Is(err, ErrNotMember) {
		t.Errorf("Without(c) = %v, want ErrNotMember", err)
	}
	if _, err := r.Without(""); !errors.Is(err, ErrNotMember) {
		t.Errorf("Without(\"\") = %v, want ErrNotMember", err)
	}
}

// With and Without build exactly the ring New builds from the same members,
// and leave the ring they were called on unchanged.
func TestWithWithoutMatchNew(t *testing.T) {
	for _, cfg := range []Config{{}, {VirtualNodes: 7}, {VirtualNodes: 4, Hash: func(b []byte) uint64 { return SHA256(b) % 16 }}} {
		members := []string{"m1", "m2", "m3", "m4", "m5"}
		r := mustNew(t, cfg)
		for i, id := range members {
			before := mustNew(t, cfg, members[:i]...)
			next, err := r.With(id)
			if err != nil {
				t.Fatal(err)
			}
			if d := sameRing(r, before); d != "" {
				t.Fatalf("With changed its receiver: %s", d)
			}
			if d := sameRing(next, mustNew(t, cfg, members[:i+1]...)); d != "" {
				t.Fatalf("With(%s) differs from New: %s", id, d)
			}
			r = next
		}
		for _, id := range []string{"m3", "m1", "m5", "m2", "m4"} {
			next, err := r.Without(id)
			if err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(r.Members(), func(m string) bool { return m == id })
			if d := sameRing(next, mustNew(t, cfg, want...)); d != "" {
				t.Fatalf("Without(%s) differs from New: %s", id, d)
			}
			r = next
		}
	}
}

func TestMoved(t *testing.T) {
	empty := mustNew(t, Config{})
	ab := mustNew(t, Config{}, "a", "b")
	if !Moved(empty, ab, "b", "k") || !Moved(ab, empty, "b", "k") {
		t.Errorf("every object moves between an empty ring and a non-empty one")
	}
	if Moved(ab, mustNew(t, Config{}, "b", "a"), "b", "k") {
		t.Errorf("an object moved between two rings of the same members")
	}
}

func TestOwnerDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	r := mustNew(t, Config{}, "a", "b", "c", "d", "e")
	if n := testing.AllocsPerRun(100, func() { r.Owner("photos", "2024/cat.jpg") }); n != 0 {
		t.Errorf("Owner allocates %v times per call, want 0", n)
	}
}

// TestShares: the shares add up to one, follow the owners of sampled
// keys, and are 1 for a lone member.
func TestShares(t *testing.T) {
	if s := mustNew(t, Config{}).Shares(); s != nil {
		t.Fatalf("empty ring: shares %v", s)
	}
	if s := mustNew(t, Config{}, "solo").Shares(); len(s) != 1 || math.Abs(s[0]-1) > 1e-9 {
		t.Fatalf("one member: shares %v", s)
	}
	r := mustNew(t, Config{}, "a", "b", "c", "d")
	shares := r.Shares()
	sum := 0.0
	for _, s := range shares {
		sum += s
	}
	if math.Abs(sum-1) > 1e-9 {
		t.Fatalf("shares %v add up to %v", shares, sum)
	}
	const n = 200_000
	owned := map[string]int{}
	for i := range n {
		owned[r.Owner("b", strconv.Itoa(i))]++
	}
	for i, m := range r.Members() {
		if got := float64(owned[m]) / n; math.Abs(got-shares[i]) > 0.01 {
			t.Errorf("%s owns %.4f of sampled keys; its share is %.4f", m, got, shares[i])
		}
	}
}
