// Package peer is the protocol between the cachelets of one application:
// fetch an object from its owner, write through to the owner, invalidate,
// flush queued writes, fetch byte ranges for a split download, and offer
// a cached copy to the key's owner (install.go), and keep the second copy
// of an owner's durable writes (backup.go). What a
// node agent asks of its own cachelet (drop, pre-warm, budget, access
// metadata) is not here: it goes over the control API (package control).
//
// It is HTTP/1.1 over kept-alive connections (see
// docs/design/cooperative-cache.md for why), with every request and every
// answer signed by the application's shared secret (answer.go), so nothing
// outside the application can read or write its cache, nor answer for one
// of its members. Bodies stream both ways; nothing is buffered whole.
package peer

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
)

// Header names of the peer protocol.
const (
	hdrApp       = "X-Hoard-Peer-App"
	hdrDate      = "X-Hoard-Peer-Date"
	hdrNonce     = "X-Hoard-Peer-Nonce"
	hdrSignature = "X-Hoard-Peer-Signature"
	hdrSize      = "X-Hoard-Peer-Size"
	hdrCRC       = "X-Hoard-Peer-Crc32c" // trailer of streamed bodies
	hdrRead      = "X-Hoard-Read"
	hdrPersist   = "X-Hoard-Peer-Persist"
	hdrRevision  = "X-Hoard-Peer-Revision"
	hdrManifest  = "X-Hoard-Shard-Manifest" // erasure.Manifest.Encode()
	hdrIndex     = "X-Hoard-Shard-Index"
	hdrInstall   = "X-Hoard-Peer-Install" // install.go: the offered object's metadata and CRC32C
	hdrBackup    = "X-Hoard-Peer-Backup"  // backup.go: a backup record's metadata and CRC32C, or a done batch's digest
)

// Authentication errors. The server answers all of them with 403 and the
// reason in its log, never in the response.
var (
	ErrUnauthenticated = errors.New("peer: request not signed")
	ErrWrongApp        = errors.New("peer: request signed for another application")
	ErrBadSignature    = errors.New("peer: signature does not match")
	ErrSkew            = errors.New("peer: request date outside the allowed window")
	ErrReplay          = errors.New("peer: request replayed")
)

// MaxSkew is how far a request's date may be from the server's clock.
const MaxSkew = 5 * time.Minute

// Auth signs and verifies peer requests with one application's secret.
// Safe for concurrent use.
type Auth struct {
	app    string
	secret []byte
	now    func() time.Time

	mu     sync.Mutex
	seen   map[string]time.Time // nonce -> request date, for the skew window
	sweept time.Time

	macs sync.Pool // of *macState: HMAC-SHA256 under secret, keyed once (withMAC)
}

// macState is a pooled keyed HMAC and the buffer its input is gathered
// in: one Write of the whole input, and no string copied to bytes on the
// way (hash.Hash takes no strings).
type macState struct {
	m   hash.Hash
	buf []byte
	sum [sha256.Size]byte // Sum's destination: a local would escape through the interface
}

// maxPooledMACInput bounds the buffer a pooled macState keeps.
const maxPooledMACInput = 64 << 10

// withMAC returns hex HMAC-SHA256(secret, what write writes). The keyed
// hashes are pooled: keying one costs two SHA-256 blocks and allocations
// per MAC, and every peer request and answer takes four or five MACs.
func (a *Auth) withMAC(write func(b []byte) []byte) string {
	st, _ := a.macs.Get().(*macState)
	if st == nil {
		st = &macState{m: hmac.New(sha256.New, a.secret), buf: make([]byte, 0, 512)}
	} else {
		st.m.Reset()
	}
	st.buf = write(st.buf[:0])
	st.m.Write(st.buf)
	var hx [2 * sha256.Size]byte // on the stack: EncodeToString's buffer is not
	hex.Encode(hx[:], st.m.Sum(st.sum[:0]))
	out := string(hx[:])
	if cap(st.buf) <= maxPooledMACInput {
		a.macs.Put(st)
	}
	return out
}

// NewAuth returns an Auth for app. The secret must be at least 16 bytes;
// clk may be nil (the system clock).
func NewAuth(app string, secret []byte, clk clock.Clock) (*Auth, error) {
	if app == "" {
		return nil, errors.New("peer: application name is required")
	}
	if len(secret) < 16 {
		return nil, errors.New("peer: application secret must be at least 16 bytes")
	}
	now := clock.Or(clk).Now
	return &Auth{app: app, secret: append([]byte(nil), secret...), now: now, seen: make(map[string]time.Time)}, nil
}

// App is the application whose requests this Auth signs.
func (a *Auth) App() string { return a.app }

// Sign adds the authentication headers to req. The body is not covered
// (bodies stream; their integrity is checked by the CRC32C trailer, and
// the transport's by TLS where peers are not on a trusted network).
func (a *Auth) Sign(req *http.Request) {
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	date := strconv.FormatInt(a.now().UnixNano(), 10)
	req.Header.Set(hdrApp, a.app)
	req.Header.Set(hdrDate, date)
	req.Header.Set(hdrNonce, hex.EncodeToString(nonce[:]))
	req.Header.Set(hdrSignature, a.signature(req))
}

// signature covers the method, the target, the application, the date, the
// nonce and the headers that change a request's meaning.
func (a *Auth) signature(req *http.Request) string {
	return a.withMAC(func(b []byte) []byte {
		for _, s := range [...]string{
			req.Method, req.URL.EscapedPath(), req.URL.RawQuery,
			req.Header.Get(hdrApp), req.Header.Get(hdrDate), req.Header.Get(hdrNonce),
			req.Header.Get(hdrSize), req.Header.Get(hdrPersist), req.Header.Get(hdrRevision), req.Header.Get("If-None-Match"),
			req.Header.Get("Range"), req.Header.Get(hdrManifest),
		} {
			b = append(b, s...)
			b = append(b, '\n')
		}
		if v := req.Header.Get(hdrInstall); v != "" {
			// Only where present, so requests without it sign as before.
			b = append(b, v...)
			b = append(b, '\n')
		}
		if v := req.Header.Get(hdrBackup); v != "" {
			// The same (a distinct prefix: it is never taken for an
			// install header).
			b = append(b, "backup:"...)
			b = append(b, v...)
			b = append(b, '\n')
		}
		return b
	})
}

// Verify checks req's signature, date and nonce. A nonce is accepted once
// within the skew window, so a captured request cannot be replayed.
func (a *Auth) Verify(req *http.Request) error {
	sig := req.Header.Get(hdrSignature)
	if sig == "" {
		return ErrUnauthenticated
	}
	if req.Header.Get(hdrApp) != a.app {
		return ErrWrongApp
	}
	if !hmac.Equal([]byte(sig), []byte(a.signature(req))) {
		return ErrBadSignature
	}
	ns, err := strconv.ParseInt(req.Header.Get(hdrDate), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad date", ErrSkew)
	}
	date, now := time.Unix(0, ns), a.now()
	if d := now.Sub(date); d > MaxSkew || d < -MaxSkew {
		return ErrSkew
	}
	nonce := req.Header.Get(hdrNonce)
	if len(nonce) != 24 || strings.Trim(nonce, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: bad nonce", ErrBadSignature)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Sub(a.sweept) > MaxSkew {
		for n, t := range a.seen {
			if now.Sub(t) > MaxSkew {
				delete(a.seen, n)
			}
		}
		a.sweept = now
	}
	if _, dup := a.seen[nonce]; dup {
		return ErrReplay
	}
	a.seen[nonce] = date
	return nil
}
