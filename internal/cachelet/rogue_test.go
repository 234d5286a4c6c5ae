package cachelet

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

// keyRouter spreads keys over owners by a hash of the key, as a ring
// does; members can be taken out.
type keyRouter struct {
	mu     sync.Mutex
	self   string
	owners []string
}

func (r *keyRouter) Owner(_, key string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := fnv.New32a()
	h.Write([]byte(key))
	o := r.owners[h.Sum32()%uint32(len(r.owners))]
	return o, o == r.self
}

func (r *keyRouter) remove(addr string) {
	r.mu.Lock()
	r.owners = slices.DeleteFunc(r.owners, func(a string) bool { return a == addr })
	r.mu.Unlock()
}

const appSecret = "a-secret-of-at-least-16-bytes"

// forger answers peer fetches as an owner would, with bytes of its own
// under the object's real ETag, size and (with checksums) the store's
// checksum, signing its answers per the peer protocol's answer format
// (internal/peer/answer.go) with secret, or not at all when it is empty.
type forger struct {
	st        store.Store
	secret    string
	checksums bool
	mu        sync.Mutex
	served    int
}

func (f *forger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rest, _ := strings.CutPrefix(r.URL.Path, "/v1/o/")
	bucket, key, _ := strings.Cut(rest, "/")
	info, err := f.st.Stat(r.Context(), bucket, key)
	if err != nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	f.mu.Lock()
	f.served++
	f.mu.Unlock()
	bad := object(key, 666, int(info.Size))
	h := w.Header()
	h.Set("ETag", `"`+info.ETag+`"`)
	h.Set("X-Hoard-Peer-Size", strconv.FormatInt(info.Size, 10))
	h.Set("X-Hoard-Read", string(peer.RemoteHit))
	h["Content-Type"] = nil
	if f.checksums {
		full, err := f.getInfo(r, bucket, key)
		if err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		for a, v := range full.Checksums {
			h.Set("X-Amz-Checksum-"+a, v)
		}
	}
	if f.secret == "" {
		h.Set("Content-Length", strconv.Itoa(len(bad)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(bad)
		return
	}
	h.Set("X-Hoard-Peer-Answer-Body", "stream-v2")
	mac := f.answerMAC(r.Header.Get("X-Hoard-Peer-Signature"), h)
	h.Set("X-Hoard-Peer-Answer", mac)
	sum := crc32.Checksum(bad, crc32.MakeTable(crc32.Castagnoli))
	m := hmac.New(sha256.New, []byte(f.secret))
	fmt.Fprintf(m, "hoard-peer-body-v1\n%s\n%d\n%08x", mac, len(bad), sum)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(bad)
	_, _ = w.Write([]byte(hex.EncodeToString(m.Sum(nil)))) // the body's MAC follows it
}

func (f *forger) getInfo(r *http.Request, bucket, key string) (store.ObjectInfo, error) {
	body, info, _, err := f.st.Get(r.Context(), bucket, key, store.GetOptions{ChecksumMode: true})
	if err != nil {
		return info, err
	}
	body.Close()
	return info, nil
}

// answerMAC is the answer signature of the peer protocol, written from its
// documentation.
func (f *forger) answerMAC(reqSig string, h http.Header) string {
	var lines []string
	for name, vals := range h {
		n := strings.ToLower(name)
		signed := strings.HasPrefix(n, "x-hoard-") || strings.HasPrefix(n, "x-amz-") || slices.Contains([]string{
			"etag", "last-modified", "content-type", "content-encoding", "content-disposition", "content-language", "cache-control", "expires"}, n)
		if !signed || n == "x-hoard-peer-answer" {
			continue
		}
		for _, v := range vals {
			lines = append(lines, n+":"+v+"\n")
		}
	}
	slices.Sort(lines)
	m := hmac.New(sha256.New, []byte(f.secret))
	fmt.Fprintf(m, "hoard-peer-answer-v1\n%s\n%d\n%s", reqSig, http.StatusOK, strings.Join(lines, ""))
	return hex.EncodeToString(m.Sum(nil))
}

func (f *forger) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

// rogueRing is a real owner, a reader and a forger in one ring: the
// forger owns about half the keys.
type rogueRing struct {
	st             *memstore.Store
	owner, reader  *Cachelet
	router         *keyRouter
	forger         *forger
	rogueAddr      string
	ownerAddr      string
	keys           map[string][]byte
	forgerOwnsKeys int
}

func newRogueRing(t *testing.T, f *forger, sizes []int) *rogueRing {
	t.Helper()
	st := memstore.New()
	if err := st.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	f.st = st
	auth, err := peer.NewAuth("app", []byte(appSecret), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := peer.NewClient(auth, peer.ClientConfig{})
	t.Cleanup(client.Close)
	rogueSrv := httptest.NewServer(f)
	t.Cleanup(rogueSrv.Close)
	ownerSrv := httptest.NewUnstartedServer(nil)
	rr := &rogueRing{st: st, forger: f, rogueAddr: rogueSrv.Listener.Addr().String(), ownerAddr: ownerSrv.Listener.Addr().String(), keys: map[string][]byte{}}
	cfg := func(r Router) Config {
		return Config{Cache: cache.Config{Budget: 8 << 20, MaxObjectSize: testMaxSize}, Router: r, Peers: client}
	}
	if rr.owner, err = New(cfg(&keyRouter{self: rr.ownerAddr, owners: []string{rr.ownerAddr, rr.rogueAddr}}), st, nil, nil); err != nil {
		t.Fatal(err)
	}
	ownerSrv.Config.Handler = peer.NewServer(auth, rr.owner, nil)
	ownerSrv.Start()
	t.Cleanup(func() { ownerSrv.Close(); rr.owner.Close() })
	rr.router = &keyRouter{self: "reader", owners: []string{rr.ownerAddr, rr.rogueAddr}}
	if rr.reader, err = New(cfg(rr.router), st, nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rr.reader.Close() })
	for i := range 20 {
		key := fmt.Sprintf("obj-%02d", i)
		data := object(key, 1, sizes[i%len(sizes)])
		if _, err := st.Put(t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{ChecksumAlgorithm: "CRC32C"}); err != nil {
			t.Fatal(err)
		}
		rr.keys[key] = data
		if addr, _ := rr.router.Owner(testBucket, key); addr == rr.rogueAddr {
			rr.forgerOwnsKeys++
		}
	}
	return rr
}

// readAll reads every key through the reader and counts the reads that
// returned wrong bytes (completed, but not the store's) and those that
// failed (a short body or an error: a miss, never wrong bytes).
func (rr *rogueRing) readAll(t *testing.T) (wrong, failed int, outcomes map[Outcome]int) {
	t.Helper()
	outcomes = map[Outcome]int{}
	for key, want := range rr.keys {
		obj, err := rr.reader.Get(t.Context(), testBucket, key, nil)
		if err != nil {
			failed++
			continue
		}
		got, err := io.ReadAll(obj.Body)
		obj.Body.Close()
		switch {
		case err != nil:
			failed++
		case !bytes.Equal(got, want):
			wrong++
		default:
			outcomes[obj.Outcome]++
		}
	}
	return wrong, failed, outcomes
}

// checkCached fails unless every object the reader holds is the store's.
func (rr *rogueRing) checkCached(t *testing.T) {
	t.Helper()
	for key, want := range rr.keys {
		e := rr.reader.cache.Peek(cache.Key{Bucket: testBucket, Object: key})
		if e == nil {
			continue
		}
		if got, ok := e.Bytes(); ok && !bytes.Equal(got, want) {
			t.Fatalf("%s: the reader caches wrong bytes", key)
		}
	}
}

// TestRogueOwnerNeverServesItsBytes reproduces a forged member record: a
// server in the ring that never knew the application's secret owns about
// half of 20 uncached keys and answers with its own bytes under the
// store's real ETag (so the version check with the store would confirm
// them). None of its bytes are served or cached, whether it signs its
// answers with a secret of its own or not at all: every read returns the
// store's bytes, and after the rogue leaves the ring no local hit
// returns its bytes either.
func TestRogueOwnerNeverServesItsBytes(t *testing.T) {
	sizes := []int{3000, 40 << 10, 100 << 10, 200 << 10} // filled by the reader, and by fill goroutines
	for _, tc := range []struct{ name, secret string }{
		{"unsigned", ""},
		{"signed with another secret", "a-wrong-secret-0123456789"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rr := newRogueRing(t, &forger{secret: tc.secret, checksums: true}, sizes)
			if rr.forgerOwnsKeys < 5 || rr.forgerOwnsKeys > 15 {
				t.Fatalf("the rogue owns %d of 20 keys", rr.forgerOwnsKeys)
			}
			wrong, failed, outcomes := rr.readAll(t)
			t.Logf("rogue owning %d of 20 keys, asked %d times: %d reads with wrong bytes, %d failed, %v",
				rr.forgerOwnsKeys, rr.forger.count(), wrong, failed, outcomes)
			if wrong != 0 || failed != 0 {
				t.Fatalf("with the rogue in the ring: %d reads of wrong bytes, %d failed", wrong, failed)
			}
			// Its first answer refused, the rogue is not asked again for
			// DistrustFor: the keys it owns are read from the store.
			if rr.forger.count() != 1 {
				t.Fatalf("the rogue was asked %d times for the %d keys it owns, want once", rr.forger.count(), rr.forgerOwnsKeys)
			}
			if n := toFloat64(rr.reader.m.peerFallbacks); int(n) != rr.forgerOwnsKeys {
				t.Fatalf("fallbacks to the store: %v, want %d", n, rr.forgerOwnsKeys)
			}
			if n := toFloat64(rr.reader.m.peerRefused); n != 1 {
				t.Fatalf("answers refused: %v, want 1", n)
			}
			rr.checkCached(t)
			rr.router.remove(rr.rogueAddr)
			wrong, failed, outcomes = rr.readAll(t)
			if wrong != 0 || failed != 0 || outcomes[LocalHit] != 20 {
				t.Fatalf("after the rogue left: %d reads of wrong bytes, %d failed, %v", wrong, failed, outcomes)
			}
		})
	}
}

// TestOwnerBytesCheckedAgainstTheStore: a member that holds the secret
// but serves bytes the store does not hold under the object's real ETag
// and checksum is caught by the store's checksum: small objects are read
// from the store instead, larger ones already streaming end short; none
// is cached, and after the member leaves every read is the store's.
func TestOwnerBytesCheckedAgainstTheStore(t *testing.T) {
	rr := newRogueRing(t, &forger{secret: appSecret, checksums: true}, []int{3000, 40 << 10, 100 << 10, 200 << 10})
	wrong, failed, outcomes := rr.readAll(t)
	t.Logf("member with the secret owning %d of 20 keys: %d reads with wrong bytes, %d failed, %v", rr.forgerOwnsKeys, wrong, failed, outcomes)
	if wrong != 0 {
		t.Fatalf("%d reads of wrong bytes", wrong)
	}
	if n := toFloat64(rr.reader.m.peerRefused); n != 1 || failed > 1 {
		t.Fatalf("answers refused: %v, reads failed %d; want 1 and at most 1 (the first, if it was streaming)", n, failed)
	}
	rr.checkCached(t)
	rr.router.remove(rr.rogueAddr)
	for range 2 {
		if wrong, failed, _ := rr.readAll(t); wrong != 0 || failed != 0 {
			t.Fatalf("after the member left: %d reads of wrong bytes, %d failed", wrong, failed)
		}
	}
	// The forger speaks the protocol faithfully: without the store's
	// checksum its answers are accepted (a member holding the secret is
	// trusted for the bytes the store cannot vouch for).
	rr2 := newRogueRing(t, &forger{secret: appSecret}, []int{3000})
	if wrong, _, _ := rr2.readAll(t); wrong != rr2.forgerOwnsKeys {
		t.Fatalf("a signed answer without a checksum: %d of %d keys served from the member", wrong, rr2.forgerOwnsKeys)
	}
}

// TestOwnerAnswerTamperedOnTheWay: a real owner's signed answers have
// their first body byte changed on the way. The reader never returns
// them complete nor caches them: a small object (filled before any
// header is sent) is read from the store, a larger one already streaming
// ends short; once the path is clean again the owner's bytes are served.
func TestOwnerAnswerTamperedOnTheWay(t *testing.T) {
	clk := clock.NewFake(time.Now())
	g := newGroup(t, 2, func(c *Config) { c.Clock = clk })
	addr := g.addrs[0]
	g.servers[0].Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", addr, err)
	}
	var clean atomic.Bool
	auth, _ := peer.NewAuth("app", []byte(appSecret), nil)
	inner := peer.NewServer(auth, g.members[0], nil)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if clean.Load() {
			inner.ServeHTTP(w, r)
			return
		}
		inner.ServeHTTP(&flipFirstByte{ResponseWriter: w}, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	small, large := object("small", 1, 3000), object("large", 1, 200<<10)
	g.put(t, "small", small)
	g.put(t, "large", large)
	got, _, err := g.read(t, 1, "large")
	if err == nil || len(got) >= len(large) {
		t.Fatalf("a tampered large answer: %d of %d bytes, err %v", len(got), len(large), err)
	}
	if e := g.members[1].cache.Peek(cache.Key{Bucket: testBucket, Object: "large"}); e != nil {
		t.Fatal("a tampered answer was cached")
	}
	// The aborted fill gives its reservation back once its goroutine
	// ends; until then a new fill of the key may be refused room (and
	// streamed through, right bytes, uncached).
	for deadline := time.Now().Add(5 * time.Second); g.members[1].Stats().Reserved != 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	// The owner is distrusted now: reads go to the store.
	g.mustRead(t, 1, "large", large, LocalMiss)
	g.mustRead(t, 1, "small", small, LocalMiss)
	if n := toFloat64(g.members[1].m.peerRefused); n != 1 {
		t.Fatalf("answers refused: %v, want 1", n)
	}
	// A small object's tampered answer fails before any header is sent:
	// the store's bytes, at once.
	clk.Advance(DistrustFor)
	g.members[1].Invalidate(testBucket, "small")
	g.mustRead(t, 1, "small", small, LocalMiss)
	if n := toFloat64(g.members[1].m.peerRefused); n != 2 {
		t.Fatalf("answers refused: %v, want 2", n)
	}
	clean.Store(true)
	clk.Advance(DistrustFor)
	g.members[1].Invalidate(testBucket, "small")
	g.mustRead(t, 1, "small", small, RemoteHit)
}
