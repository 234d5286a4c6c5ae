//go:build integration && linux

package instance_test

// A network partition with real processes: three `hoard serve` cachelets
// of one application (consistency "strong"), MinIO as the store and an
// embedded etcd holding membership, each cachelet advertising
// (--peer-advertise) a peer address that is a TCP proxy run by the test in
// front of its real peer listener. Cutting a cachelet's proxy cuts it off
// from its peers while it keeps reaching etcd, the store and the others:
// its lease lives, so the others keep routing its keys to it and must fall
// back to the store.
//
// Helpers shared with the fault tests (hoardBinary, hoardProc, faultClient,
// makeValue, ...) live in fault_integration_test.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/minio-go/v7"

	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/ring"
)

// peerProxy forwards TCP connections from its own address to a cachelet's
// peer listener. cut closes its listener (new connections are refused)
// and every connection it carries; heal listens again on the same address.
type peerProxy struct {
	addr, target string

	mu       sync.Mutex
	ln       net.Listener
	isCut    bool
	conns    map[net.Conn]struct{}
	accepted atomic.Int64
	wg       sync.WaitGroup // the accept loop and the copiers
}

func startPeerProxy(t *testing.T, target string) *peerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *peerProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln, p.isCut = ln, false
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
}

// track registers c unless the proxy is cut, in which case it closes c.
func (p *peerProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isCut {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *peerProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *peerProxy) forward(in net.Conn) {
	if !p.track(in) {
		return
	}
	out, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		p.untrack(in)
		return
	}
	if !p.track(out) {
		p.untrack(in)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done // either side ending ends both
	p.untrack(in, out)
	<-done
}

// cut refuses new connections and closes those in flight. Idempotent.
func (p *peerProxy) cut() {
	p.mu.Lock()
	if p.isCut {
		p.mu.Unlock()
		return
	}
	p.isCut = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// heal listens on the proxy's address again.
func (p *peerProxy) heal(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy: listen again on %s: %v", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// partitionCluster is a faultCluster whose cachelets advertise proxies.
type partitionCluster struct {
	*faultCluster
	proxies []*peerProxy
	etcd    []string
	s3      []*s3v2.Client // per cachelet, no retries: every failure is seen
}

func newPartitionCluster(t *testing.T, app string, n int) *partitionCluster {
	t.Helper()
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv, etcd := startStoreAndEtcd(t, dir)
	var err error
	eps := strings.Join(etcd.Endpoints(), ",")

	pc := &partitionCluster{
		faultCluster: &faultCluster{app: app, store: srv, direct: faultClient(t, srv.Endpoint(), storeAK, storeSK)},
		etcd:         etcd.Endpoints(),
	}
	pc.members = watchMembers(t, etcd.Endpoints(), app)
	var ids []string
	for i := range n {
		p := newHoardProc(t, dir, app, i)
		px := startPeerProxy(t, p.peer)
		p.start(t, bin, app, eps, srv.Endpoint(), "--peer-advertise", px.addr)
		p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
		pc.procs = append(pc.procs, p)
		pc.proxies = append(pc.proxies, px)
		pc.s3 = append(pc.s3, s3v2.New(s3v2.Options{
			BaseEndpoint: aws.String(p.endpoint()), Region: "us-east-1", UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(clientAK, clientSK, ""),
			Retryer:     aws.NopRetryer{},
		}))
		ids = append(ids, p.id)
	}
	for _, p := range pc.procs {
		pc.waitHealthy(t, p)
	}
	if _, ok := pc.members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, ids) }); !ok {
		t.Fatalf("etcd never listed members %v", ids)
	}
	if pc.ring, err = ring.New(ring.Config{}, ids); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // each cachelet's own watch catches up
	return pc
}

// advertised returns the peer address each member published, by ID.
func (pc *partitionCluster) advertised(t *testing.T) map[string]string {
	t.Helper()
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: pc.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := reg.Watch(ctx, pc.app)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-ch:
		out := map[string]string{}
		for _, m := range s.Members {
			out[m.ID] = m.PeerAddr
		}
		return out
	case <-ctx.Done():
		t.Fatal("no membership snapshot")
	}
	return nil
}

// readResult is one GET through a cachelet.
type readResult struct {
	data   []byte
	read   string // x-hoard-read
	status int    // HTTP status of a failed read (0: not an HTTP error)
	took   time.Duration
	err    error
}

// read GETs bucket/key through cachelet i once (no retries).
func (pc *partitionCluster) read(ctx context.Context, i int, bucket, key string) readResult {
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := pc.s3[i].GetObject(rctx, &s3v2.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	var r readResult
	if err == nil {
		r.data, err = io.ReadAll(out.Body)
		out.Body.Close()
		if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
			r.read = raw.Header.Get("X-Hoard-Read")
		}
	}
	r.took, r.err = time.Since(t0), err
	var sc interface{ HTTPStatusCode() int }
	if err != nil && errors.As(err, &sc) {
		r.status = sc.HTTPStatusCode()
	}
	return r
}

func TestPartitionedCachelet(t *testing.T) {
	const (
		app    = "partition"
		bucket = "part"
		nKeys  = 30
		nCold  = 8 // keys the cut cachelet owns, new during the cut: written through a peer, and behind the cache
		cut    = 2
		// A refused connection fails in microseconds; a read that falls
		// back must not come near the peer fetch timeout (2 s).
		maxFallbackRead = time.Second
	)
	testStart := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pc := newPartitionCluster(t, app, 3)
	setupTook := time.Since(testStart)
	if err := pc.direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	adv := pc.advertised(t)
	for i, p := range pc.procs {
		if adv[p.id] != pc.proxies[i].addr {
			t.Fatalf("%s advertises peer address %q, want its proxy %s (listener %s)", p.id, adv[p.id], pc.proxies[i].addr, p.peer)
		}
	}
	rnd := rand.New(rand.NewPCG(5, 6))
	others := []int{(cut + 1) % 3, (cut + 2) % 3}
	want := map[string]int64{} // key -> the sequence number every read must return

	// check reads key through cachelet i and fails on anything but its
	// current value.
	check := func(phase string, i int, key string) readResult {
		t.Helper()
		r := pc.read(ctx, i, bucket, key)
		if r.err != nil {
			t.Fatalf("%s: get %s through %s: %v (after %v)", phase, key, pc.procs[i].id, r.err, r.took)
		}
		if seq, err := checkValue(key, r.data); err != nil || seq != want[key] {
			t.Fatalf("%s: get %s through %s: seq %d (want %d), %v", phase, key, pc.procs[i].id, seq, want[key], err)
		}
		return r
	}
	put := func(phase string, c *minio.Client, via, key string, seq int64) {
		t.Helper()
		octx, ocancel := context.WithTimeout(ctx, 10*time.Second)
		defer ocancel()
		if err := putValue(octx, c, bucket, key, makeValue(key, seq, rnd)); err != nil {
			t.Fatalf("%s: put %s seq %d through %s: %v", phase, key, seq, via, err)
		}
		want[key] = seq
	}

	// Warm: version 1 of every key through the cachelets in turn, read
	// through all three, so that every cachelet holds every key.
	keys := make([]string, nKeys)
	var cutOwns []string
	warmReads := map[string]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
		put("warm", pc.procs[i%3].client, pc.procs[i%3].id, keys[i], 1)
		if pc.ownerIndex(bucket, keys[i]) == cut {
			cutOwns = append(cutOwns, keys[i])
		}
	}
	for _, key := range keys {
		for i := range pc.procs {
			warmReads[check("warm", i, key).read]++
		}
	}
	if len(cutOwns) == 0 {
		t.Fatalf("%s owns none of the %d keys", pc.procs[cut].id, nKeys)
	}
	for i, px := range pc.proxies {
		if px.accepted.Load() == 0 {
			t.Fatalf("no peer connection went through %s's proxy while warming: peers do not dial the advertised address", pc.procs[i].id)
		}
	}
	t.Logf("warm: %d keys (%s owns %d), reads %v; peer connections through the proxies %d/%d/%d",
		nKeys, pc.procs[cut].id, len(cutOwns), warmReads, pc.proxies[0].accepted.Load(), pc.proxies[1].accepted.Load(), pc.proxies[2].accepted.Load())

	// Cold keys the cut cachelet owns, that nobody holds yet.
	var fresh, behind []string // written through a peer during the cut; written to the store during the cut
	for i := 0; len(fresh)+len(behind) < 2*nCold; i++ {
		key := fmt.Sprintf("cold-%04d", i)
		if pc.ownerIndex(bucket, key) != cut {
			continue
		}
		if len(fresh) < nCold {
			fresh = append(fresh, key)
		} else {
			behind = append(behind, key)
		}
	}

	fallbacksBefore := map[int]float64{}
	for _, o := range others {
		fallbacksBefore[o] = pc.procs[o].metric(t, "hoard_cachelet_peer_fallbacks_total")
	}

	// Cut the cachelet off from its peers.
	pc.proxies[cut].cut()
	cutAt := time.Now()
	acceptedAtCut := pc.proxies[cut].accepted.Load()
	if c, err := net.DialTimeout("tcp", pc.proxies[cut].addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s's proxy still accepts connections after the cut", pc.procs[cut].id)
	}

	// Writes through the others succeed: version 2 of every key, and the
	// fresh keys; the behind keys go straight to the store.
	var maxWrite time.Duration
	for i, key := range keys {
		o := others[i%2]
		t0 := time.Now()
		put("cut", pc.procs[o].client, pc.procs[o].id, key, 2)
		maxWrite = max(maxWrite, time.Since(t0))
	}
	for _, key := range fresh {
		t0 := time.Now()
		put("cut", pc.procs[others[0]].client, pc.procs[others[0]].id, key, 1)
		maxWrite = max(maxWrite, time.Since(t0))
	}
	for _, key := range behind {
		put("cut", pc.direct, "the store", key, 1)
	}
	// The cut cachelet still writes (it reaches the store): version 3 of
	// every fifth key, which the others must then serve.
	for i := 0; i < nKeys; i += 5 {
		put("cut", pc.procs[cut].client, pc.procs[cut].id, keys[i], 3)
	}

	// Reads through the others of the keys the cut cachelet owns: current,
	// and fast. Warm keys are confirmed with the store (no peer involved
	// under strong); cold ones go to the owner, are refused, and fall back.
	var (
		cutReads     []time.Duration
		fbReads      []time.Duration // the cold reads among them, which fall back
		coldExpected = map[int]int{} // reads expected to fall back, per cachelet
		cutOutcomes  = map[string]int{}
	)
	for _, o := range others {
		for gi, group := range [][]string{cutOwns, fresh, behind} {
			for _, key := range group {
				r := check("cut", o, key)
				cutReads = append(cutReads, r.took)
				if gi == 2 || (gi == 1 && o != others[0]) {
					fbReads = append(fbReads, r.took)
				}
				cutOutcomes[r.read]++
				if r.took > maxFallbackRead {
					t.Errorf("cut: get %s through %s took %v (owner %s unreachable; want well under the 2 s peer fetch timeout)", key, pc.procs[o].id, r.took, pc.procs[cut].id)
				}
			}
		}
		coldExpected[o] = len(behind)
		if o != others[0] { // others[0] wrote the fresh keys and holds them
			coldExpected[o] += len(fresh)
		}
	}
	fallbacks := map[int]float64{}
	for _, o := range others {
		fallbacks[o] = pc.procs[o].metric(t, "hoard_cachelet_peer_fallbacks_total") - fallbacksBefore[o]
		if fallbacks[o] < float64(coldExpected[o]) {
			t.Errorf("cut: %s counted %.0f peer fallbacks, want at least %d (its cold reads of keys %s owns)", pc.procs[o].id, fallbacks[o], coldExpected[o], pc.procs[cut].id)
		}
	}

	// Reads through the cut cachelet: current data, or a clear 503;
	// never stale or wrong bytes.
	var cutSelf []time.Duration
	selfOK, self503 := 0, 0
	for _, group := range [][]string{keys, fresh, behind} {
		for _, key := range group {
			r := pc.read(ctx, cut, bucket, key)
			cutSelf = append(cutSelf, r.took)
			switch {
			case r.err == nil:
				if seq, err := checkValue(key, r.data); err != nil || seq != want[key] {
					t.Errorf("cut: get %s through cut-off %s: seq %d (want %d), %v", key, pc.procs[cut].id, seq, want[key], err)
				}
				selfOK++
			case r.status == http.StatusServiceUnavailable:
				self503++
			default:
				t.Errorf("cut: get %s through cut-off %s: %v (status %d), want current data or 503", key, pc.procs[cut].id, r.err, r.status)
			}
		}
	}
	if n := pc.proxies[cut].accepted.Load(); n != acceptedAtCut {
		t.Errorf("%s's proxy accepted %d connections while cut", pc.procs[cut].id, n-acceptedAtCut)
	}
	cutFor := time.Since(cutAt)
	if pc.members.anyWithout(cutAt, time.Now(), pc.procs[cut].id) {
		t.Errorf("%s left the ring while cut off from its peers (its etcd session should have lived)", pc.procs[cut].id)
	}

	// Heal.
	pc.proxies[cut].heal(t)
	acceptedAtHeal := pc.proxies[cut].accepted.Load()

	// All three serve current data.
	for _, group := range [][]string{keys, fresh, behind} {
		for _, key := range group {
			for i := range pc.procs {
				check("healed", i, key)
			}
		}
	}
	// Remote hits resume: keys the healed cachelet owns, written through
	// it (it keeps a copy), read through the others.
	healOutcomes := map[string]int{}
	for i, n := 0, 0; n < 6; i++ {
		key := fmt.Sprintf("heal-%04d", i)
		if pc.ownerIndex(bucket, key) != cut {
			continue
		}
		n++
		put("healed", pc.procs[cut].client, pc.procs[cut].id, key, 1)
		for _, o := range others {
			r := check("healed", o, key)
			healOutcomes[r.read]++
			if r.read != "remote_hit" {
				t.Errorf("healed: get %s through %s: x-hoard-read %q, want remote_hit from its owner %s", key, pc.procs[o].id, r.read, pc.procs[cut].id)
			}
		}
	}
	if pc.proxies[cut].accepted.Load() == acceptedAtHeal {
		t.Errorf("no peer connection reached %s after the heal", pc.procs[cut].id)
	}

	slices.Sort(cutReads)
	slices.Sort(cutSelf)
	slices.Sort(fbReads)
	total := time.Since(testStart)
	t.Logf("setup %v; cut for %v; slowest write through a peer while cut %v", setupTook.Round(time.Millisecond), cutFor.Round(time.Millisecond), maxWrite.Round(time.Millisecond))
	t.Logf("cut: %d reads through %s/%s of keys %s owns, all current: p50 %v, max %v; outcomes %v",
		len(cutReads), pc.procs[others[0]].id, pc.procs[others[1]].id, pc.procs[cut].id,
		cutReads[len(cutReads)/2].Round(time.Microsecond), cutReads[len(cutReads)-1].Round(time.Microsecond), cutOutcomes)
	t.Logf("cut: peer fallbacks %s %.0f (cold reads %d), %s %.0f (cold reads %d); the %d cold reads: p50 %v, max %v",
		pc.procs[others[0]].id, fallbacks[others[0]], coldExpected[others[0]], pc.procs[others[1]].id, fallbacks[others[1]], coldExpected[others[1]],
		len(fbReads), fbReads[len(fbReads)/2].Round(time.Microsecond), fbReads[len(fbReads)-1].Round(time.Microsecond))
	t.Logf("cut: %d reads through cut-off %s: %d current, %d 503; p50 %v, max %v",
		len(cutSelf), pc.procs[cut].id, selfOK, self503, cutSelf[len(cutSelf)/2].Round(time.Microsecond), cutSelf[len(cutSelf)-1].Round(time.Microsecond))
	t.Logf("healed: all %d keys current through all three; reads of keys %s cached, through the others: %v; test took %v",
		len(keys)+len(fresh)+len(behind), pc.procs[cut].id, healOutcomes, total.Round(time.Millisecond))
	if total > 60*time.Second {
		t.Errorf("the test took %v, want under 60 s", total)
	}
}
