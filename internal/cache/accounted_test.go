package cache

import (
	"testing"

	"github.com/hoard-io/hoard/internal/store"
)

func TestAccountedEntriesChargeTheirSize(t *testing.T) {
	c, err := New(Config{Budget: 100})
	if err != nil {
		t.Fatal(err)
	}
	add := func(name string, size int64) {
		t.Helper()
		if !c.Reserve(size) {
			t.Fatalf("reserve %s (%d bytes) refused", name, size)
		}
		e := NewAccountedEntry(Key{"b", name}, store.ObjectInfo{Size: size, ETag: "v1"})
		if e.Size() != size || e.Info().Size != size || !e.Complete() {
			t.Fatalf("entry %s: size %d, info size %d, complete %v", name, e.Size(), e.Info().Size, e.Complete())
		}
		if !c.Add(e) {
			t.Fatalf("add %s refused", name)
		}
	}
	add("a", 40)
	add("b", 40)
	if s := c.Stats(); s.Bytes != 80 || s.Objects != 2 {
		t.Fatalf("after two adds: %+v", s)
	}
	c.Get(Key{"b", "a"}) // a is now the most recently used
	add("c", 50)         // evicts b, the least recently used
	if c.Peek(Key{"b", "b"}) != nil || c.Peek(Key{"b", "a"}) == nil {
		t.Fatal("LRU evicted the wrong entry")
	}
	if s := c.Stats(); s.Bytes != 90 || s.Evictions != 1 {
		t.Fatalf("after the eviction: %+v", s)
	}
	e := c.Peek(Key{"b", "c"})
	if b, _ := e.Bytes(); len(b) != 0 {
		t.Fatalf("accounted entry holds %d bytes", len(b))
	}
}
