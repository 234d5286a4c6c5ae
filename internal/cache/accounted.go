package cache

import "github.com/hoard-io/hoard/internal/store"

// NewAccountedEntry returns a complete entry that charges info.Size bytes
// to the budget and takes part in admission and eviction like any other,
// but holds none of the object's bytes: what a simulation of the policies
// (package sim) adds, so that it runs the cache's own code on millions of
// objects without their memory. Its bytes are not there (Bytes returns
// none): it must never be handed to a reader.
func NewAccountedEntry(key Key, info store.ObjectInfo) *Entry {
	e := NewCompleteEntry(key, info, nil)
	e.info.Size, e.size = info.Size, info.Size
	return e
}
