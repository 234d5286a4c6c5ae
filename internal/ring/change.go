package ring

import (
	"fmt"
	"slices"
)

// With returns a new ring with member id added; r is unchanged. The result
// is the ring New would build from r's members and id, built in time linear
// in the ring's size plus the hashing of id's points alone: tens of
// microseconds at 100 members, where New takes milliseconds. It returns an
// error wrapping ErrEmptyID, or ErrDuplicateMember if id is already a member.
func (r *Ring) With(id string) (*Ring, error) {
	if id == "" {
		return nil, fmt.Errorf("ring: member %q: %w", id, ErrEmptyID)
	}
	p, found := slices.BinarySearch(r.members, id)
	if found {
		return nil, fmt.Errorf("ring: member %q: %w", id, ErrDuplicateMember)
	}
	// The newcomer's points, sorted; its index p shifts the members after it.
	add := &Ring{vnodes: r.vnodes, hash: r.hash,
		points: make([]uint64, r.vnodes), owners: make([]int32, r.vnodes)}
	var buf []byte
	for v := range r.vnodes {
		buf = pointName(buf[:0], id, v)
		add.points[v] = r.hashBytes(buf)
		add.owners[v] = int32(p)
	}
	add.sortPoints()

	nr := &Ring{
		vnodes:  r.vnodes,
		hash:    r.hash,
		members: slices.Insert(slices.Clone(r.members), p, id),
		points:  make([]uint64, 0, len(r.points)+r.vnodes),
		owners:  make([]int32, 0, len(r.points)+r.vnodes),
	}
	// Merge the two sorted point lists by (position, member ID).
	i, j := 0, 0
	for i < len(r.points) || j < len(add.points) {
		var oldOwner int32
		if i < len(r.points) {
			oldOwner = r.owners[i]
			if oldOwner >= int32(p) {
				oldOwner++
			}
		}
		takeOld := j == len(add.points) ||
			i < len(r.points) && (r.points[i] < add.points[j] ||
				r.points[i] == add.points[j] && oldOwner < add.owners[j])
		if takeOld {
			nr.points = append(nr.points, r.points[i])
			nr.owners = append(nr.owners, oldOwner)
			i++
		} else {
			nr.points = append(nr.points, add.points[j])
			nr.owners = append(nr.owners, add.owners[j])
			j++
		}
	}
	return nr, nil
}

// Without returns a new ring with member id removed; r is unchanged. The
// result is the ring New would build from r's other members, built in time
// linear in the ring's size without hashing. It returns an error wrapping
// ErrNotMember if id is not a member.
func (r *Ring) Without(id string) (*Ring, error) {
	p, found := slices.BinarySearch(r.members, id)
	if !found {
		return nil, fmt.Errorf("ring: member %q: %w", id, ErrNotMember)
	}
	nr := &Ring{
		vnodes:  r.vnodes,
		hash:    r.hash,
		members: slices.Delete(slices.Clone(r.members), p, p+1),
		points:  make([]uint64, 0, len(r.points)-r.vnodes),
		owners:  make([]int32, 0, len(r.points)-r.vnodes),
	}
	for i, o := range r.owners {
		switch {
		case o == int32(p):
			continue
		case o > int32(p):
			o--
		}
		nr.points = append(nr.points, r.points[i])
		nr.owners = append(nr.owners, o)
	}
	return nr, nil
}

// Moved reports whether object bucket/key has a different owner in next than
// in prev: after a membership change, the objects a cachelet holds that it
// no longer owns (or newly owns). With one member added or removed, only
// that member's objects move. Either ring may be empty; an object of an
// empty ring has owner "".
func Moved(prev, next *Ring, bucket, key string) bool {
	return prev.Owner(bucket, key) != next.Owner(bucket, key)
}
