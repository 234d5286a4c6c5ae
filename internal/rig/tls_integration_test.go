//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// tlsEnv is the platform as `hoard up --tls` assembles it: one local CA,
// MinIO, etcd, the controller and the agent each with a certificate of
// their role, every listener on TLS, mutual where the parts call each
// other.
type tlsEnv struct {
	*env
	ca       *pki.CA
	cli      pki.Files // the CLI's certificate (a client of the controller)
	ctlFiles pki.Files // the controller's
	otherCA  *pki.CA   // an attacker's CA
	ctlToken string
	agentURL string
	etcdEps  []string
}

func startTLS(t *testing.T) *tlsEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	ca, err := pki.OpenCA(filepath.Join(dir, "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pki.OpenCA(filepath.Join(dir, "other-ca"), nil)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []string{"127.0.0.1", "localhost"}
	issue := func(name string, id pki.Identity, server bool) pki.Files {
		f, err := ca.Issue(name, pki.Request{Identity: id, Hosts: hosts, Server: server, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	te := &tlsEnv{ca: ca, otherCA: other, ctlToken: "controller-token-0123456789",
		ctlFiles: issue("controller", pki.Controller(), true), cli: issue("cli", pki.Client("cli"), false)}
	agentFiles := issue("agent", pki.Agent("local"), true)
	storeFiles := issue("store", pki.Client("store"), true)
	etcdFiles := issue("etcd", pki.Client("etcd"), true)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	menv := append(MinIOWebhookEnv("https://"+ln.Addr().String(), testEventsToken, filepath.Join(dir, "minio-events")),
		"MINIO_NOTIFY_WEBHOOK_CLIENT_CERT_HOARD="+storeFiles.Cert, "MINIO_NOTIFY_WEBHOOK_CLIENT_KEY_HOARD="+storeFiles.Key)
	minio, err := localstore.StartMinIO(ctx, localstore.Config{
		DataDir: filepath.Join(dir, "minio"), Addr: "127.0.0.1:0", AccessKey: "storekey", SecretKey: "storesecret123",
		Env: menv, TLS: storeFiles,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minio.Close() })
	if !strings.HasPrefix(minio.Endpoint(), "https://") {
		t.Fatalf("MinIO endpoint %s, want https", minio.Endpoint())
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, Logger: log, TLS: &etcdembed.TLSFiles{Cert: etcdFiles.Cert, Key: etcdFiles.Key, CA: etcdFiles.CA}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	te.etcdEps = etcd.Endpoints()
	ctlEtcd, err := pki.ClientConfig(te.ctlFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := etcdauth.Credentials{Username: etcdauth.Root, Password: etcdauth.NewPassword()}
	if err := etcdauth.EnableTLS(ctx, etcd.Endpoints(), ctlEtcd, root.Password); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Controller: true, ControllerListener: ln, Agent: true, Dir: dir, HoardBin: hoardBinary(t),
		EtcdEndpoints: etcd.Endpoints(), EtcdCredentials: root, StoreEndpoint: minio.Endpoint(), StoreAccessKey: "storekey", StoreSecretKey: "storesecret123",
		ControllerToken: te.ctlToken, AgentToken: "agent-token-0123456789", StoreNotifications: true, StoreIdentities: "minio", StoreEventsToken: testEventsToken,
		TLS: &TLS{Controller: te.ctlFiles, Agent: agentFiles, CA: ca.CertFile(), Issuer: ca},
	}
	p, err := Start(ctx, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	te.agentURL = p.AgentURL
	storeTLS, err := pki.ClientConfig(pki.Files{CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3store.New(s3store.Config{Endpoint: minio.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123", TLS: storeTLS}, log)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"data", "trig"} {
		if err := st.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	te.env = &env{p: p, st: st, cfg: cfg, minio: minio, etcd: etcd}
	return te
}

// client is an HTTPS client presenting f's certificate (none when
// f.Cert is empty) and trusting f.CA.
func httpsClient(t *testing.T, f pki.Files) *http.Client {
	t.Helper()
	tc, err := pki.ClientConfig(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 10 * time.Second}
	t.Cleanup(cl.CloseIdleConnections)
	return cl
}

// TestTLSPlatform runs the platform with every listener on TLS: a boto3
// function reads and writes through its cachelet over https (trusting
// AWS_CA_BUNDLE), the wordcount example runs unchanged, three instances
// fetch from each other over mutual TLS,
// MinIO's webhook reaches the controller with its certificate, the CLI
// talks to the controller over TLS; and clients without a certificate,
// with one of another CA, or of the wrong role or application, are
// refused by the peer, agent, controller and etcd listeners.
func TestTLSPlatform(t *testing.T) {
	te := startTLS(t)
	c := te.p.Controller
	te.deploy(t, testSpec)
	te.put(t, "data", "hello.txt", "hello, hoard")
	if !strings.HasPrefix(te.p.ControllerURL, "https://") || !strings.HasPrefix(te.agentURL, "https://") {
		t.Fatalf("controller %s, agent %s: want https", te.p.ControllerURL, te.agentURL)
	}

	t.Run("boto3 through its cachelet over https", func(t *testing.T) {
		rec := invoke(t, c, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
		if !rec.OK {
			t.Fatalf("upper: %+v\n%s", rec.Error, rec.Log)
		}
		if got, err := te.get("data", "out/hello.txt"); err != nil || got != "HELLO, HOARD" {
			t.Errorf("written through the cachelet: %q, %v", got, err)
		}
		// The cachelet's key left its private directory (beside its
		// control socket) once the cachelet was serving; its
		// certificate stays.
		var certs, keys []string
		for _, in := range te.p.Agent.Instances() {
			dir := filepath.Dir(te.p.Agent.Instance(in.ID).ControlSocket())
			c, _ := filepath.Glob(filepath.Join(dir, "cachelet.crt"))
			k, _ := filepath.Glob(filepath.Join(dir, "cachelet.key"))
			certs, keys = append(certs, c...), append(keys, k...)
		}
		if len(certs) == 0 || len(keys) != 0 {
			t.Errorf("cachelets' directories hold certificates %v and keys %v; want certificates and no key", certs, keys)
		}
	})

	t.Run("an example application, unchanged", func(t *testing.T) {
		pkg, err := appspec.Pack(filepath.Join("..", "..", "examples", "wordcount"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Deploy(context.Background(), pkg.Data); err != nil {
			t.Fatal(err)
		}
		prep := invoke(t, c, "wordcount", "prepare", map[string]any{"scale": 0.01})
		if !prep.OK {
			t.Fatalf("wordcount prepare: %+v\n%s", prep.Error, prep.Log)
		}
		count := invoke(t, c, "wordcount", "count", map[string]any{"scale": 0.01})
		var out struct{ Words int }
		if err := json.Unmarshal(count.Result, &out); !count.OK || err != nil || out.Words == 0 {
			t.Fatalf("wordcount count: %s, %v, %+v\n%s", count.Result, err, count.Error, count.Log)
		}
	})

	t.Run("peer fetches over mutual TLS", func(t *testing.T) {
		var keys []string
		for i := range 12 {
			k := fmt.Sprintf("ring/%d", i)
			te.put(t, "data", k, strings.Repeat("r", 1000+i))
			keys = append(keys, k)
		}
		instances, reads := map[string]bool{}, map[string]int64{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec := invoke(t, c, "t1", "read", map[string]any{"bucket": "data", "keys": keys, "hold": 1.0})
				if !rec.OK {
					t.Errorf("read: %+v %s", rec.Error, rec.Log)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				instances[rec.Instance] = true
				for k, v := range rec.Reads {
					reads[k] += v.Count
				}
			}()
		}
		wg.Wait()
		if len(instances) < 2 {
			t.Fatalf("3 concurrent invocations ran on %d instances", len(instances))
		}
		if reads["remote_hit"]+reads["remote_miss"] == 0 {
			t.Errorf("reads %v: no peer fetch across %d cachelets", reads, len(instances))
		}
	})

	t.Run("store webhook with its certificate", func(t *testing.T) {
		te.put(t, "trig", "in/x.txt", "x")
		eventually(t, "the object trigger's output", 30*time.Second, func() bool {
			_, err := te.get("trig", "seen/in_x.txt")
			return err == nil
		})
	})

	t.Run("CLI over TLS", func(t *testing.T) {
		run := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, hoardBinary(t), append([]string{"apps", "--dir", t.TempDir(), "--controller", te.p.ControllerURL}, args...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOARD_CONTROLLER_TOKEN=" + te.ctlToken}
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := run("--tls-ca", te.ca.CertFile(), "--tls-cert", te.cli.Cert, "--tls-key", te.cli.Key)
		if err != nil || !strings.Contains(out, "t1") {
			t.Errorf("hoard apps over TLS: %v\n%s", err, out)
		}
		if out, err := run("--tls-ca", te.ca.CertFile()); err == nil {
			t.Errorf("hoard apps without a client certificate succeeded:\n%s", out)
		}
	})

	t.Run("attackers refused", func(t *testing.T) {
		otherCA, err := te.otherCA.Issue("controller", pki.Request{Identity: pki.Controller(), Client: true})
		if err != nil {
			t.Fatal(err)
		}
		otherCA.CA = te.ca.CertFile() // trusts the servers; presents the wrong CA's certificate
		tenantB, err := te.ca.Issue("tb-1", pki.Request{Identity: pki.Cachelet("tb", "tb-1"), Client: true})
		if err != nil {
			t.Fatal(err)
		}
		t1, err := te.ca.Issue("t1-9", pki.Request{Identity: pki.Cachelet("t1", "t1-9"), Client: true})
		if err != nil {
			t.Fatal(err)
		}
		noCert := pki.Files{CA: te.ca.CertFile()}
		get := func(f pki.Files, url, token string) (int, error) {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := httpsClient(t, f).Do(req)
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}

		peers := peerAddrs(t, te, "t1")
		for _, tc := range []struct {
			listener, url, token string
			files                map[string]pki.Files
			allowed              pki.Files
			allowedStatus        int
		}{
			{"controller", te.p.ControllerURL + "/v1/apps", te.ctlToken,
				map[string]pki.Files{"no certificate": noCert, "another CA": otherCA},
				te.cli, http.StatusOK},
			{"agent", te.agentURL + "/v1/instances", te.cfg.AgentToken,
				map[string]pki.Files{"no certificate": noCert, "another CA": otherCA, "the CLI": te.cli, "a cachelet": t1},
				te.ctlFiles, http.StatusOK},
			// The peer listener: a certificate of the application gets
			// to the protocol, which refuses an unsigned request.
			{"peer", "https://" + peers[0] + "/v1/probe?bytes=1", "",
				map[string]pki.Files{"no certificate": noCert, "another CA": otherCA, "a cachelet of another application": tenantB, "the CLI": te.cli},
				t1, http.StatusForbidden},
		} {
			for name, f := range tc.files {
				if status, err := get(f, tc.url, tc.token); err == nil {
					t.Errorf("%s listener, %s: answered %d", tc.listener, name, status)
				}
			}
			status, err := get(tc.allowed, tc.url, tc.token)
			if err != nil || status != tc.allowedStatus {
				t.Errorf("%s listener, its rightful caller: %d, %v; want %d", tc.listener, status, err, tc.allowedStatus)
			}
		}

		// etcd: client certificates first, then users.
		try := func(f pki.Files) error {
			tc, err := pki.ClientConfig(f, nil)
			if err != nil {
				return err
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: te.etcdEps, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
			if err != nil {
				return err
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err = cli.Get(ctx, "hoard/", clientv3.WithPrefix())
			return err
		}
		for name, f := range map[string]pki.Files{"no certificate": noCert, "another CA": otherCA} {
			if err := try(f); err == nil {
				t.Errorf("etcd, %s: answered", name)
			}
		}
		// A certificate of the CA gets past TLS, and then needs a user:
		// the anonymous read is refused by etcd's authentication.
		if err := try(te.cli); err == nil || !strings.Contains(err.Error(), "permission denied") && !strings.Contains(err.Error(), "user name") {
			t.Errorf("etcd, a certificate of the CA and no user: %v; want refused by authentication", err)
		}
	})
}

// peerAddrs are the peer addresses of app's cachelets, read from etcd
// with the platform's own client.
func peerAddrs(t *testing.T, te *tlsEnv, app string) []string {
	t.Helper()
	reg, err := etcdmembership.New(etcdmembership.Config{Client: te.p.etcd})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := reg.Watch(ctx, app)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range (<-ch).Members {
		out = append(out, m.PeerAddr)
	}
	if len(out) == 0 {
		t.Fatalf("no member of %s", app)
	}
	return out
}

// TestNodesTLS runs two nodes on TLS, as `hoard up --nodes 2 --tls`
// does: each agent issues its cachelets' certificates from an
// intermediate CA of its own, and cachelets on different nodes fetch
// from each other over mutual TLS, each verifying the other's chain to
// the platform's CA; the agents refuse a caller that is not the
// controller.
func TestNodesTLS(t *testing.T) {
	ca, err := pki.OpenCA(filepath.Join(t.TempDir(), "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	n := startNodes(t, 2, func(c *NodesConfig) { c.TLS = ca })
	c := n.Controller
	ctx := context.Background()
	if !strings.HasPrefix(n.Store.Endpoint(), "https://") || !strings.HasPrefix(n.NodesControllerURL, "https://") {
		t.Fatalf("store %s, controller %s: want https", n.Store.Endpoint(), n.NodesControllerURL)
	}
	storeTLS, err := pki.ClientConfig(pki.Files{CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s3store.New(s3store.Config{Endpoint: n.Store.Endpoint(), AccessKey: "storekey", SecretKey: "storesecret123", TLS: storeTLS}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateBucket(ctx, "data", ""); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 12 {
		k := fmt.Sprintf("obj/%d", i)
		body := strings.Repeat("n", 10_000+i)
		if _, err := st.Put(ctx, "data", k, strings.NewReader(body), int64(len(body)), store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	deploySpec(t, c, nodesSpec, testFns)
	concurrently(t, c, 2, map[string]any{"bucket": "data", "keys": []string{}, "hold": 1.0})
	agents := map[string]bool{}
	for _, in := range c.Apps()[0].Instances {
		agents[in.Agent] = true
	}
	if len(agents) != 2 {
		t.Fatalf("instances on %v; want both nodes", agents)
	}
	first := concurrently(t, c, 1, map[string]any{"bucket": "data", "keys": keys})[0]
	if !first.OK || first.Reads["remote_miss"].Count == 0 {
		t.Fatalf("first read %+v: no remote misses across nodes", first.Reads)
	}
	var rh int64
	for _, rec := range concurrently(t, c, 2, map[string]any{"bucket": "data", "keys": keys, "hold": 1.0}) {
		rh += rec.Reads["remote_hit"].Count
	}
	if rh == 0 {
		t.Error("no remote hit across nodes over mutual TLS")
	}
	// An agent accepts the controller alone.
	cli, err := ca.Issue("cli", pki.Request{Identity: pki.Client("cli"), Client: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httpsClient(t, cli).Get(n.Agents[0].URL + "/v1/instances"); err == nil {
		t.Error("an agent answered a client that is not the controller")
	}
}
