// Package ring decides which cachelet of an application owns each object: a
// consistent-hash ring over the application's cachelets [Faa$T §3.2].
//
// Every member is placed on a 64-bit circle at VirtualNodes points (default
// 100, the figure Faa$T settled on [§5]: more points did not balance load
// better and slowed lookups, fewer created hot spots). An object, named as
// in the store by bucket + "/" + key, belongs to the member owning the first
// point at or after the object's hash, wrapping around. When a member joins,
// only the keys that now fall on its points move, all of them to it (about
// 1/(N+1) of the keys); when a member leaves, only its keys move.
//
// Agreement. A Ring is a pure function of its Config and its member set:
// neither the order in which members were given nor the way the ring was
// reached (New, With, Without) changes any answer. Points that collide on the
// circle are ordered by member ID, so every cachelet that computes the ring
// from the same member set with the same Config agrees on every owner, with
// no coordination beyond agreeing on the member set. The placement of points
// (see Config.Hash) is part of hoard's wire contract: changing it would make
// cachelets of different versions disagree on owners.
//
// The package does no I/O and starts no goroutines. A Ring is immutable, so
// any number of goroutines may use one concurrently; a membership change
// builds a new Ring (With, Without) that callers swap in, for example through
// an atomic.Pointer. Moved tells which objects a change gave to another
// member.
package ring

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// DefaultVirtualNodes is the number of points each member gets on the circle
// when Config.VirtualNodes is zero [Faa$T §5: 100 cachelet replicas].
const DefaultVirtualNodes = 100

// MaxVirtualNodes bounds Config.VirtualNodes, so that a mistyped setting
// cannot make every membership change allocate gigabytes.
const MaxVirtualNodes = 10000

// Errors returned by New, With and Without, wrapped with the member ID.
var (
	// ErrEmptyID: a member ID is the empty string, which Owner reserves for
	// "no owner".
	ErrEmptyID = errors.New("empty member id")
	// ErrDuplicateMember: the member is already in the ring (or given twice).
	ErrDuplicateMember = errors.New("duplicate member")
	// ErrNotMember: the member is not in the ring.
	ErrNotMember = errors.New("not a member")
)

// Config shapes a ring. Every member of an application must use the same
// Config, or they will disagree on owners.
type Config struct {
	// VirtualNodes is the number of points each member gets on the circle.
	// More points balance load better (a member's share deviates from the
	// mean by about 1/sqrt(VirtualNodes)) but make rings larger and slower to
	// build. Default (0): DefaultVirtualNodes. At most MaxVirtualNodes.
	VirtualNodes int
	// Hash maps bytes to a point on the circle. It is given each member's
	// point names, member ID + "#" + the point's index in decimal ("a#0",
	// "a#1", ...), and each object's name, bucket + "/" + key. It must be
	// deterministic and the same on every member, must not retain or modify
	// its argument, and may be called concurrently. Default (nil): SHA256,
	// which Owner calls without allocating.
	Hash func([]byte) uint64
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	if c.VirtualNodes == 0 {
		c.VirtualNodes = DefaultVirtualNodes
	}
	if c.VirtualNodes < 0 || c.VirtualNodes > MaxVirtualNodes {
		return fmt.Errorf("ring: virtual nodes %d must be in [1, %d]", c.VirtualNodes, MaxVirtualNodes)
	}
	return nil
}

// SHA256 is the default Config.Hash: the first 8 bytes of the SHA-256 digest
// of b, read as a big-endian integer.
func SHA256(b []byte) uint64 {
	sum := sha256.Sum256(b)
	return binary.BigEndian.Uint64(sum[:8])
}

// Ring is an immutable consistent-hash ring over a set of members. The zero
// value is not usable; build rings with New, With and Without.
type Ring struct {
	vnodes int
	hash   func([]byte) uint64 // nil: SHA256

	members []string // sorted, distinct
	// points are the circle positions, sorted by (position, member ID);
	// owners[i] indexes members for points[i]. Because members is sorted,
	// ordering by index is ordering by ID.
	points []uint64
	owners []int32
}

// New builds the ring of the given members. Their order does not matter;
// members may be empty (a ring that owns nothing). It returns an error
// wrapping ErrEmptyID or ErrDuplicateMember for a bad member list, or an
// invalid-config error.
func New(cfg Config, members []string) (*Ring, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sorted := slices.Clone(members)
	slices.Sort(sorted)
	for i, id := range sorted {
		if id == "" {
			return nil, fmt.Errorf("ring: member %q: %w", id, ErrEmptyID)
		}
		if i > 0 && sorted[i-1] == id {
			return nil, fmt.Errorf("ring: member %q: %w", id, ErrDuplicateMember)
		}
	}
	r := &Ring{
		vnodes:  cfg.VirtualNodes,
		hash:    cfg.Hash,
		members: sorted,
		points:  make([]uint64, 0, len(sorted)*cfg.VirtualNodes),
		owners:  make([]int32, 0, len(sorted)*cfg.VirtualNodes),
	}
	var buf []byte
	for i, id := range sorted {
		for v := range r.vnodes {
			buf = pointName(buf[:0], id, v)
			r.points = append(r.points, r.hashBytes(buf))
			r.owners = append(r.owners, int32(i))
		}
	}
	r.sortPoints()
	return r, nil
}

// pointName appends the name of member id's v-th point to b. The decimal
// index follows the last '#', so distinct (id, v) pairs give distinct names.
func pointName(b []byte, id string, v int) []byte {
	b = append(b, id...)
	b = append(b, '#')
	return strconv.AppendInt(b, int64(v), 10)
}

func (r *Ring) hashBytes(b []byte) uint64 {
	if r.hash == nil {
		return SHA256(b)
	}
	return r.hash(b)
}

// keyHash is the position of object bucket/key on the circle. The default
// hash gets a stack buffer (keys up to 256 bytes in all do not allocate); a
// custom Hash, an unknown function, gets a heap copy.
func (r *Ring) keyHash(bucket, key string) uint64 {
	if r.hash == nil {
		var buf [256]byte
		return SHA256(objectName(buf[:0], bucket, key))
	}
	return r.hash(objectName(make([]byte, 0, len(bucket)+1+len(key)), bucket, key))
}

// objectName appends the store's name of an object, bucket + "/" + key, to
// b. Bucket names cannot contain '/', so the name is unambiguous.
func objectName(b []byte, bucket, key string) []byte {
	b = append(b, bucket...)
	b = append(b, '/')
	return append(b, key...)
}

// sortPoints sorts points and owners together by (position, member ID).
func (r *Ring) sortPoints() {
	type point struct {
		pos   uint64
		owner int32
	}
	ps := make([]point, len(r.points))
	for i := range ps {
		ps[i] = point{r.points[i], r.owners[i]}
	}
	slices.SortFunc(ps, func(a, b point) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), cmp.Compare(a.owner, b.owner))
	})
	for i, p := range ps {
		r.points[i], r.owners[i] = p.pos, p.owner
	}
}

// search returns the index of the first point at or after h, wrapping
// around. Among points at the same position it finds the one of the smallest
// member ID. The ring must not be empty.
func (r *Ring) search(h uint64) int {
	i, _ := slices.BinarySearch(r.points, h)
	if i == len(r.points) {
		i = 0
	}
	return i
}

// Owner returns the ID of the member that owns object bucket/key, or "" if
// the ring has no members. With the default Hash it does not allocate.
func (r *Ring) Owner(bucket, key string) string {
	if len(r.points) == 0 {
		return ""
	}
	return r.members[r.owners[r.search(r.keyHash(bucket, key))]]
}

// Owners returns up to n distinct members for object bucket/key in ring
// order: the owner first, then the next distinct members clockwise. These
// are the replica sites of the object, and the order in which members take
// over: if Owners(b, k, n)[0] leaves, the next ring's Owners(b, k, n-1) is
// this one's [1:]. It returns min(n, Len()) members, nil if n <= 0 or the
// ring is empty. The slice is the caller's.
func (r *Ring) Owners(bucket, key string, n int) []string {
	n = min(n, len(r.members))
	if n <= 0 {
		return nil
	}
	out := make([]string, 0, n)
	// Small n (the usual replica counts) checks out by scanning it; larger n
	// marks members seen, which keeps the walk linear.
	var seen []bool
	if n > 8 {
		seen = make([]bool, len(r.members))
	}
	start := r.search(r.keyHash(bucket, key))
	for j := 0; len(out) < n; j++ {
		idx := r.owners[(start+j)%len(r.points)]
		id := r.members[idx]
		if seen != nil {
			if seen[idx] {
				continue
			}
			seen[idx] = true
		} else if slices.Contains(out, id) {
			continue
		}
		out = append(out, id)
	}
	return out
}

// Members returns the member IDs in sorted order. The slice is the
// caller's.
func (r *Ring) Members() []string {
	return slices.Clone(r.members)
}

// Len returns the number of members.
func (r *Ring) Len() int {
	return len(r.members)
}

// Contains reports whether id is a member.
func (r *Ring) Contains(id string) bool {
	_, ok := slices.BinarySearch(r.members, id)
	return ok
}

// Shares returns each member's share of the circle, the fraction of
// objects it owns in expectation, in Members order; nil for an empty ring.
// Point i owns the arc from point i-1 (exclusive) to itself; the first
// point also owns the arc past the last one, around the circle.
func (r *Ring) Shares() []float64 {
	if len(r.points) == 0 {
		return nil
	}
	shares := make([]float64, len(r.members))
	const circle = 1 << 64 // as a float64
	prev := r.points[len(r.points)-1]
	for i, p := range r.points {
		shares[r.owners[i]] += float64(p-prev) / circle // wraps around for i == 0
		prev = p
	}
	if len(r.points) == 1 || r.points[0] == r.points[len(r.points)-1] {
		// Every point at one position: its first member owns the circle.
		clear(shares)
		shares[r.owners[0]] = 1
	}
	return shares
}
