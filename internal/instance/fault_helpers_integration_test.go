//go:build integration && linux

package instance_test

// Helpers of the fault tests (fault_integration_test.go) and of the
// durable ones: `hoard serve` processes, their members in etcd, and
// values that say which write of which key they are.

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

// metricReaches waits up to 30 s for the named metric on p to reach
// want and returns its last value. A read is counted when the cachelet
// closes its body, which may be just after the client has the last byte,
// so a count read at once can still miss the read before it.
func (p *hoardProc) metricReaches(t *testing.T, name string, want float64) float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := p.metric(t, name)
		if got >= want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	srv, etcd := startStoreAndEtcd(t, dir)
	var err error
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
