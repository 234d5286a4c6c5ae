// Package diskindex is the pure core of the disk tier: which files it
// holds, how many bytes they take, and which go first when the tier is
// over its byte budget or past its age limit. It does no I/O and starts no
// goroutines; the disk tier (internal/disktier) drives it from what it
// finds on disk and does the removals it answers.
package diskindex

import (
	"container/list"
	"time"
)

// Index is a least-recently-used index of named files under a byte
// budget. It is not safe for concurrent use: its owner holds a lock.
type Index struct {
	budget int64
	bytes  int64
	order  *list.List // of *item, most recently used at the front
	items  map[string]*list.Element
}

type item struct {
	name string
	size int64
	used time.Time
}

// New returns an empty index whose files may hold budget bytes.
func New(budget int64) *Index {
	return &Index{budget: budget, order: list.New(), items: map[string]*list.Element{}}
}

// Len is the number of files indexed.
func (x *Index) Len() int { return len(x.items) }

// Bytes is what the indexed files hold together.
func (x *Index) Bytes() int64 { return x.bytes }

// Budget is the index's byte budget.
func (x *Index) Budget() int64 { return x.budget }

// Has reports whether name is indexed.
func (x *Index) Has(name string) bool { _, ok := x.items[name]; return ok }

// Put records a file of size bytes last used at used, replacing what was
// recorded under name. Files are ordered by their last use, so a rescan
// that puts files in any order keeps their recency.
func (x *Index) Put(name string, size int64, used time.Time) {
	x.Remove(name)
	it := &item{name: name, size: size, used: used}
	x.bytes += size
	// Usually newest: walk from the front to its place.
	for el := x.order.Front(); el != nil; el = el.Next() {
		if !el.Value.(*item).used.After(used) {
			x.items[name] = x.order.InsertBefore(it, el)
			return
		}
	}
	x.items[name] = x.order.PushBack(it)
}

// Touch marks name used at now (it becomes the most recently used) and
// reports whether it is indexed.
func (x *Index) Touch(name string, now time.Time) bool {
	el, ok := x.items[name]
	if !ok {
		return false
	}
	it := el.Value.(*item)
	if now.After(it.used) {
		it.used = now
	}
	x.order.MoveToFront(el)
	return true
}

// Remove forgets name and reports whether it was indexed.
func (x *Index) Remove(name string) bool {
	el, ok := x.items[name]
	if !ok {
		return false
	}
	x.bytes -= el.Value.(*item).size
	x.order.Remove(el)
	delete(x.items, name)
	return true
}

// Over returns, least recently used first, the files to remove so that
// the rest fit the budget with room more bytes to spare, and forgets them.
func (x *Index) Over(room int64) []string {
	var out []string
	for x.bytes+room > x.budget {
		el := x.order.Back()
		if el == nil {
			break
		}
		name := el.Value.(*item).name
		x.Remove(name)
		out = append(out, name)
	}
	return out
}

// Older returns the files last used before cutoff, oldest first, and
// forgets them.
func (x *Index) Older(cutoff time.Time) []string {
	var out []string
	for el := x.order.Back(); el != nil; el = x.order.Back() {
		it := el.Value.(*item)
		if !it.used.Before(cutoff) {
			break
		}
		x.Remove(it.name)
		out = append(out, it.name)
	}
	return out
}
