package cache

import (
	"fmt"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// Policy names an eviction policy: the order in which the cache gives up
// complete entries when it needs room. Each application picks one. The
// names live in package cacheconfig, which specs and configuration
// documents use without this package.
type Policy = cacheconfig.Policy

const (
	// PolicyOwnerLRU evicts the entries this cachelet does not own first,
	// least recently used first, then the owned ones in LRU order. With
	// Config.Owns nil every entry is owned and this is plain LRU. The
	// default.
	PolicyOwnerLRU = cacheconfig.PolicyOwnerLRU
	// PolicySizeAware evicts in four classes, each in LRU order: entries
	// not owned and larger than Config.LargeObjectSize, then the smaller
	// ones not owned, then owned large ones, then owned small ones.
	PolicySizeAware = cacheconfig.PolicySizeAware
	// PolicyTTL expires each entry Config.TTL after it was added: an
	// expired entry is a miss. When room is needed, the entries closest to
	// expiry (expired ones first) go first; reads do not extend a life.
	PolicyTTL = cacheconfig.PolicyTTL
	// PolicyGDSF is Greedy-Dual-Size-Frequency (gdsfOrder). It ignores
	// ownership, as do PolicyS3FIFO and PolicyWTinyLFU.
	PolicyGDSF = cacheconfig.PolicyGDSF
	// PolicyS3FIFO is S3-FIFO (s3fifoOrder).
	PolicyS3FIFO = cacheconfig.PolicyS3FIFO
	// PolicyWTinyLFU is W-TinyLFU (tinyLFUOrder).
	PolicyWTinyLFU = cacheconfig.PolicyWTinyLFU
)

// validPolicies lists every Policy, the default first, for error messages.
const validPolicies = string(PolicyOwnerLRU) + ", " + string(PolicySizeAware) + ", " + string(PolicyTTL) + ", " +
	string(PolicyGDSF) + ", " + string(PolicyS3FIFO) + ", " + string(PolicyWTinyLFU)

// evictionOrder is what a Policy is made of: it keeps the complete entries
// in the order they are to be evicted. The Cache decides when to evict (the
// budget and the reservations are its business alone); the order decides
// which entry goes next.
//
// Concurrency: every method is called with the cache's lock held, so one at
// a time; none may call back into the cache. added, touched and removed
// are called only for entries in the cache (added once per admission,
// removed once when it leaves for any reason: replaced, removed, evicted or
// expired). The cache computes e.owned before added and after an ownership
// change; orders read it and may keep per-entry state in Entry's order
// fields (prev, next, class, tick, expires, idx).
type evictionOrder interface {
	// added takes in an entry just admitted.
	added(e *Entry)
	// touched records a hit on e (Get, not Peek).
	touched(e *Entry)
	// removed forgets e.
	removed(e *Entry)
	// victim returns the entry to evict next, nil when the order holds
	// none. It does not remove it: the cache calls removed.
	victim() *Entry
}

// reclassifier is implemented by orders that rank entries by ownership:
// after the cache updated e.owned of every entry, ownershipChanged
// re-ranks them.
type reclassifier interface {
	ownershipChanged()
}

// expirer is implemented by orders under which entries lapse: an expired
// entry is dropped, and reported as a miss, when it is looked up.
type expirer interface {
	expired(e *Entry) bool
}

// newOrder builds the order for a validated config, which it may keep and
// read under the cache's lock.
func newOrder(cfg *Config) (evictionOrder, error) {
	switch cfg.Policy {
	case PolicyOwnerLRU:
		return newLRUClasses(2, ownerClass), nil
	case PolicySizeAware:
		large := cfg.LargeObjectSize
		return newLRUClasses(4, func(e *Entry) uint8 { return sizeClass(e, large) }), nil
	case PolicyTTL:
		return newTTLOrder(cfg.TTL, cfg.Clock.Now), nil
	case PolicyGDSF:
		return newGDSFOrder(), nil
	case PolicyS3FIFO:
		return newS3FIFOOrder(), nil
	case PolicyWTinyLFU:
		return newTinyLFUOrder(func() int64 { return cfg.Budget }), nil
	}
	return nil, fmt.Errorf("cache: unknown eviction policy %q (valid: %s)", cfg.Policy, validPolicies)
}

// ownerClass ranks entries for PolicyOwnerLRU: not owned (0) before owned (1).
func ownerClass(e *Entry) uint8 {
	if e.owned {
		return 1
	}
	return 0
}

// sizeClass ranks entries for PolicySizeAware: not owned and large (0), not
// owned and small (1), owned and large (2), owned and small (3). An entry of
// exactly large bytes is small.
func sizeClass(e *Entry, large int64) uint8 {
	var c uint8
	if e.owned {
		c = 2
	}
	if e.Size() <= large {
		c++
	}
	return c
}
