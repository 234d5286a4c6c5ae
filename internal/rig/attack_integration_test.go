//go:build integration

package rig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/membership"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/peer"
	"github.com/hoard-io/hoard/internal/sandbox"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// attempt is one thing the attacker tried, and whether it got what it
// wanted. Data is whatever it read, searched for secrets.
type attempt struct {
	Group   string `json:"group"`
	Attempt string `json:"attempt"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail"`
	Data    string `json:"data"`
}

// attackLog collects the attempts of TestAttacker and prints them as a
// table.
type attackLog struct {
	rows []attempt
}

func (l *attackLog) add(group, name string, ok bool, detail string) {
	l.rows = append(l.rows, attempt{Group: group, Attempt: name, OK: ok, Detail: detail})
}

// refusedBy records an attempt that must fail: it succeeded when err is
// nil.
func (l *attackLog) refusedBy(group, name string, err error) {
	if err == nil {
		l.add(group, name, true, "succeeded")
		return
	}
	l.add(group, name, false, err.Error())
}

func (l *attackLog) succeeded() (n int) {
	for _, r := range l.rows {
		if r.OK {
			n++
		}
	}
	return n
}

// print logs the table: per group, every attempt and its outcome, then
// the totals.
func (l *attackLog) print(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-28s %-52s %-9s %s\n", "group", "attempt", "outcome", "detail")
	type count struct{ refused, succeeded int }
	groups := map[string]*count{}
	var order []string
	for _, r := range l.rows {
		c := groups[r.Group]
		if c == nil {
			c = &count{}
			groups[r.Group] = c
			order = append(order, r.Group)
		}
		outcome := "refused"
		if r.OK {
			outcome = "SUCCEEDED"
			c.succeeded++
		} else {
			c.refused++
		}
		detail := strings.ReplaceAll(r.Detail, "\n", " ")
		if len(detail) > 70 {
			detail = detail[:70] + "..."
		}
		fmt.Fprintf(&b, "%-28s %-52s %-9s %s\n", r.Group, r.Attempt, outcome, detail)
	}
	fmt.Fprintf(&b, "\n%-28s %8s %8s %9s\n", "group", "attempts", "refused", "succeeded")
	total := count{}
	for _, g := range order {
		c := groups[g]
		fmt.Fprintf(&b, "%-28s %8d %8d %9d\n", g, c.refused+c.succeeded, c.refused, c.succeeded)
		total.refused += c.refused
		total.succeeded += c.succeeded
	}
	fmt.Fprintf(&b, "%-28s %8d %8d %9d\n", "total", total.refused+total.succeeded, total.refused, total.succeeded)
	t.Log(b.String())
}

// TestAttacker is the whole threat model in one run (docs/security.md):
// one platform as `hoard up` runs it, applications A (ta) and B (tb)
// deployed through the controller's API, and B hostile. B's function
// (testdata/attack/tb/attack.py) attacks from inside its jail: A's
// objects and buckets and the platform's bucket through its own cachelet,
// its keys at A's cachelet and at the store, /proc of other processes,
// the state directory, the ports of etcd, the controller, the agent, the
// store and A's cachelet, and its jail's limits. Then the test, standing
// where B would be if it escaped its jail with what its cachelet holds,
// tries B's store identity straight at the store, B's keys and peer
// secret at A's cachelet, a replayed peer request, B's application token
// at the controller and the agent, and an etcd user of B's at A's ring.
// Last, from the admin's position, it plants rogue members in A's ring
// that answer A's cachelet with wrong bytes or with a genuine signed
// answer replayed for another key. Every attempt must be refused, no
// secret of the platform or of A may appear in anything B read, no read
// of A may return bytes the store does not hold, and A's data must be
// byte-identical afterwards.
func TestAttacker(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	log := &attackLog{}

	// A's data.
	for _, b := range []string{"ta-data", "tb-data"} {
		if err := e.st.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	e.put(t, "ta-data", "secret.txt", "A's secret")
	const rogueKeys = 72
	var keys []string
	for i := range rogueKeys {
		key := fmt.Sprintf("r/%02d", i)
		e.put(t, "ta-data", key, string(objectBytes(key, attackObjectSize)))
		keys = append(keys, key)
	}
	e.put(t, "ta-data", "replay-src", string(objectBytes("replay-src", attackObjectSize)))

	// A and B, deployed as `hoard deploy` does: a package, posted to the
	// controller's API with the admin token.
	admin := api.NewControllerClient(e.p.ControllerURL, e.cfg.ControllerToken, nil)
	deployDir(t, admin, "testdata/attack/ta")
	deployDir(t, admin, "testdata/attack/tb")
	var pkgKey string
	for _, a := range e.p.Controller.Apps() {
		if a.Name == "ta" {
			pkgKey = "apps/ta/" + a.Rev + ".tar.gz"
		}
	}
	const metaKey = "meta/ta/20260101T000000Z-ta-1.json"
	e.put(t, "hoard-platform", metaKey, `{"objects": []}`)
	before := snapshot(t, e.st, "ta-data", "hoard-platform")

	readA := func(keys []string) map[string]string {
		t.Helper()
		ev, _ := json.Marshal(map[string]any{"bucket": "ta-data", "keys": keys})
		rec, err := admin.Invoke(ctx, "ta", "read", ev)
		if err != nil || !rec.OK {
			t.Fatalf("A's read: %v %+v", err, rec)
		}
		out := map[string]string{}
		if err := json.Unmarshal(rec.Result, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := readA([]string{"secret.txt"}); got["secret.txt"] != sha256Hex([]byte("A's secret")) {
		t.Fatalf("A reads its own object: %v", got)
	}
	if rec, err := admin.Invoke(ctx, "tb", "noop", []byte("{}")); err != nil || !rec.OK {
		t.Fatalf("B: %v %+v", err, rec)
	}
	byApp := map[string]api.InstanceInfo{}
	for _, in := range e.p.Agent.Instances() {
		byApp[in.App] = in
	}
	a, b := byApp["ta"], byApp["tb"]
	if a.ID == "" || b.ID == "" {
		t.Fatalf("instances %+v", byApp)
	}
	// Four uids, none root: A's function, A's cachelet, B's, B's.
	fnA, cacheletA := e.p.Agent.Instance(a.ID).UIDs()
	fnB, cacheletB := e.p.Agent.Instance(b.ID).UIDs()
	if uids := []int{fnA, cacheletA, fnB, cacheletB}; slices.Contains(uids, 0) || len(slices.Compact(slices.Sorted(slices.Values(uids)))) != 4 {
		t.Errorf("uids of A's function and cachelet, B's function and cachelet: %v; want 4 distinct unprivileged uids", uids)
	}
	credsA, err := e.p.Controller.Credentials("ta")
	if err != nil {
		t.Fatal(err)
	}
	credsB, err := e.p.Controller.Credentials("tb")
	if err != nil {
		t.Fatal(err)
	}
	storeA, storeB := storeKeys(t, e, "ta"), storeKeys(t, e, "tb")
	// The secrets: none may appear in anything B reads. B's own
	// application keys are its function's by design and not among them.
	secrets := map[string]string{
		"the store's root secret": e.cfg.StoreSecretKey, "the admin token": e.cfg.ControllerToken,
		"the agent token": e.cfg.AgentToken, "the store events token": testEventsToken,
		"etcd's root password": e.cfg.EtcdCredentials.Password,
		"A's secret key":       credsA.SecretKey, "A's peer secret": credsA.PeerSecret, "A's application token": credsA.PlatformToken,
		"A's store secret": storeA.SecretKey, "B's store secret": storeB.SecretKey,
		"B's peer secret": credsB.PeerSecret, "B's application token": credsB.PlatformToken,
		"A's object": "A's secret",
	}

	// 1. From inside B's jail.
	agentDir := filepath.Join(e.cfg.Dir, "agent")
	report := attackFromJail(t, admin, map[string]any{
		"victim": "ta-data", "own": "tb-data", "package": pkgKey, "meta": metaKey, "forks": 2000,
		"syscalls": sandbox.DeniedSyscalls(),
		"endpoints": map[string]string{
			"A's cachelet": hostPort(t, a.Endpoint), "the store": hostPort(t, e.minio.Endpoint()),
		},
		"host_pids": map[string]int{
			"the controller, agent and etcd": os.Getpid(), "A's cachelet": e.p.Agent.Instance(a.ID).CacheletPID(), "its own cachelet": e.p.Agent.Instance(b.ID).CacheletPID(),
		},
		"paths": map[string]string{
			"the state directory": e.cfg.Dir, "the agent's directory": agentDir,
			"the instances": filepath.Join(agentDir, "instances"), "A's instance": filepath.Join(agentDir, "instances", a.ID),
			"its own instance": filepath.Join(agentDir, "instances", b.ID), "the code packages": filepath.Join(agentDir, "code"),
			"credentials.json": filepath.Join(e.cfg.Dir, "credentials.json"), "etcd's data": filepath.Join(e.cfg.Dir, "etcd"),
			"the store's data": filepath.Join(e.cfg.Dir, "minio"), "A's objects on disk": filepath.Join(e.cfg.Dir, "minio", "ta-data"),
		},
		"addrs": map[string]string{
			"etcd": hostPort(t, e.etcd.Endpoints()[0]), "the controller": e.cfg.ControllerListener.Addr().String(),
			"the agent": hostPort(t, e.p.AgentURL), "the store": hostPort(t, e.minio.Endpoint()),
			"A's peer port": a.PeerAddr, "A's S3 port": hostPort(t, a.Endpoint), "A's metrics": hostPort(t, a.MetricsURL),
			"its own peer port": b.PeerAddr, "its own cachelet's host S3 port": hostPort(t, b.Endpoint),
		},
	})
	log.rows = append(log.rows, report.Rows...)
	checkJail(t, report)
	// B's instance survived its own function's fork bomb.
	if rec, err := admin.Invoke(ctx, "tb", "noop", []byte("{}")); err != nil || !rec.OK || rec.Instance != b.ID {
		t.Errorf("B after its attack: %v %+v", err, rec)
	}
	leaked := 0
	everything, _ := json.Marshal(report)
	for what, s := range secrets {
		if s != "" && bytes.Contains(everything, []byte(s)) {
			leaked++
			t.Errorf("B's function read %s", what)
		}
	}

	// 2. With what B's cachelet holds, from outside the jail.
	storeAttacks(t, ctx, e, log, storeB, pkgKey, metaKey)
	// The keys B's function signs with open its cachelet only.
	fnKeys := storeClient(t, e, api.StoreKeys{AccessKey: credsB.AccessKey, SecretKey: credsB.SecretKey})
	log.refusedBy("B's function's keys at MinIO", "read A's object", get(ctx, fnKeys, "ta-data", "secret.txt"))
	_, err = fnKeys.ListBuckets(ctx)
	log.refusedBy("B's function's keys at MinIO", "list buckets", err)
	cacheletAttacks(t, ctx, log, a, credsB)
	tokenAttacks(t, ctx, e, log, credsB.PlatformToken)
	etcdAttacks(t, ctx, e, log, a.ID)

	// 3. Rogue members in A's ring, planted with the admin's etcd user.
	wrong := rogueMembers(t, ctx, e, log, a, credsA, keys, readA)

	// A's data, the platform's bucket and the bucket list are unchanged.
	after := snapshot(t, e.st, "ta-data", "hoard-platform")
	if !maps.Equal(before, after) {
		t.Errorf("A's data or the platform's bucket changed:\nbefore %v\n after %v", before, after)
	}
	if keys := listAll(t, e.st, "tb-data"); slices.Contains(keys, "stolen.txt") {
		t.Errorf("A's object was copied into B's bucket: %v", keys)
	}
	all, err := e.st.ListBuckets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, bk := range all {
		if !slices.Contains([]string{"ta-data", "tb-data", "data", "trig", "hoard-platform"}, bk.Name) {
			t.Errorf("bucket %s was created", bk.Name)
		}
	}

	log.print(t)
	n := log.succeeded()
	t.Logf("%d attempts: %d refused, %d succeeded; %d secrets readable; %d reads of wrong bytes from rogue members",
		len(log.rows), len(log.rows)-n, n, leaked, wrong)
	if n != 0 {
		t.Errorf("%d attacks succeeded", n)
	}
	if len(log.rows) < 100 {
		t.Errorf("only %d attempts: the attacker did not run everything", len(log.rows))
	}

	// What the platform does with identities afterwards: a redeploy that
	// makes A's bucket read-only keeps A's keys and stops their writes,
	// and removing B revokes B's.
	redeployReadOnly(t, ctx, e, admin, storeA)
	if err := admin.Remove(ctx, "tb"); err != nil {
		t.Fatal(err)
	}
	bs := storeClient(t, e, storeB)
	if err := get(ctx, bs, "tb-data", "mine.txt"); err == nil {
		t.Error("B's store identity still works after B was removed")
	}
}

// attackObjectSize is the size of A's objects the rogue members are
// asked for.
const attackObjectSize = 4 << 10

// objectBytes is n bytes that differ for every key.
func objectBytes(key string, n int) []byte {
	return bytes.Repeat([]byte(key+" holds the store's bytes/"), n/len(key)+1)[:n]
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// deployDir deploys the application in dir through the controller's API.
func deployDir(t *testing.T, c *api.ControllerClient, dir string) {
	t.Helper()
	pkg, err := appspec.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Deploy(context.Background(), pkg.Data); err != nil {
		t.Fatalf("deploying %s: %v", dir, err)
	}
}

// snapshot is every object of the buckets: bucket/key → SHA-256.
func snapshot(t *testing.T, st store.Store, buckets ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, b := range buckets {
		for _, k := range listAll(t, st, b) {
			body, _, _, err := st.Get(context.Background(), b, k, store.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(body)
			body.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[b+"/"+k] = sha256Hex(data)
		}
	}
	return out
}

// jailReport is what testdata/attack/tb/attack.py answers.
type jailReport struct {
	Rows    []attempt `json:"rows"`
	Allowed struct {
		Own string `json:"own"`
		Tmp string `json:"tmp"`
	} `json:"allowed"`
	Facts struct {
		UID, GID int
		PIDs     []int `json:"pids"`
		PID      int   `json:"pid"`
		Hostname string
		Cwd      string
		Endpoint string
	} `json:"facts"`
	Log string `json:"log"`
}

// attackFromJail runs B's attack function with event and returns its
// report, the invocation's log with it (searched for secrets too).
func attackFromJail(t *testing.T, c *api.ControllerClient, event map[string]any) *jailReport {
	t.Helper()
	ev, _ := json.Marshal(event)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, err := c.Invoke(ctx, "tb", "attack", ev)
	if err != nil || !rec.OK {
		if rec != nil && rec.Error != nil {
			t.Fatalf("the attack function: %+v\n%s", *rec.Error, rec.Log)
		}
		t.Fatalf("the attack function: %v %+v", err, rec)
	}
	var r jailReport
	if err := json.Unmarshal(rec.Result, &r); err != nil {
		t.Fatalf("%v: %s", err, rec.Result)
	}
	r.Log = rec.Log
	return &r
}

// checkJail checks what the function may do and what it sees: its own
// bucket and /tmp work, it runs as a uid of its own in its own PID and
// UTS namespaces, at /var/task, with its cachelet on its loopback.
func checkJail(t *testing.T, r *jailReport) {
	t.Helper()
	f := r.Facts
	if r.Allowed.Own != "b's own" || r.Allowed.Tmp != "written" {
		t.Errorf("what B may do: %+v", r.Allowed)
	}
	if f.UID == 0 || f.GID == 0 {
		t.Errorf("the function runs as uid %d gid %d; want unprivileged", f.UID, f.GID)
	}
	if len(f.PIDs) > 3 {
		t.Errorf("the function sees processes %v; want only its jail's", f.PIDs)
	}
	if f.Hostname == "" || f.Hostname == mustHostname(t) {
		t.Errorf("host name %q: want the jail's own", f.Hostname)
	}
	if f.Cwd != "/var/task" || !strings.HasPrefix(f.Endpoint, "http://127.0.0.1:") {
		t.Errorf("working directory %q, endpoint %q", f.Cwd, f.Endpoint)
	}
}

func storeClient(t *testing.T, e *env, k api.StoreKeys) store.Store {
	t.Helper()
	st, err := s3store.New(s3store.Config{Endpoint: e.minio.Endpoint(), AccessKey: k.AccessKey, SecretKey: k.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// storeAttacks uses B's store identity (what B's cachelet signs with)
// straight at the store.
func storeAttacks(t *testing.T, ctx context.Context, e *env, log *attackLog, keysB api.StoreKeys, pkgKey, metaKey string) {
	t.Helper()
	if keysB.AccessKey == "" || keysB.AccessKey == e.cfg.StoreAccessKey {
		t.Fatalf("B's store identity: %q", keysB.AccessKey)
	}
	b := storeClient(t, e, keysB)
	body := func(s string) *strings.Reader { return strings.NewReader(s) }
	const g = "B's store identity at MinIO"
	for _, d := range []struct {
		name string
		do   func() error
	}{
		{"read A's object", func() error { return get(ctx, b, "ta-data", "secret.txt") }},
		{"head A's object", func() error { _, err := b.Stat(ctx, "ta-data", "secret.txt"); return err }},
		{"head A's bucket", func() error { return b.HeadBucket(ctx, "ta-data") }},
		{"delete A's objects (batch)", func() error {
			failed, err := b.DeleteMany(ctx, "ta-data", []string{"secret.txt"})
			if err == nil && len(failed) > 0 {
				err = failed["secret.txt"]
			}
			return err
		}},
		{"list A's objects", func() error { _, err := b.List(ctx, "ta-data", store.ListOptions{MaxKeys: 10}); return err }},
		{"overwrite A's object", func() error {
			_, err := b.Put(ctx, "ta-data", "secret.txt", body("pwned"), 5, store.PutOptions{})
			return err
		}},
		{"delete A's object", func() error { return b.Delete(ctx, "ta-data", "secret.txt") }},
		{"copy A's object out", func() error {
			_, err := b.Copy(ctx, store.CopySource{Bucket: "ta-data", Key: "secret.txt"}, "tb-data", "stolen.txt", store.CopyOptions{})
			return err
		}},
		{"create a bucket", func() error { return b.CreateBucket(ctx, "tb-direct-bucket", "") }},
		{"delete A's bucket", func() error { return b.DeleteBucket(ctx, "ta-data") }},
		{"delete its own bucket", func() error { return b.DeleteBucket(ctx, "tb-data") }},
		{"read A's code package", func() error { return get(ctx, b, "hoard-platform", pkgKey) }},
		{"list the platform bucket", func() error {
			_, err := b.List(ctx, "hoard-platform", store.ListOptions{MaxKeys: 10})
			return err
		}},
		{"read A's access metadata", func() error { return get(ctx, b, "hoard-platform", metaKey) }},
		{"rewrite A's access metadata", func() error {
			_, err := b.Put(ctx, "hoard-platform", metaKey, body("[]"), 2, store.PutOptions{})
			return err
		}},
		{"list buckets beyond its own", func() error {
			buckets, err := b.ListBuckets(ctx)
			if err != nil {
				return err
			}
			for _, bk := range buckets {
				if bk.Name != "tb-data" {
					return nil
				}
			}
			return fmt.Errorf("lists %d bucket(s), its own", len(buckets))
		}},
	} {
		log.refusedBy(g, d.name, d.do())
	}
	// B's identity does reach its own bucket: the refusals are its policy's.
	if err := get(ctx, b, "tb-data", "mine.txt"); err != nil {
		t.Errorf("B's identity cannot read its own bucket: %v", err)
	}
}

// cacheletAttacks goes at A's cachelet with B's keys and B's peer
// secret, unsigned, and with a signed peer request replayed.
func cacheletAttacks(t *testing.T, ctx context.Context, log *attackLog, a api.InstanceInfo, credsB api.Credentials) {
	t.Helper()
	const g = "A's cachelet, B's secrets"
	s3, err := s3store.New(s3store.Config{Endpoint: a.Endpoint, AccessKey: credsB.AccessKey, SecretKey: credsB.SecretKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	log.refusedBy(g, "B's keys: read A's object", get(ctx, s3, "ta-data", "secret.txt"))
	_, err = s3.List(ctx, "ta-data", store.ListOptions{MaxKeys: 10})
	log.refusedBy(g, "B's keys: list A's objects", err)
	_, err = s3.Put(ctx, "ta-data", "secret.txt", strings.NewReader("pwned"), 5, store.PutOptions{})
	log.refusedBy(g, "B's keys: overwrite A's object", err)
	_, err = s3.ListBuckets(ctx)
	log.refusedBy(g, "B's keys: list buckets", err)

	peerGet := func(auth *peer.Auth) *http.Request {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.PeerAddr+"/v1/o/ta-data/secret.txt", nil)
		if auth != nil {
			auth.Sign(req)
		}
		return req
	}
	authB, err := peer.NewAuth("tb", []byte(credsB.PeerSecret), nil)
	if err != nil {
		t.Fatal(err)
	}
	log.refusedBy(g, "B's peer secret: fetch A's object", peerStatus(peerGet(authB)))
	log.refusedBy(g, "unsigned peer request: fetch A's object", peerStatus(peerGet(nil)))
	forged, err := peer.NewAuth("ta", []byte(credsB.PeerSecret), nil)
	if err != nil {
		t.Fatal(err)
	}
	log.refusedBy(g, "B's peer secret, signed as A: fetch A's object", peerStatus(peerGet(forged)))
}

// peerStatus sends a peer request: nil when the peer served it (200 or
// 404), an error saying how it refused otherwise.
func peerStatus(req *http.Request) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusNotFound {
		return nil
	}
	return fmt.Errorf("%d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}

// tokenAttacks uses B's application token (what B's cachelet holds) on
// the controller's and the agent's APIs.
func tokenAttacks(t *testing.T, ctx context.Context, e *env, log *attackLog, token string) {
	t.Helper()
	call := func(base, method, path, body string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	if st, err := call(e.p.ControllerURL, "GET", "/v1/apps/tb/scaling", ""); err != nil || st != 200 {
		t.Fatalf("B's token on its own scaling hints: %d %v; want 200", st, err)
	}
	eventA := `{"Records": [{"eventSource": "hoard:s3", "eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "ta-data"}, "object": {"key": "x", "eTag": "e"}}}], "hoard": {"app": "ta", "cachelet": "x"}}`
	for _, c := range []struct{ name, base, method, path, body string }{
		{"controller: deploy", e.p.ControllerURL, "POST", "/v1/apps", ""},
		{"controller: list applications", e.p.ControllerURL, "GET", "/v1/apps", ""},
		{"controller: read A (its keys)", e.p.ControllerURL, "GET", "/v1/apps/ta", ""},
		{"controller: invoke A", e.p.ControllerURL, "POST", "/v1/apps/ta/functions/read/invoke", `{"bucket": "ta-data", "keys": ["secret.txt"]}`},
		{"controller: remove A", e.p.ControllerURL, "DELETE", "/v1/apps/ta", ""},
		{"controller: A's logs", e.p.ControllerURL, "GET", "/v1/apps/ta/logs", ""},
		{"controller: A's scaling hints", e.p.ControllerURL, "GET", "/v1/apps/ta/scaling", ""},
		{"controller: vote for A", e.p.ControllerURL, "POST", "/v1/apps/ta/votes", `{"policy": "bandwidth", "delta": 1}`},
		{"controller: an event naming A", e.p.ControllerURL, "POST", "/v1/events", eventA},
		{"controller: /metrics", e.p.ControllerURL, "GET", "/metrics", ""},
		{"agent: list instances", e.p.AgentURL, "GET", "/v1/instances", ""},
		{"agent: invoke A's instance", e.p.AgentURL, "POST", "/v1/instances/x/invoke", "{}"},
		{"agent: /metrics", e.p.AgentURL, "GET", "/metrics", ""},
	} {
		st, err := call(c.base, c.method, c.path, c.body)
		if err == nil && st != http.StatusUnauthorized && st != http.StatusForbidden {
			log.add("B's application token", c.name, true, strconv.Itoa(st))
			continue
		}
		log.add("B's application token", c.name, false, fmt.Sprintf("%d %v", st, err))
	}
}

// etcdAttacks signs in to etcd as an instance of B would (a user made
// as the controller makes an instance's), and without a user, and tries
// to change A's ring or read the platform's records.
func etcdAttacks(t *testing.T, ctx context.Context, e *env, log *attackLog, idA string) {
	t.Helper()
	users := etcdauth.NewAdmin(e.p.etcd, "")
	creds, err := users.AddInstance(ctx, "tb", "tb-stolen")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = users.RemoveInstance(context.Background(), "tb-stolen") })
	cli, err := etcdauth.Client(e.etcd.Endpoints(), creds)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	// The user is genuine: it may keep its own member key.
	own := etcdmembership.MemberKey("", "tb", "tb-stolen")
	if _, err := cli.Put(ctx, own, `{}`); err != nil {
		t.Fatalf("B's instance user cannot write its own member key: %v", err)
	}
	if _, err := cli.Delete(ctx, own); err != nil {
		t.Fatal(err)
	}
	rogue := `{"id": "rogue", "app": "ta", "peer_addr": "127.0.0.1:1", "s3_addr": "127.0.0.1:2"}`
	put := func(c *clientv3.Client, key string) error { _, err := c.Put(ctx, key, rogue); return err }
	read := func(c *clientv3.Client, key string, opts ...clientv3.OpOption) error {
		resp, err := c.Get(ctx, key, opts...)
		if err == nil && len(resp.Kvs) == 0 {
			return fmt.Errorf("read nothing")
		}
		return err
	}
	const g = "etcd as B's instance"
	log.refusedBy(g, "plant a member in A's ring", put(cli, etcdmembership.MemberKey("", "ta", "rogue")))
	log.refusedBy(g, "overwrite A's member record", put(cli, etcdmembership.MemberKey("", "ta", idA)))
	_, err = cli.Delete(ctx, etcdmembership.MemberKey("", "ta", idA))
	log.refusedBy(g, "delete A's member record", err)
	log.refusedBy(g, "plant a member in its own ring", put(cli, etcdmembership.MemberKey("", "tb", "rogue")))
	reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: e.etcd.Endpoints(), Username: creds.Username, Password: creds.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	sess, err := reg.Join(ctx, membership.Member{ID: "rogue", App: "ta", PeerAddr: "127.0.0.1:1", S3Addr: "127.0.0.1:2"})
	if err == nil {
		_ = sess.Close(ctx)
	}
	log.refusedBy(g, "join A's ring with a lease", err)
	log.refusedBy(g, "read A's ring", read(cli, etcdmembership.RingPrefix("", "ta"), clientv3.WithPrefix()))
	log.refusedBy(g, "read A's record (keys, peer secret)", read(cli, controller.EtcdApps+"ta"))
	log.refusedBy(g, "read the platform's records", read(cli, "/hoard/platform/", clientv3.WithPrefix()))
	_, err = cli.Grant(ctx, 365*24*3600)
	log.refusedBy(g, "grant itself a lease of a year", err)
	_, err = cli.UserList(ctx)
	log.refusedBy(g, "list etcd's users", err)
	_, err = cli.UserGrantRole(ctx, creds.Username, etcdauth.Root)
	log.refusedBy(g, "grant itself root", err)

	anon, err := etcdauth.Client(e.etcd.Endpoints(), etcdauth.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	log.refusedBy("etcd without a user", "plant a member in A's ring", put(anon, etcdmembership.MemberKey("", "ta", "rogue")))
	log.refusedBy("etcd without a user", "read A's record", read(anon, controller.EtcdApps+"ta"))
}

// redeployReadOnly redeploys A with its bucket read-only: the same store
// keys, which can then read but no longer write it.
func redeployReadOnly(t *testing.T, ctx context.Context, e *env, c *api.ControllerClient, keysA api.StoreKeys) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{appspec.FileName, "fns.py"} {
		b, err := os.ReadFile(filepath.Join("testdata/attack/ta", f))
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.ReplaceAll(b, []byte("{ta-data: read-write}"), []byte("{ta-data: read-only}"))
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deployDir(t, c, dir)
	if again := storeKeys(t, e, "ta"); again != keysA {
		t.Errorf("the redeploy changed A's store keys")
	}
	a := storeClient(t, e, keysA)
	if err := get(ctx, a, "ta-data", "secret.txt"); err != nil {
		t.Errorf("A cannot read its read-only bucket: %v", err)
	}
	if _, err := a.Put(ctx, "ta-data", "after.txt", strings.NewReader("x"), 1, store.PutOptions{}); err == nil {
		t.Error("A wrote to its bucket after it became read-only")
	}
}

// storeKeys is app's store identity as the controller recorded it.
func storeKeys(t *testing.T, e *env, app string) api.StoreKeys {
	t.Helper()
	resp, err := e.p.etcd.Get(context.Background(), controller.EtcdApps+app)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%s's record: %v", app, err)
	}
	var rec controller.Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Store
}

func get(ctx context.Context, st store.Store, bucket, key string) error {
	body, _, _, err := st.Get(ctx, bucket, key, store.GetOptions{})
	if err == nil {
		body.Close()
	}
	return err
}

func listAll(t *testing.T, st store.Store, bucket string) []string {
	t.Helper()
	page, err := st.List(context.Background(), bucket, store.ListOptions{MaxKeys: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range page.Objects {
		out = append(out, o.Key)
	}
	return out
}
