package erasure

import (
	"container/list"
	"errors"
	"fmt"
	"io"
	"sync"
)

// ShardKey names one shard a cachelet holds.
type ShardKey struct {
	Bucket, Key, ETag string
	Index             int
}

// Shard is one held shard: its manifest and its bytes (all stripes).
type Shard struct {
	Key      ShardKey
	Manifest *Manifest
	// Encoded is Manifest.Encode(), kept to answer with.
	Encoded string
	Data    []byte
}

// Store holds the shards a cachelet keeps for its application, within a
// byte budget, evicting the least recently used. Safe for concurrent use;
// shards handed out are never modified (a Put replaces, never writes in
// place), so readers may use them after the Store dropped them.
type Store struct {
	mu     sync.Mutex
	budget int64
	used   int64
	lru    *list.List // of *Shard, most recent first
	byKey  map[ShardKey]*list.Element
	// byObject finds an object's shards, whatever their version.
	byObject map[[2]string]map[ShardKey]bool
	evicted  int64
}

// NewStore returns an empty Store of budget bytes.
func NewStore(budget int64) *Store {
	return &Store{budget: budget, lru: list.New(), byKey: map[ShardKey]*list.Element{}, byObject: map[[2]string]map[ShardKey]bool{}}
}

// Put keeps a shard whose pieces verify against its manifest, evicting
// older shards to make room. A shard larger than the budget is refused.
// Errors: ErrCorrupt, ErrBadManifest, and ErrTooLarge.
func (s *Store) Put(sh *Shard) error {
	m := sh.Manifest
	if sh.Key.Index < 0 || sh.Key.Index >= m.Shards() || sh.Key.ETag != m.ETag || int64(len(sh.Data)) != m.ShardSize() {
		return fmt.Errorf("%w: shard %d of %d bytes", ErrBadManifest, sh.Key.Index, len(sh.Data))
	}
	if err := m.Verify(sh.Key.Index, 0, sh.Data); err != nil {
		return err
	}
	n := int64(len(sh.Data))
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.budget {
		return fmt.Errorf("%w: %d bytes, budget %d", ErrTooLarge, n, s.budget)
	}
	s.drop(sh.Key)
	for s.used+n > s.budget {
		old := s.lru.Back().Value.(*Shard)
		s.drop(old.Key)
		s.evicted++
	}
	s.byKey[sh.Key] = s.lru.PushFront(sh)
	ok := [2]string{sh.Key.Bucket, sh.Key.Key}
	if s.byObject[ok] == nil {
		s.byObject[ok] = map[ShardKey]bool{}
	}
	s.byObject[ok][sh.Key] = true
	s.used += n
	return nil
}

// ErrTooLarge: a shard does not fit the store's budget.
var ErrTooLarge = fmt.Errorf("erasure: shard larger than the shard budget")

func (s *Store) drop(k ShardKey) {
	el, ok := s.byKey[k]
	if !ok {
		return
	}
	sh := s.lru.Remove(el).(*Shard)
	delete(s.byKey, k)
	ok2 := [2]string{k.Bucket, k.Key}
	delete(s.byObject[ok2], k)
	if len(s.byObject[ok2]) == 0 {
		delete(s.byObject, ok2)
	}
	s.used -= int64(len(sh.Data))
}

// Get returns the shard this store holds of bucket/key at etag (the lowest
// index when it holds several), or nil.
func (s *Store) Get(bucket, key, etag string) *Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *list.Element
	for k := range s.byObject[[2]string{bucket, key}] {
		if k.ETag != etag {
			continue
		}
		if el := s.byKey[k]; best == nil || el.Value.(*Shard).Key.Index < best.Value.(*Shard).Key.Index {
			best = el
		}
	}
	if best == nil {
		return nil
	}
	s.lru.MoveToFront(best)
	return best.Value.(*Shard)
}

// Delete drops the shards of bucket/key at version etag (of every version
// when etag is ""), and says how many.
func (s *Store) Delete(bucket, key, etag string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k := range s.byObject[[2]string{bucket, key}] {
		if etag == "" || k.ETag == etag {
			s.drop(k)
			n++
		}
	}
	return n
}

// Remove drops the shard k, and says whether the store held it.
func (s *Store) Remove(k ShardKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.byKey[k]
	s.drop(k)
	return ok
}

// Keys lists the shards held, least recently used first.
func (s *Store) Keys() []ShardKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ShardKey, 0, s.lru.Len())
	for el := s.lru.Back(); el != nil; el = el.Prev() {
		out = append(out, el.Value.(*Shard).Key)
	}
	return out
}

// Stats is what a Store holds.
type Stats struct {
	Shards        int
	Bytes, Budget int64
	Evicted       int64
}

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Shards: s.lru.Len(), Bytes: s.used, Budget: s.budget, Evicted: s.evicted}
}

// Receive reads a shard of size bytes from body and keeps it (Put): the
// receiving side of a peer's write. manifest is the object's encoded
// manifest. The bytes are read whole before they are checked, within the
// store's budget (a shard larger than the budget is refused before a byte
// is read). Errors: ErrBadManifest, ErrCorrupt, ErrTooLarge, and body's.
func (s *Store) Receive(k ShardKey, manifest string, body io.Reader, size int64) error {
	m, err := ParseManifest(manifest)
	if err != nil {
		return err
	}
	if k.ETag != m.ETag || size != m.ShardSize() || k.Index < 0 || k.Index >= m.Shards() {
		return fmt.Errorf("%w: shard %d of %d bytes does not fit the manifest", ErrBadManifest, k.Index, size)
	}
	if size > s.Stats().Budget {
		return fmt.Errorf("%w: %d bytes", ErrTooLarge, size)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(body, data); err != nil {
		return err
	}
	return s.Put(&Shard{Key: k, Manifest: m, Encoded: manifest, Data: data})
}

// Pieces returns the index, encoded manifest and pieces [first, end)
// (end -1: to the last) of the shard held of bucket/key at etag: the
// serving side of a peer's read. The bytes are the store's, not to be
// modified. ErrNotHeld when there is none; ErrBadManifest when the
// stripes are out of range.
func (s *Store) Pieces(bucket, key, etag string, first, end int) (int, string, []byte, error) {
	sh := s.Get(bucket, key, etag)
	if sh == nil {
		return 0, "", nil, ErrNotHeld
	}
	n := sh.Manifest.Stripes()
	if end < 0 {
		end = n
	}
	if first < 0 || first > end || end > n {
		return 0, "", nil, fmt.Errorf("%w: stripes [%d, %d) of %d", ErrBadManifest, first, end, n)
	}
	c := sh.Manifest.Chunk
	return sh.Key.Index, sh.Encoded, sh.Data[first*c : end*c], nil
}

// ErrNotHeld: the store holds no shard of that object version.
var ErrNotHeld = errors.New("erasure: shard not held")

// Health is a cachelet's erasure-coding figures as the platform shows them
// (its counters, the agent's instance info, the dashboard): the shards it
// holds for its application, their bytes against their budget, the
// probability of losing an object within the next hour (LossProbability,
// from the departures it saw) and the members it saw leave.
type Health struct {
	Shards          int     `json:"shards"`
	HeldBytes       int64   `json:"held_bytes"`
	BudgetBytes     int64   `json:"budget_bytes"`
	LossProbability float64 `json:"loss_probability"`
	MembersLost     int64   `json:"members_lost"`
}

// Touch reads every byte of the shard k and checks it against its
// manifest: a warm-up's visit, which leaves the eviction order as it is.
// A shard that no longer verifies is dropped (a doubt is a miss; a
// rebuild restores it) and ErrCorrupt returned; ErrNotHeld when the store
// no longer holds k. n is the bytes read.
func (s *Store) Touch(k ShardKey) (n int64, err error) {
	s.mu.Lock()
	el, ok := s.byKey[k]
	s.mu.Unlock()
	if !ok {
		return 0, ErrNotHeld
	}
	sh := el.Value.(*Shard)
	// Shards are never modified in place: verify outside the lock.
	if err := sh.Manifest.Verify(k.Index, 0, sh.Data); err != nil {
		s.mu.Lock()
		if cur, ok := s.byKey[k]; ok && cur.Value.(*Shard) == sh {
			s.drop(k)
		}
		s.mu.Unlock()
		return int64(len(sh.Data)), err
	}
	return int64(len(sh.Data)), nil
}

// Peek returns the shard k, or nil, leaving the eviction order as it is.
func (s *Store) Peek(k ShardKey) *Shard {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[k]; ok {
		return el.Value.(*Shard)
	}
	return nil
}

// SetBudget changes the store's budget to n bytes (a negative n is 0),
// evicting the least recently used shards to fit, and returns the bytes
// evicted.
func (s *Store) SetBudget(n int64) (freed int64) {
	n = max(n, 0)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget = n
	for s.used > s.budget {
		old := s.lru.Back().Value.(*Shard)
		freed += int64(len(old.Data))
		s.drop(old.Key)
		s.evicted++
	}
	return freed
}
