package cachelet

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/checksum"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
)

// Bytes from a peer are checked twice before they are kept: the peer
// protocol checks the answer's signature (the owner holds the
// application's secret, the answer is the one to this request, the body is
// the one the owner signed), and here the body is checked against the
// store's own full-object checksum of the object when the answer carries
// one, so that an owner that holds the secret but serves bytes the store
// does not hold (a bug, damaged memory) is caught too. A check that fails
// fails the body's last read, before its last bytes: the fill is aborted
// and never cached, its readers see a short body, and a read that had not
// started yet goes to the store.

// errPeerChecksum: a peer's body did not match the store's checksum of the
// object. It wraps store.ErrUnavailable: the reader falls back to the store.
var errPeerChecksum = fmt.Errorf("%w: peer's bytes do not match the store's checksum of the object", store.ErrUnavailable)

// checkAlgorithms are the full-object checksums a peer's body is checked
// against, cheapest first; only the first the answer carries is used.
var checkAlgorithms = []checksum.Algorithm{checksum.CRC64NVME, checksum.CRC32C, checksum.CRC32, checksum.SHA256, checksum.SHA1}

// storeChecksum returns the cheapest full-object checksum info carries:
// not a composite one (multipart uploads' cover parts), nor a value with a
// part count.
func storeChecksum(info store.ObjectInfo) (checksum.Algorithm, []byte, bool) {
	if strings.EqualFold(info.ChecksumType, "COMPOSITE") {
		return "", nil, false
	}
	for _, a := range checkAlgorithms {
		v, ok := info.Checksums[string(a)]
		if !ok || strings.Contains(v, "-") {
			continue
		}
		want, err := checksum.ParseValue(a, v)
		if err != nil {
			continue
		}
		return a, want, true
	}
	return "", nil, false
}

// checkedAgainstStore wraps a peer's body of the whole object described
// by info with the check of the store's checksum, when info carries one.
func checkedAgainstStore(body io.ReadCloser, info store.ObjectInfo) io.ReadCloser {
	a, want, ok := storeChecksum(info)
	if !ok || info.Size == 0 {
		return body
	}
	return &sumChecked{ReadCloser: body, h: checksum.New(a), want: want, remaining: info.Size, mismatch: errPeerChecksum}
}

// sumChecked passes a body of remaining bytes and withholds the last
// read's bytes unless the whole body's sum by h is want; else its reads
// fail with mismatch.
type sumChecked struct {
	io.ReadCloser
	h         hash.Hash
	want      []byte
	remaining int64
	mismatch  error
	err       error
}

func (s *sumChecked) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.remaining == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.remaining {
		p = p[:s.remaining]
	}
	n, err := s.ReadCloser.Read(p)
	s.h.Write(p[:n])
	s.remaining -= int64(n)
	if s.remaining == 0 && !bytes.Equal(s.h.Sum(nil), s.want) {
		s.err = s.mismatch
		return 0, s.err
	}
	if errors.Is(err, io.EOF) && s.remaining == 0 {
		err = nil // the next Read says io.EOF
	}
	return n, err
}

// refusedAnswer reports whether err says a peer's answer failed
// verification (rather than the peer being unreachable).
func refusedAnswer(err error) bool {
	return errors.Is(err, peer.ErrAnswerUnauthenticated) || errors.Is(err, errPeerChecksum)
}

// DistrustFor is how long the cachelet reads from the store rather than
// ask an owner whose answer failed verification: a rogue member, or an
// owner whose answers are damaged on the way, then costs misses, not the
// short bodies of fills that failed at their end.
const DistrustFor = 30 * time.Second

// distrustList holds the owners whose answers failed verification lately.
// Safe for concurrent use.
type distrustList struct {
	mu    sync.Mutex
	until map[string]time.Time // peer address -> end of its distrust
}

// distrusted reports whether the owner at addr is skipped now.
func (c *Cachelet) distrusted(addr string) bool {
	d := &c.distrust
	d.mu.Lock()
	defer d.mu.Unlock()
	until, ok := d.until[addr]
	if ok && !c.clock.Now().Before(until) {
		delete(d.until, addr)
		return false
	}
	return ok
}

// notePeerAnswer counts, logs and distrusts for DistrustFor the owner at
// addr when err says its answer failed verification; other errors pass.
func (c *Cachelet) notePeerAnswer(err error, k cache.Key, addr string) {
	if !refusedAnswer(err) {
		return
	}
	c.m.peerRefused.Inc()
	c.log.Warn("peer answer refused; reading from the store", "bucket", k.Bucket, "key", k.Object, "owner", addr, "for", DistrustFor, "err", err)
	d := &c.distrust
	d.mu.Lock()
	if d.until == nil {
		d.until = map[string]time.Time{}
	}
	d.until[addr] = c.clock.Now().Add(DistrustFor)
	d.mu.Unlock()
}

// watchedBody reports a peer body's verification failure (notePeerAnswer)
// once, as its reader meets it.
type watchedBody struct {
	io.ReadCloser
	c     *Cachelet
	k     cache.Key
	addr  string
	noted bool
}

// watchPeerBody wraps a peer's body of k from the owner at addr.
func (c *Cachelet) watchPeerBody(body io.ReadCloser, k cache.Key, addr string) io.ReadCloser {
	return &watchedBody{ReadCloser: body, c: c, k: k, addr: addr}
}

func (w *watchedBody) Read(p []byte) (int, error) {
	n, err := w.ReadCloser.Read(p)
	if err != nil && !w.noted && refusedAnswer(err) {
		w.noted = true
		w.c.notePeerAnswer(err, w.k, w.addr)
	}
	return n, err
}
