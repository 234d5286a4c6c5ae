package s3auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"sync"
)

// Derived SigV4 keys, kept per secret, day, region and service: deriving
// one costs four HMACs, which every request paid; a day's key is the same
// for all of that day's requests of one access key. The cache is keyed by
// the secret itself, so a changed secret derives a new key, and bounded
// (sigKeysMax: past it, it starts over).

const sigKeysMax = 256

type sigKeyID struct{ secret, date, region, service string }

// sigKey is one derived key, with a pool of HMACs keyed with it.
type sigKey struct {
	key  []byte
	macs sync.Pool // hash.Hash: HMAC-SHA256 keyed with key
}

type sigKeys struct {
	mu sync.Mutex
	m  map[sigKeyID]*sigKey
}

// get returns the derived key for id, deriving it on first use.
func (c *sigKeys) get(secret, date, region, service string) *sigKey {
	id := sigKeyID{secret, date, region, service}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k := c.m[id]; k != nil {
		return k
	}
	if c.m == nil || len(c.m) >= sigKeysMax {
		c.m = make(map[sigKeyID]*sigKey)
	}
	k := &sigKey{key: signingKey(secret, date, region, service)}
	k.macs.New = func() any { return hmac.New(sha256.New, k.key) }
	c.m[id] = k
	return k
}

// scratch is one signature check's working memory: a hash of canonical
// requests (which holds nothing once Reset) and buffers. One pool serves
// every Verifier.
type scratch struct {
	h       hash.Hash
	buf     []byte
	headers []byte // the canonical headers
	query   []byte // the canonical query string
}

var scratches = sync.Pool{New: func() any { return &scratch{h: sha256.New()} }}

// v4Signature returns hex(HMAC(key, string-to-sign)) for one canonical
// request (its headers in sc.headers, its query string in sc.query),
// without allocating.
func (k *sigKey) v4Signature(sc *scratch, method, uri, signed, payload, amzDate, scope string) [2 * sha256.Size]byte {
	b := append(sc.buf[:0], method...)
	b = append(append(b, '\n'), uri...)
	b = append(append(b, '\n'), sc.query...)
	b = append(append(b, '\n'), sc.headers...)
	b = append(append(b, '\n'), signed...)
	b = append(append(b, '\n'), payload...)
	sc.h.Reset()
	sc.h.Write(b)
	var sum [sha256.Size]byte
	var hexed [2 * sha256.Size]byte
	hex.Encode(hexed[:], sc.h.Sum(sum[:0]))

	b = append(b[:0], v4Algorithm...)
	b = append(append(b, '\n'), amzDate...)
	b = append(append(b, '\n'), scope...)
	b = append(append(b, '\n'), hexed[:]...)
	sc.buf = b
	m := k.macs.Get().(hash.Hash)
	m.Reset()
	m.Write(b)
	hex.Encode(hexed[:], m.Sum(sum[:0]))
	k.macs.Put(m)
	return hexed
}
