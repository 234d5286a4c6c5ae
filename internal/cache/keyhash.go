package cache

import "hash/maphash"

// keyHasher hashes keys with a seed of its own, for the orders that
// remember keys no longer cached (s3fifoOrder's ghosts) or count the uses
// of every key (tinyLFUOrder's sketch). A random seed per cache keeps a
// client from choosing keys that collide.
type keyHasher struct{ seed maphash.Seed }

func newKeyHasher() keyHasher { return keyHasher{seed: maphash.MakeSeed()} }

func (k keyHasher) hash(key Key) uint64 {
	var h maphash.Hash
	h.SetSeed(k.seed)
	h.WriteString(key.Bucket)
	h.WriteByte(0)
	h.WriteString(key.Object)
	return h.Sum64()
}

// entryList is a doubly linked list of entries through Entry.prev/next,
// with a sentinel, and the bytes and count it holds: the queues of
// s3fifoOrder and tinyLFUOrder.
type entryList struct {
	head  Entry
	bytes int64
	n     int
}

func (l *entryList) init() { l.head.next, l.head.prev = &l.head, &l.head }

// pushFront adds e at the front (the most recently inserted end).
func (l *entryList) pushFront(e *Entry) {
	pushFront(&l.head, e)
	l.bytes += e.Size()
	l.n++
}

// back returns the entry at the back (the oldest), nil when empty.
func (l *entryList) back() *Entry {
	if l.head.prev == &l.head {
		return nil
	}
	return l.head.prev
}

func (l *entryList) remove(e *Entry) {
	unlink(e)
	l.bytes -= e.Size()
	l.n--
}
