//go:build integration && linux

package instance_test

// Fault tests with real processes: three `hoard serve` cachelets of one
// application (consistency "strong"), MinIO as the store and an embedded
// etcd holding membership. TestKillDuringLoad SIGKILLs one cachelet in the
// middle of a mixed read/write load; TestCutOffCachelet freezes one
// (SIGSTOP) so that its peers cannot reach it, writes behind its back, and
// thaws it.
//
// The cachelets are the real binary: $HOARD_BIN, or <module root>/bin/hoard
// (`go build -o bin/hoard ./cmd/hoard`).

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	mcreds "github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/ring"
)

const faultPeerSecret = "fault-test-peer-secret-0123456789"

// hoardBinary returns the hoard executable the fault tests run.
func hoardBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HOARD_BIN")
	if p == "" {
		wd, err := os.Getwd()
		if err != nil {
			t.Fatal(err)
		}
		for dir := wd; ; dir = filepath.Dir(dir) {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p = filepath.Join(dir, "bin", "hoard")
				break
			}
			if filepath.Dir(dir) == dir {
				t.Fatal("no go.mod above the working directory; set $HOARD_BIN")
			}
		}
	}
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		t.Fatalf("hoard binary %s not usable (%v): build it with `go build -o bin/hoard ./cmd/hoard` or set $HOARD_BIN", p, err)
	}
	return p
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// hoardProc is one `hoard serve` child process.
type hoardProc struct {
	id                string
	s3, metrics, peer string // host:port
	logPath           string
	cmd               *exec.Cmd
	exited            chan struct{}
	waitErr           error
	client            *minio.Client
}

func (p *hoardProc) endpoint() string { return "http://" + p.s3 }

func (p *hoardProc) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

func (p *hoardProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.id, sig, err)
	}
}

// metric returns the sum of the samples of the named metric on p's
// /metrics (0 when absent).
func (p *hoardProc) metric(t *testing.T, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		t.Fatalf("%s: scrape: %v", p.id, err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// faultClient is a minio-go client that does not retry (every failure is
// seen and counted) and does not wait long for a dead endpoint.
func faultClient(t *testing.T, endpoint, ak, sk string) *minio.Client {
	t.Helper()
	tr := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
		ResponseHeaderTimeout: 15 * time.Second,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       30 * time.Second,
	}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := minio.New(strings.TrimPrefix(endpoint, "http://"), &minio.Options{
		Creds: mcreds.NewStaticV4(ak, sk, ""), Region: "us-east-1", BucketLookup: minio.BucketLookupPath,
		Transport: tr, MaxRetries: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// memberLog records every membership snapshot of an application, with the
// time it arrived, from the test's own etcd client.
type memberLog struct {
	mu    sync.Mutex
	snaps []timedSnapshot
	ttl   time.Duration
}

type timedSnapshot struct {
	at  time.Time
	ids []string
}

func watchMembers(t *testing.T, endpoints []string, app string) *memberLog {
	t.Helper()
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := reg.Watch(ctx, app)
	if err != nil {
		cancel()
		_ = reg.Close()
		t.Fatalf("watch %s: %v", app, err)
	}
	ml := &memberLog{ttl: reg.TTL()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range ch {
			ml.mu.Lock()
			ml.snaps = append(ml.snaps, timedSnapshot{at: time.Now(), ids: s.IDs()})
			ml.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = reg.Close()
		<-done
	})
	return ml
}

// waitFor returns the arrival time of the first snapshot that arrived at or
// after since and satisfies ok, waiting up to timeout for one.
func (ml *memberLog) waitFor(since time.Time, timeout time.Duration, ok func([]string) bool) (time.Time, bool) {
	deadline := time.Now().Add(timeout)
	for {
		ml.mu.Lock()
		for _, s := range ml.snaps {
			if !s.at.Before(since) && ok(s.ids) {
				ml.mu.Unlock()
				return s.at, true
			}
		}
		// The latest snapshot counts too when it already holds.
		if n := len(ml.snaps); n > 0 && ok(ml.snaps[n-1].ids) && ml.snaps[n-1].at.Before(since) {
			ml.mu.Unlock()
			return since, true
		}
		ml.mu.Unlock()
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// anyWithout reports whether a snapshot between from and to lacked id.
func (ml *memberLog) anyWithout(from, to time.Time, id string) bool {
	ml.mu.Lock()
	defer ml.mu.Unlock()
	for _, s := range ml.snaps {
		if !s.at.Before(from) && !s.at.After(to) && !slices.Contains(s.ids, id) {
			return true
		}
	}
	return false
}

// faultCluster is MinIO, an embedded etcd and n hoard processes of app.
type faultCluster struct {
	app     string
	store   *localstore.Server
	direct  *minio.Client
	members *memberLog
	procs   []*hoardProc
	ring    *ring.Ring // the ring of all procs, as every cachelet computes it
}

func newFaultCluster(t *testing.T, app string, n int) *faultCluster {
	t.Helper()
	bin := hoardBinary(t)
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)
	eps := strings.Join(etcd.Endpoints(), ",")

	fc := &faultCluster{app: app, store: srv, direct: faultClient(t, srv.Endpoint(), storeAK, storeSK)}
	fc.members = watchMembers(t, etcd.Endpoints(), app)
	var ids []string
	for i := range n {
		p := newHoardProc(t, dir, app, i)
		p.start(t, bin, app, eps, srv.Endpoint())
		p.client = faultClient(t, p.endpoint(), clientAK, clientSK)
		fc.procs = append(fc.procs, p)
		ids = append(ids, p.id)
	}
	for _, p := range fc.procs {
		fc.waitHealthy(t, p)
	}
	if _, ok := fc.members.waitFor(time.Time{}, 20*time.Second, func(got []string) bool { return slices.Equal(got, ids) }); !ok {
		t.Fatalf("etcd never listed members %v", ids)
	}
	if fc.ring, err = ring.New(ring.Config{}, ids); err != nil {
		t.Fatal(err)
	}
	// Each cachelet learns of the others through its own watch; the last
	// to join saw all at once, the others get an event within
	// milliseconds of etcd's.
	time.Sleep(300 * time.Millisecond)
	return fc
}

func (fc *faultCluster) waitHealthy(t *testing.T, p *hoardProc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	hc := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before it was ready: %v\n%s", p.id, p.waitErr, p.logTail())
		default:
		}
		resp, err := hc.Get("http://" + p.metrics + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not healthy after 30 s (last error %v)\n%s", p.id, err, p.logTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownerIndex is the index of the process owning bucket/key on the full ring.
func (fc *faultCluster) ownerIndex(bucket, key string) int {
	id := fc.ring.Owner(bucket, key)
	for i, p := range fc.procs {
		if p.id == id {
			return i
		}
	}
	return -1
}

// Self-describing values: a header line naming the key, the write's
// sequence number and the body's length and SHA-256, then the body. Any
// read can tell an intact value of its key from anything else.

func makeValue(key string, seq int64, rnd *rand.Rand) []byte {
	body := make([]byte, 512+rnd.IntN(8<<10))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	sum := sha256.Sum256(body)
	hdr := fmt.Sprintf("hoard-fault key=%s seq=%d len=%d sha256=%s\n", key, seq, len(body), hex.EncodeToString(sum[:]))
	return append([]byte(hdr), body...)
}

// checkValue returns the sequence number of v, or an error when v is not an
// intact value written to key.
func checkValue(key string, v []byte) (int64, error) {
	nl := bytes.IndexByte(v, '\n')
	if nl < 0 || nl > 512 {
		return 0, fmt.Errorf("no header line in %d bytes", len(v))
	}
	var gotKey, sum string
	var seq int64
	var n int
	if _, err := fmt.Sscanf(string(v[:nl]), "hoard-fault key=%s seq=%d len=%d sha256=%s", &gotKey, &seq, &n, &sum); err != nil {
		return 0, fmt.Errorf("bad header %q: %v", v[:nl], err)
	}
	body := v[nl+1:]
	if gotKey != key {
		return seq, fmt.Errorf("value of key %q (seq %d) returned for %q", gotKey, seq, key)
	}
	if len(body) != n {
		return seq, fmt.Errorf("seq %d: body %d bytes, header says %d", seq, len(body), n)
	}
	if s := sha256.Sum256(body); hex.EncodeToString(s[:]) != sum {
		return seq, fmt.Errorf("seq %d: body fails its SHA-256", seq)
	}
	return seq, nil
}

func putValue(ctx context.Context, c *minio.Client, bucket, key string, v []byte) error {
	_, err := c.PutObject(ctx, bucket, key, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{})
	return err
}

func getValue(ctx context.Context, c *minio.Client, bucket, key string) ([]byte, error) {
	obj, err := c.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	return io.ReadAll(obj)
}

// keyState is what the load knows of one key. Writes of a key are
// serialized (mu), so its acknowledged writes are totally ordered.
type keyState struct {
	mu      sync.Mutex
	next    int64        // sequence number of the next write
	acked   atomic.Int64 // highest acknowledged sequence number
	unknown []int64      // writes that failed: they may or may not have landed (guarded by mu)
}

// opStats counts one class of operations.
type opStats struct {
	ok, failed atomic.Int64
	first      atomic.Pointer[string] // the first failure's error
}

func (s *opStats) add(err error) {
	if err != nil {
		s.failed.Add(1)
		msg := err.Error()
		s.first.CompareAndSwap(nil, &msg)
	} else {
		s.ok.Add(1)
	}
}

func (s *opStats) String() string {
	if first := s.first.Load(); first != nil {
		return fmt.Sprintf("%d ok, %d failed (first: %s)", s.ok.Load(), s.failed.Load(), *first)
	}
	return fmt.Sprintf("%d ok, %d failed", s.ok.Load(), s.failed.Load())
}

func TestKillDuringLoad(t *testing.T) {
	const (
		app       = "faultkill"
		bucket    = "fault"
		nKeys     = 50
		nCold     = 400 // keys written behind the cache, each read once per cachelet
		workers   = 9
		loadFor   = 12 * time.Second
		killAfter = 4 * time.Second
		victim    = 2
	)
	fc := newFaultCluster(t, app, 3)
	ctx := context.Background()
	if err := fc.direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}

	// Seed: sequence 0 of every key through the cachelets, and the cold
	// keys straight into the store.
	keys := make([]string, nKeys)
	state := make([]*keyState, nKeys)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
		state[i] = &keyState{next: 1}
		if err := putValue(ctx, fc.procs[i%3].client, bucket, keys[i], makeValue(keys[i], 0, rnd)); err != nil {
			t.Fatalf("seed %s: %v", keys[i], err)
		}
	}
	var seedWG sync.WaitGroup
	seedErr := make(chan error, nCold)
	for w := range 16 {
		seedWG.Add(1)
		go func() {
			defer seedWG.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := w; i < nCold; i += 16 {
				key := fmt.Sprintf("cold-%03d", i)
				if err := putValue(ctx, fc.direct, bucket, key, makeValue(key, 0, r)); err != nil {
					seedErr <- err
					return
				}
			}
		}()
	}
	seedWG.Wait()
	close(seedErr)
	if err := <-seedErr; err != nil {
		t.Fatalf("seed cold keys: %v", err)
	}
	fallbacksBefore := make([]float64, 3)
	for i, p := range fc.procs {
		fallbacksBefore[i] = p.metric(t, "hoard_cachelet_peer_fallbacks_total")
	}

	var (
		killedAt   atomic.Pointer[time.Time]
		coldNext   [3]atomic.Int64
		violations = make(chan string, 100)
		// Before the kill; after it, through the killed endpoint (until
		// the client moves on); after it, through survivors.
		preReads, preWrites, deadReads, deadWrites, postReads, postWrites, coldReads opStats
		staleChecks                                                                  atomic.Int64
	)
	violate := func(format string, args ...any) {
		select {
		case violations <- fmt.Sprintf(format, args...):
		default:
		}
	}
	// stats classifies an operation when it ends: one in flight at the
	// kill counts as after it.
	stats := func(ep int, write bool) *opStats {
		switch {
		case killedAt.Load() == nil && write:
			return &preWrites
		case killedAt.Load() == nil:
			return &preReads
		case ep == victim && write:
			return &deadWrites
		case ep == victim:
			return &deadReads
		case write:
			return &postWrites
		}
		return &postReads
	}

	start := time.Now()
	stop := start.Add(loadFor)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w)+100, 3))
			ep := w % 3
			lastCold := time.Time{}
			for time.Now().Before(stop) {
				c := fc.procs[ep].client
				opCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
				var err error
				switch x := r.IntN(100); {
				case time.Since(lastCold) > 100*time.Millisecond:
					lastCold = time.Now()
					i := coldNext[ep].Add(1) - 1
					if i >= nCold {
						break
					}
					key := fmt.Sprintf("cold-%03d", i)
					var v []byte
					if v, err = getValue(opCtx, c, bucket, key); err == nil {
						if seq, cerr := checkValue(key, v); cerr != nil || seq != 0 {
							violate("cold read of %s through %s: seq %d, %v", key, fc.procs[ep].id, seq, cerr)
						}
					}
					if ep != victim || killedAt.Load() == nil {
						coldReads.add(err)
					}
				case x < 30:
					i := r.IntN(nKeys)
					ks := state[i]
					if !ks.mu.TryLock() {
						cancel()
						continue // another worker is writing this key
					}
					seq := ks.next
					ks.next++
					err = putValue(opCtx, c, bucket, keys[i], makeValue(keys[i], seq, r))
					if err == nil {
						ks.acked.Store(seq)
					} else {
						ks.unknown = append(ks.unknown, seq)
					}
					ks.mu.Unlock()
					stats(ep, true).add(err)
				default:
					i := r.IntN(nKeys)
					floor := state[i].acked.Load() // acknowledged before this read began
					var v []byte
					if v, err = getValue(opCtx, c, bucket, keys[i]); err == nil {
						seq, cerr := checkValue(keys[i], v)
						switch {
						case cerr != nil:
							violate("read of %s through %s: %v", keys[i], fc.procs[ep].id, cerr)
						case seq < floor:
							violate("stale read of %s through %s: seq %d, but seq %d was acknowledged before the read began", keys[i], fc.procs[ep].id, seq, floor)
						}
						staleChecks.Add(1)
					}
					stats(ep, false).add(err)
				}
				cancel()
				// A client of the killed cachelet moves to a survivor.
				if err != nil && ep == victim && killedAt.Load() != nil {
					ep = (victim + 1 + w%2) % 3
				}
			}
		}()
	}

	time.Sleep(killAfter)
	now := time.Now()
	// Marked before the signal: an operation the kill cuts may end the
	// moment the signal lands, and must count as after it.
	killedAt.Store(&now)
	fc.procs[victim].signal(t, syscall.SIGKILL)
	wg.Wait()
	elapsed := time.Since(start)

	close(violations)
	for v := range violations {
		t.Error(v)
	}

	// The killed member leaves the ring within its lease TTL.
	leftAt, ok := fc.members.waitFor(now, 2*fc.members.ttl, func(ids []string) bool {
		return !slices.Contains(ids, fc.procs[victim].id) && len(ids) == 2
	})
	if !ok {
		t.Errorf("%s still in the ring %v after the kill", fc.procs[victim].id, 2*fc.members.ttl)
	}
	leave := leftAt.Sub(now)
	// etcd expires leases on its own clock, checked every 500 ms, and the
	// revocation goes through raft: allow that on top of the TTL.
	if ok && leave > fc.members.ttl+time.Second {
		t.Errorf("%s left the ring %v after the kill; lease TTL %v", fc.procs[victim].id, leave, fc.members.ttl)
	}

	total := preReads.ok.Load() + preReads.failed.Load() + preWrites.ok.Load() + preWrites.failed.Load() +
		deadReads.ok.Load() + deadReads.failed.Load() + deadWrites.ok.Load() + deadWrites.failed.Load() +
		postReads.ok.Load() + postReads.failed.Load() + postWrites.ok.Load() + postWrites.failed.Load() +
		coldReads.ok.Load() + coldReads.failed.Load()
	postN := postReads.ok.Load() + postReads.failed.Load()
	rate := float64(postReads.ok.Load()) / float64(max(postN, 1))
	var fallbacks float64
	for i, p := range fc.procs {
		if i != victim {
			fallbacks += p.metric(t, "hoard_cachelet_peer_fallbacks_total") - fallbacksBefore[i]
		}
	}
	t.Logf("load: %d ops in %v (%d reads checked for freshness), kill at %v", total, elapsed.Round(time.Millisecond), staleChecks.Load(), killAfter)
	t.Logf("before kill: reads %v; writes %v", &preReads, &preWrites)
	t.Logf("after kill, killed endpoint: reads %v; writes %v", &deadReads, &deadWrites)
	t.Logf("after kill, survivors: reads %v (success %.2f%%); writes %v", &postReads, 100*rate, &postWrites)
	t.Logf("cold reads (routed to owners): %v; survivors' peer fallbacks after the kill: %.0f", &coldReads, fallbacks)
	t.Logf("%s left the ring %v after SIGKILL (lease TTL %v)", fc.procs[victim].id, leave.Round(time.Millisecond), fc.members.ttl)
	if preReads.failed.Load() > 0 || preWrites.failed.Load() > 0 {
		t.Errorf("operations failed before any fault: reads %v, writes %v", &preReads, &preWrites)
	}
	if postN < 100 {
		t.Errorf("only %d reads through survivors after the kill", postN)
	}
	if rate < 0.95 {
		t.Errorf("read success on survivors after the kill %.2f%%, want >= 95%%", 100*rate)
	}

	// No acknowledged write is lost: every key reads back, through every
	// survivor and straight from the store, as its last acknowledged
	// write (or a later write whose answer was lost with the victim).
	readers := []struct {
		name string
		c    *minio.Client
	}{{"store", fc.direct}}
	for i, p := range fc.procs {
		if i != victim {
			readers = append(readers, struct {
				name string
				c    *minio.Client
			}{p.id, p.client})
		}
	}
	unknownTotal := 0
	for i, key := range keys {
		ks := state[i]
		acked := ks.acked.Load()
		unknownTotal += len(ks.unknown)
		for _, rd := range readers {
			v, err := getValue(ctx, rd.c, bucket, key)
			if err != nil {
				t.Errorf("final read of %s through %s: %v", key, rd.name, err)
				continue
			}
			seq, err := checkValue(key, v)
			switch {
			case err != nil:
				t.Errorf("final read of %s through %s: %v", key, rd.name, err)
			case seq == acked:
			case seq > acked && slices.Contains(ks.unknown, seq):
				t.Logf("%s through %s: seq %d, a write whose answer was lost (last acknowledged %d)", key, rd.name, seq, acked)
			default:
				t.Errorf("final read of %s through %s: seq %d, last acknowledged write %d (unanswered: %v)", key, rd.name, seq, acked, ks.unknown)
			}
		}
	}
	t.Logf("final check: %d keys x %d readers; %d writes went unanswered", nKeys, len(readers), unknownTotal)
}

func TestCutOffCachelet(t *testing.T) {
	const (
		app    = "faultcut"
		bucket = "cut"
		nKeys  = 24
		nCold  = 16 // per survivor: keys the frozen cachelet owns, never read before
		cut    = 2
		// Shorter than the lease TTL (5 s) less a keep-alive interval
		// (TTL/3), so the frozen cachelet's lease survives: its peers keep
		// routing to it.
		pause = 2500 * time.Millisecond
	)
	fc := newFaultCluster(t, app, 3)
	ctx := context.Background()
	if err := fc.direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		t.Fatalf("make bucket: %v", err)
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	survivors := []int{(cut + 1) % 3, (cut + 2) % 3}
	frozen := fc.procs[cut]

	// Version 1 of every key through cachelet 0, read through all three:
	// every cachelet holds a copy.
	keys := make([]string, nKeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
		if err := putValue(ctx, fc.procs[0].client, bucket, keys[i], makeValue(keys[i], 1, rnd)); err != nil {
			t.Fatalf("put %s: %v", keys[i], err)
		}
	}
	owned := 0
	for _, key := range keys {
		if fc.ownerIndex(bucket, key) == cut {
			owned++
		}
		for _, p := range fc.procs {
			v, err := getValue(ctx, p.client, bucket, key)
			if err != nil {
				t.Fatalf("get %s through %s: %v", key, p.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != 1 {
				t.Fatalf("get %s through %s: seq %d, %v", key, p.id, seq, err)
			}
		}
	}
	// Cold keys the frozen cachelet owns, written behind the cache.
	var cold [][]string
	for range survivors {
		cold = append(cold, nil)
	}
	for i, n := 0, 0; n < nCold*len(survivors); i++ {
		key := fmt.Sprintf("cold-%04d", i)
		if fc.ownerIndex(bucket, key) != cut {
			continue
		}
		if err := putValue(ctx, fc.direct, bucket, key, makeValue(key, 1, rnd)); err != nil {
			t.Fatal(err)
		}
		cold[n%len(survivors)] = append(cold[n%len(survivors)], key)
		n++
	}
	fallbacksBefore := map[int]float64{}
	for _, s := range survivors {
		fallbacksBefore[s] = fc.procs[s].metric(t, "hoard_cachelet_peer_fallbacks_total")
	}

	frozen.signal(t, syscall.SIGSTOP)
	frozenAt := time.Now()
	thawed := false
	defer func() {
		if !thawed {
			_ = frozen.cmd.Process.Signal(syscall.SIGCONT)
		}
	}()

	// Cold reads through the survivors of keys the frozen cachelet owns:
	// their misses go to it.
	type coldResult struct {
		key, via string
		took     time.Duration
		err      error
	}
	coldCh := make(chan coldResult, nCold*len(survivors))
	var coldWG sync.WaitGroup
	for si, s := range survivors {
		for _, key := range cold[si] {
			coldWG.Add(1)
			go func() {
				defer coldWG.Done()
				rctx, cancel := context.WithTimeout(ctx, 45*time.Second)
				defer cancel()
				t0 := time.Now()
				v, err := getValue(rctx, fc.procs[s].client, bucket, key)
				res := coldResult{key: key, via: fc.procs[s].id, took: time.Since(t0), err: err}
				if err == nil {
					if seq, cerr := checkValue(key, v); cerr != nil || seq != 1 {
						res.err = fmt.Errorf("seq %d: %v", seq, cerr)
						t.Errorf("cold read of %s through %s while %s is frozen: wrong value: %v", key, res.via, frozen.id, res.err)
					}
				}
				coldCh <- res
			}()
		}
	}

	// Meanwhile the survivors serve the keys they hold: version 2 of every
	// key is written through them, and read back through both.
	var maxOp time.Duration
	timed := func(f func() error) error {
		t0 := time.Now()
		err := f()
		maxOp = max(maxOp, time.Since(t0))
		return err
	}
	for i, key := range keys {
		c := fc.procs[survivors[i%2]].client
		v := makeValue(key, 2, rnd)
		if err := timed(func() error {
			octx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return putValue(octx, c, bucket, key, v)
		}); err != nil {
			t.Fatalf("put %s v2 while %s is frozen: %v", key, frozen.id, err)
		}
	}
	hotReads := 0
	for _, key := range keys {
		for _, s := range survivors {
			var v []byte
			err := timed(func() error {
				octx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				var err error
				v, err = getValue(octx, fc.procs[s].client, bucket, key)
				return err
			})
			if err != nil {
				t.Fatalf("get %s through %s while %s is frozen: %v", key, fc.procs[s].id, frozen.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != 2 {
				t.Fatalf("get %s through %s while %s is frozen: seq %d (want 2), %v", key, fc.procs[s].id, frozen.id, seq, err)
			}
			hotReads++
		}
	}
	frozenWork := time.Since(frozenAt)
	if frozenWork > pause {
		t.Logf("note: writes and reads on the survivors took %v, longer than the pause", frozenWork)
	}
	time.Sleep(time.Until(frozenAt.Add(pause)))
	frozen.signal(t, syscall.SIGCONT)
	thawed = true
	thawedAt := time.Now()

	coldWG.Wait()
	close(coldCh)
	var coldOK, coldFailed int
	var coldMax time.Duration
	for r := range coldCh {
		coldMax = max(coldMax, r.took)
		if r.err != nil {
			coldFailed++
			t.Logf("cold read of %s through %s: %v after %v", r.key, r.via, r.err, r.took)
		} else {
			coldOK++
		}
	}
	var fallbacks float64
	for _, s := range survivors {
		fallbacks += fc.procs[s].metric(t, "hoard_cachelet_peer_fallbacks_total") - fallbacksBefore[s]
	}

	// Thawed, the cachelet serves the current version of every key, never
	// the version 1 it held when it was frozen.
	for _, key := range keys {
		octx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := getValue(octx, frozen.client, bucket, key)
		cancel()
		if err != nil {
			t.Fatalf("get %s through thawed %s: %v", key, frozen.id, err)
		}
		if seq, err := checkValue(key, v); err != nil || seq != 2 {
			t.Errorf("get %s through thawed %s: seq %d (want 2: written while it was frozen), %v", key, frozen.id, seq, err)
		}
	}
	// And its writes reach the others.
	for i, key := range keys {
		if i%2 == 1 {
			continue
		}
		if err := putValue(ctx, frozen.client, bucket, key, makeValue(key, 3, rnd)); err != nil {
			t.Fatalf("put %s v3 through thawed %s: %v", key, frozen.id, err)
		}
	}
	for i, key := range keys {
		want := int64(2)
		if i%2 == 0 {
			want = 3
		}
		for _, p := range fc.procs {
			v, err := getValue(ctx, p.client, bucket, key)
			if err != nil {
				t.Fatalf("get %s through %s after the thaw: %v", key, p.id, err)
			}
			if seq, err := checkValue(key, v); err != nil || seq != want {
				t.Errorf("get %s through %s after the thaw: seq %d (want %d), %v", key, p.id, seq, want, err)
			}
		}
	}

	leftRing := fc.members.anyWithout(frozenAt, time.Now(), frozen.id)
	t.Logf("%s frozen %v (it owns %d of %d keys); survivors: %d writes and %d reads of held keys, all current, slowest %v",
		frozen.id, thawedAt.Sub(frozenAt).Round(time.Millisecond), owned, nKeys, nKeys, hotReads, maxOp.Round(time.Millisecond))
	t.Logf("cold reads of keys %s owns through survivors: %d ok, %d failed, slowest %v; survivors' peer fallbacks: %.0f; left the ring meanwhile: %v",
		frozen.id, coldOK, coldFailed, coldMax.Round(time.Millisecond), fallbacks, leftRing)
	// A stuck owner costs a read the peer fetch timeout (2 s), then the
	// store answers: reads do not wait for the owner to thaw.
	if coldMax >= pause {
		t.Errorf("a cold read took %v, as long as %s was frozen (%v): it waited instead of falling back", coldMax, frozen.id, pause)
	}
	if fallbacks == 0 {
		t.Errorf("no read of a key the frozen %s owns fell back to the store", frozen.id)
	}
}

// newHoardProc allocates the ports and log file of cachelet i of app.
func newHoardProc(t *testing.T, dir, app string, i int) *hoardProc {
	t.Helper()
	return &hoardProc{
		id: fmt.Sprintf("%s-%d", app, i), s3: freeAddr(t), metrics: freeAddr(t), peer: freeAddr(t),
		logPath: filepath.Join(dir, fmt.Sprintf("hoard-%d.log", i)), exited: make(chan struct{}),
	}
}

// start runs `hoard serve` for p, joined to app through etcd at eps, in
// front of the store at storeEndpoint; extra flags are appended. It
// returns once the process has bound its listeners and joined (its
// --ready-file written). Its addresses were free when picked, not when
// the process binds them: another process may take one in between, so a
// start that fails to bind is tried again on fresh addresses (the peer
// address kept where --peer-advertise names a proxy to it). The child
// dies with the test binary and is killed at cleanup (its log printed if
// the test failed).
func (p *hoardProc) start(t *testing.T, bin, app, eps, storeEndpoint string, extra ...string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		if p.launch(t, bin, app, eps, storeEndpoint, extra...) {
			return
		}
		if attempt == 3 || !strings.Contains(p.logTail(), "address already in use") {
			t.Fatalf("%s exited before it was ready: %v\n%s", p.id, p.waitErr, p.logTail())
		}
		t.Logf("%s: an address was taken before it bound it; starting again on fresh ones", p.id)
		p.s3, p.metrics = freeAddr(t), freeAddr(t)
		if !slices.Contains(extra, "--peer-advertise") {
			p.peer = freeAddr(t)
		}
	}
}

// launch starts one attempt of p and waits until it is ready (true) or
// has exited (false).
func (p *hoardProc) launch(t *testing.T, bin, app, eps, storeEndpoint string, extra ...string) bool {
	t.Helper()
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	ready := p.logPath + ".ready"
	_ = os.Remove(ready)
	args := append([]string{"serve",
		"--listen", p.s3, "--metrics-listen", p.metrics, "--peer-listen", p.peer, "--ready-file", ready,
		"--app", app, "--id", p.id, "--etcd-endpoints", eps, "--consistency", "strong",
		"--store-endpoint", storeEndpoint, "--budget", "64MiB", "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	// Secrets through the environment, as in production.
	cmd.Env = append(os.Environ(),
		"HOARD_ACCESS_KEY="+clientAK, "HOARD_SECRET_KEY="+clientSK,
		"HOARD_STORE_ACCESS_KEY="+storeAK, "HOARD_STORE_SECRET_KEY="+storeSK,
		"HOARD_PEER_SECRET="+faultPeerSecret)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A test binary that dies takes its cachelets with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start %s: %v", p.id, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	go func() {
		p.waitErr = cmd.Wait()
		logf.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("%s log tail:\n%s", p.id, p.logTail())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(ready); err == nil {
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready after 30 s\n%s", p.id, p.logTail())
		}
	}
}
