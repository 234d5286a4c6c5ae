package s3auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
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

// canonicalHashes hash canonical requests; a hash holds nothing once
// Reset, so one pool serves every Verifier.
var canonicalHashes = sync.Pool{New: func() any { return sha256.New() }}

// v4Signature returns hex(HMAC(key, string-to-sign)) for one canonical
// request, without allocating.
func (k *sigKey) v4Signature(method, uri, query, headers, signed, payload, amzDate, scope string) [2 * sha256.Size]byte {
	h := canonicalHashes.Get().(hash.Hash)
	h.Reset()
	for _, s := range [...]string{method, "\n", uri, "\n", query, "\n", headers, "\n", signed, "\n", payload} {
		_, _ = io.WriteString(h, s)
	}
	var sum [sha256.Size]byte
	var hexed [2 * sha256.Size]byte
	hex.Encode(hexed[:], h.Sum(sum[:0]))
	canonicalHashes.Put(h)

	m := k.macs.Get().(hash.Hash)
	m.Reset()
	for _, s := range [...]string{v4Algorithm, "\n", amzDate, "\n", scope, "\n"} {
		_, _ = io.WriteString(m, s)
	}
	m.Write(hexed[:])
	hex.Encode(hexed[:], m.Sum(sum[:0]))
	k.macs.Put(m)
	return hexed
}
