package s3auth

import (
	"crypto/hmac"
	"crypto/subtle"
	"encoding/binary"
	"hash/maphash"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
	"unicode/utf8"
)

// The memo of verified SigV4 requests. A presigned URL fetched again and
// again, or a header-signed GET repeated within the second its
// X-Amz-Date names, carries the same signature over the same canonical
// request each time; the memo answers it without building the canonical
// request, hashing it and computing the HMAC again.
//
// Soundness. The memo key holds, each length-prefixed, every input the
// verification of a bodiless SigV4 request reads from the request: the
// method, the path (decoded and raw: the canonical URI is made from
// them), the raw query, the Host, the Authorization header, the first
// X-Amz-Date, Date and X-Amz-Content-Sha256 values, and every value of
// every header named in SignedHeaders as the canonical headers read them
// (headerValues). The signature itself (its bytes in the query or the
// Authorization header) is cut out of the key and kept in the entry,
// where a hit compares it in constant time, as verification does; so a
// hit means the request is, input for input, one that verified. What
// verification reads besides, and which can change between two identical
// requests, is checked again on every hit by the code verification uses:
// the time (the header-signed skew, the presigned URL's window), the
// access key's current secret (it must be the one the entry was verified
// with: a rotated or deleted key misses) and the names of the unsigned
// x-amz-* headers the request carries. Any of these failing makes the
// request a miss, verified afresh, so its error is verification's own.
// Only successful verifications are kept, only of GET and HEAD requests
// with no body (Content-Length 0, no Transfer-Encoding) and a payload
// mode that is not streaming; SigV2 is never kept.
//
// Admission: a request is kept the second time it verifies, not the
// first (memoSeen remembers the hashes of keys verified once), so that
// requests that never come again (an SDK's, stamped to the second and
// often with a fresh invocation id) cost the memo the building of their
// key and no allocation.
//
// Bounds: at most memoMaxEntries entries in memoShards shards (a shard
// that is full drops one entry, the map's first in iteration order,
// before taking another); no key over memoMaxKey bytes is kept; an entry
// found past its signature's validity is dropped.

const (
	memoMaxEntries = 4096
	memoShards     = 16
	memoMaxKey     = 2 << 10
	memoSeen       = 4096 // slots of key hashes verified once
)

// Key tags: which of the two SigV4 forms a key is for.
const (
	keyHeader    byte = 'H'
	keyPresigned byte = 'P'
)

type memo struct {
	seed     maphash.Seed
	perShard int
	seen     [memoSeen]atomic.Uint64
	shards   [memoShards]memoShard
}

type memoShard struct {
	mu     sync.RWMutex
	m      map[string]*memoEntry
	hits   atomic.Uint64
	misses atomic.Uint64
	_      [64]byte // keeps neighbouring shards' locks off one cache line
}

// memoEntry is one verified request: its signature and what verifying
// it established.
type memoEntry struct {
	sig string
	res authResult
}

// MemoStats counts the memo's work.
type MemoStats struct {
	Hits    uint64 // requests answered from the memo
	Misses  uint64 // requests the memo could have answered, verified afresh
	Entries int    // entries held now
}

func newMemo(maxEntries int) *memo {
	m := &memo{seed: maphash.MakeSeed(), perShard: max(1, maxEntries/memoShards)}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*memoEntry)
	}
	return m
}

// memoKey is one request's key, built in a pooled buffer.
type memoKey struct {
	buf  []byte
	sig  string // the signature, cut out of buf
	hash uint64 // of buf
}

var memoKeys = sync.Pool{New: func() any { return &memoKey{buf: make([]byte, 0, 512)} }}

func getMemoKey() *memoKey { return memoKeys.Get().(*memoKey) }

func putMemoKey(k *memoKey) {
	k.sig = "" // holds none of the request
	if cap(k.buf) <= 2*memoMaxKey {
		memoKeys.Put(k)
	}
}

// key builds r's memo key into k; false when r is not memoizable.
func (m *memo) key(k *memoKey, r *http.Request, authz []string) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead ||
		r.ContentLength != 0 || len(r.TransferEncoding) != 0 || len(authz) > 1 {
		return false
	}
	if n := len(r.URL.RawQuery) + len(r.URL.Path) + len(r.URL.RawPath) + len(r.Host); n > memoMaxKey ||
		len(authz) == 1 && n+len(authz[0]) > memoMaxKey {
		return false
	}
	b := k.buf[:0]
	var signed string
	if len(authz) == 1 {
		rest, ok := strings.CutPrefix(authz[0], v4Algorithm+" ")
		if !ok {
			return false
		}
		var sigAt, sigEnd int
		sigAt, sigEnd, signed, ok = v4Components(authz[0], len(authz[0])-len(rest))
		if !ok {
			return false
		}
		b = append(b, keyHeader)
		b = appendField(b, authz[0][:sigAt])
		b = appendField(b, authz[0][sigEnd:])
		b = appendField(b, r.URL.RawQuery)
		k.sig = authz[0][sigAt:sigEnd]
	} else {
		raw := r.URL.RawQuery
		sigAt, sigEnd, ok := rawQueryValue(raw, "X-Amz-Signature")
		if !ok {
			return false
		}
		s, e, ok := rawQueryValue(raw, "X-Amz-SignedHeaders")
		if !ok {
			return false
		}
		signed = unescapeQuery(raw[s:e])
		b = append(b, keyPresigned)
		b = appendField(b, raw[:sigAt])
		b = appendField(b, raw[sigEnd:])
		k.sig = raw[sigAt:sigEnd]
	}
	b = appendField(b, r.Method)
	b = appendField(b, r.URL.Path)
	b = appendField(b, r.URL.RawPath)
	b = appendField(b, r.Host)
	// What Header.Get returns, looked up by the canonical names directly.
	b = appendField(b, first(r.Header["X-Amz-Date"]))
	b = appendField(b, first(r.Header["Date"]))
	b = appendField(b, first(r.Header["X-Amz-Content-Sha256"]))
	b = appendField(b, signed)
	for rest := signed; ; {
		name, tail, more := strings.Cut(rest, ";")
		if name != "host" { // r.Host is in the key already
			vals := headerValues(r, name)
			b = binary.AppendUvarint(b, uint64(len(vals)))
			for _, val := range vals {
				b = appendField(b, val)
			}
		}
		if len(b) > memoMaxKey {
			k.buf = b
			return false
		}
		if !more {
			break
		}
		rest = tail
	}
	k.buf = b
	if len(b) > memoMaxKey {
		return false
	}
	k.hash = maphash.Bytes(m.seed, b)
	return true
}

func first(vals []string) string {
	if len(vals) == 0 {
		return ""
	}
	return vals[0]
}

func appendField(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// v4Components finds the Signature and SignedHeaders components of a
// SigV4 Authorization header (from offset from on: past the algorithm),
// each the first of its name, read as parseV4Authorization reads them:
// the signature's offsets in s and the signed headers' list.
func v4Components(s string, from int) (sigAt, sigEnd int, signed string, ok bool) {
	haveSig, haveSigned := false, false
	for i := from; i <= len(s) && !(haveSig && haveSigned); {
		j := strings.IndexByte(s[i:], ',')
		if j < 0 {
			j = len(s)
		} else {
			j += i
		}
		part := s[i:j]
		lead := 0
		for lead < len(part) && asciiSpace(part[lead]) {
			lead++
		}
		if lead < len(part) && part[lead] >= utf8.RuneSelf {
			lead = len(part) - len(strings.TrimLeftFunc(part, unicode.IsSpace))
		}
		k, v, found := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !found:
		case k == "Signature" && !haveSig:
			sigAt = i + lead + len(k) + 1
			sigEnd, haveSig = sigAt+len(v), true
		case k == "SignedHeaders" && !haveSigned:
			signed, haveSigned = v, true
		}
		i = j + 1
	}
	return sigAt, sigEnd, signed, haveSig && haveSigned
}

func asciiSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// rawQueryValue finds the first pair of a raw query whose key is spelled
// exactly name and returns its value's offsets.
func rawQueryValue(raw, name string) (start, end int, ok bool) {
	for i := 0; i <= len(raw); {
		j := strings.IndexByte(raw[i:], '&')
		if j < 0 {
			j = len(raw)
		} else {
			j += i
		}
		if part := raw[i:j]; len(part) > len(name) && part[:len(name)] == name && part[len(name)] == '=' {
			return i + len(name) + 1, j, true
		}
		i = j + 1
	}
	return 0, 0, false
}

func (m *memo) shard(k *memoKey) *memoShard {
	return &m.shards[k.hash%memoShards]
}

// lookup returns the verified result for the request whose key is k, or
// nil. A hit has passed every check that does not follow from the key.
func (m *memo) lookup(v *Verifier, k *memoKey, r *http.Request) *authResult {
	sh := m.shard(k)
	sh.mu.RLock()
	e := sh.m[string(k.buf)]
	sh.mu.RUnlock()
	if e == nil || !hmac.Equal([]byte(e.sig), []byte(k.sig)) {
		sh.misses.Add(1)
		return nil
	}
	if !v.stillValid(r, &e.res) {
		sh.mu.Lock()
		if sh.m[string(k.buf)] == e {
			delete(sh.m, string(k.buf))
		}
		sh.mu.Unlock()
		sh.misses.Add(1)
		return nil
	}
	sh.hits.Add(1)
	res := e.res
	return &res
}

// stillValid runs the checks of a verification that depend on the time,
// the credential store or the request's unsigned headers.
func (v *Verifier) stillValid(r *http.Request, res *authResult) bool {
	if res.method == V4Header {
		if v.checkSkew(res.signedAt) != nil {
			return false
		}
	} else if v.checkPresignedWindow(res.signedAt, res.expires) != nil {
		return false
	}
	if checkSignedHeaders(r, res.signedHeaders) != nil {
		return false
	}
	secret, err := v.lookup(res.accessKey)
	return err == nil && subtle.ConstantTimeCompare([]byte(secret), []byte(res.secret)) == 1
}

// store keeps a successful verification of the request whose key is k.
func (m *memo) store(k *memoKey, res *authResult) {
	if res.method != V4Header && res.method != V4Presigned || !memoizablePayload(res.payloadHash) {
		return
	}
	if seen := &m.seen[k.hash/memoShards%memoSeen]; seen.Load() != k.hash {
		seen.Store(k.hash) // kept if it verifies again
		return
	}
	e := &memoEntry{sig: strings.Clone(k.sig), res: *res}
	sh := m.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[string(k.buf)]; !ok && len(sh.m) >= m.perShard {
		for old := range sh.m {
			delete(sh.m, old)
			break
		}
	}
	sh.m[string(k.buf)] = e
}

// memoizablePayload reports whether a payload mode leaves nothing to
// verify but the body's hash: not one of the streaming encodings.
func memoizablePayload(p string) bool {
	return p == unsignedPayload || isHexSHA256(p)
}

func (m *memo) stats() MemoStats {
	var s MemoStats
	for i := range m.shards {
		sh := &m.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		sh.mu.RLock()
		s.Entries += len(sh.m)
		sh.mu.RUnlock()
	}
	return s
}
