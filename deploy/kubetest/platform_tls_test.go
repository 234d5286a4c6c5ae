//go:build kube

package kubetest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/pki"
)

// TestChartPlatformTLS runs the controller and an agent as the chart
// renders them with tls.enabled and Secrets of the operator's: the pods'
// volumes are laid out as the kubelet mounts them (Secrets 0440), their
// init containers' scripts run, then `hoard controller` and `hoard
// agent` run with the containers' own arguments against an etcd with the
// etcd Secret's certificate. It checks what the chart promises: etcd's
// authentication turned on by the controller, the agent signed in as the
// agents' shared user (not root), the identity checks of `hoard up
// --tls` at the agent's and the controller's listeners (attackers with no
// certificate, another CA's, a cachelet's of the agents' issuer, the
// CLI's), and no secret on a command line or in an environment.
func TestChartPlatformTLS(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	hoard := bin(t, "HOARD_BIN")
	chart := chartDir(t)
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// The operator's PKI: a root, the parts' certificates, the agents'
	// issuing CA (cachelets' identities only), and a stranger's CA.
	ca, err := pki.OpenCA(filepath.Join(root, "pki", "ca"), nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, id pki.Identity, hosts ...string) pki.Files {
		f, err := ca.Issue(name, pki.Request{Identity: id, Hosts: hosts, Server: true, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	controllerF := issue("controller", pki.Controller(), "127.0.0.1", "hoard-controller.hoard.svc")
	agentF := issue("agent", pki.Agent("hoard-agent"), "127.0.0.1")
	etcdF := issue("etcd", pki.Client("etcd"), "127.0.0.1", "localhost")
	cliF := issue("cli", pki.Client("cli"), "127.0.0.1")
	issuerDir := filepath.Join(root, "pki", "issuer")
	if err := ca.IssueCA(issuerDir); err != nil {
		t.Fatal(err)
	}
	issuer, err := pki.LoadCA(issuerDir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cacheletF, err := issuer.IssueIn(filepath.Join(root, "pki"), "cachelet", pki.Request{Identity: pki.Cachelet("a", "a-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := pki.OpenCA(filepath.Join(root, "pki", "stranger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	strangerF, err := stranger.Issue("controller", pki.Request{Identity: pki.Controller(), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}

	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tlsSecret := func(f pki.Files) map[string]string {
		return map[string]string{"tls.crt": read(f.Cert), "tls.key": read(f.Key), "ca.crt": read(ca.CertFile())}
	}
	secrets := map[string]map[string]string{
		"hoard-store":            {"access-key": "storeaccess0123", "secret-key": "storesecret0123456789"},
		"hoard-identities":       {"identities.yaml": "{}\n"},
		"hoard-controller-tls":   tlsSecret(controllerF),
		"hoard-agent-tls":        tlsSecret(agentF),
		"hoard-agent-issuer-tls": {"tls.crt": read(filepath.Join(issuerDir, "ca.crt")), "tls.key": read(filepath.Join(issuerDir, "ca.key")), "ca.crt": read(ca.CertFile())},
	}

	// etcd, as the operator's (etcd.deploy=false), with the etcd Secret's
	// certificate, client certificates required; authentication still off.
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(root, "etcd"), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0",
		TLS: &etcdembed.TLSFiles{Cert: etcdF.Cert, Key: etcdF.Key, CA: ca.CertFile()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	controllerPort, agentPort := freePort(t), freePort(t)
	objs := render(t, helm, chart, "-f", filepath.Join(chart, "ci", "platform-tls-values.yaml"),
		"--set", fmt.Sprintf("etcd.deploy=false,etcd.endpoints={%s},controller.port=%d,agent.port=%d", etcd.Endpoints()[0], controllerPort, agentPort))
	var controllerPod, agentPod map[string]any
	for _, o := range objs {
		switch o.kind() {
		case "Secret":
			data := map[string]string{}
			for k, v := range o["data"].(map[string]any) {
				b, err := base64.StdEncoding.DecodeString(v.(string))
				if err != nil {
					t.Fatal(err)
				}
				data[k] = string(b)
			}
			secrets[o.name()] = data
		case "Deployment":
			controllerPod = podSpec(o)
		case "DaemonSet":
			agentPod = podSpec(o)
		}
	}
	if controllerPod == nil || agentPod == nil {
		t.Fatal("the chart rendered no controller or no agent")
	}
	for _, name := range []string{"hoard-etcd-root", "hoard-etcd-agents", "hoard-tokens"} {
		if secrets[name] == nil {
			t.Fatalf("the chart made no Secret %s", name)
		}
	}
	if u := secrets["hoard-etcd-agents"]["username"]; u == etcdauth.Root {
		t.Fatalf("the agents' etcd user is root")
	}

	// No secret on a command line or in an environment.
	var secretValues []string
	for _, data := range secrets {
		for k, v := range data {
			if !slices.Contains([]string{"tls.crt", "ca.crt", "username", "identities.yaml"}, k) {
				secretValues = append(secretValues, strings.TrimSpace(v))
			}
		}
	}
	for _, pod := range []map[string]any{controllerPod, agentPod} {
		for _, c := range containers(pod) {
			b, err := json.Marshal([]any{c["command"], c["args"], c["env"]})
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range secretValues {
				if strings.Contains(string(b), v) {
					t.Errorf("container %s: a secret on its command line or in its environment", c["name"])
				}
			}
		}
	}

	// The controller: it turns etcd's authentication on and makes the
	// agents' user before it serves.
	cdir := filepath.Join(root, "controller")
	controllerArgs := mountPod(t, cdir, controllerPod, secrets, "controller")
	controllerExited := startProcess(t, hoard, controllerArgs, filepath.Join(cdir, "log"))
	controllerURL := fmt.Sprintf("https://127.0.0.1:%d", controllerPort)
	admin := secrets["hoard-tokens"]["admin-token"]
	agentToken := secrets["hoard-tokens"]["agent-token"]
	cli := httpsClient(t, cliF, ca.CertFile())
	waitUntil(t, ctx, "the controller serving", controllerExited, filepath.Join(cdir, "log"), func() error {
		return status(ctx, cli, controllerURL+"/v1/apps", admin, http.StatusOK)
	})

	// etcd: authentication on; nothing without a user, even with a
	// certificate of the CA; root is the Secret's.
	etcdTLS, err := pki.ClientConfig(pki.Files{Cert: cliF.Cert, Key: cliF.Key, CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := etcdauth.ClientTLS(etcd.Endpoints(), etcdauth.Credentials{}, etcdTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := anon.Get(ctx, "/hoard/platform/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrUserEmpty) && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("etcd without a user: %v, want refused", err)
	}
	rootCli, err := etcdauth.ClientTLS(etcd.Endpoints(), etcdauth.Credentials{Username: etcdauth.Root, Password: secrets["hoard-etcd-root"]["password"]}, etcdTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer rootCli.Close()

	// The agent, signed in to etcd as the agents' user.
	adir := filepath.Join(root, "agent")
	agentArgs := mountPod(t, adir, agentPod, secrets, "agent")
	// Its etcd user is the agents' (never root), in a file only it reads.
	credsPath := filepath.Join(adir, "volumes", "run", "etcd.json")
	if st, err := os.Stat(credsPath); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the agent's etcd credentials: %v, %v; want a file of mode 0600", st, err)
	}
	if c, err := etcdauth.ReadFile(credsPath); err != nil || c.Username != secrets["hoard-etcd-agents"]["username"] {
		t.Fatalf("the agent signs in to etcd as %q (%v), want the agents' user", c.Username, err)
	}
	agentExited := startProcess(t, hoard, agentArgs, filepath.Join(adir, "log"))
	waitUntil(t, ctx, "the agent registered", agentExited, filepath.Join(adir, "log"), func() error {
		r, err := rootCli.Get(ctx, api.EtcdPrefix+"agent-node-a")
		if err == nil && len(r.Kvs) == 0 {
			err = errors.New("not yet")
		}
		return err
	})
	agentsCli, err := etcdauth.ClientTLS(etcd.Endpoints(), etcdauth.Credentials{Username: secrets["hoard-etcd-agents"]["username"], Password: secrets["hoard-etcd-agents"]["password"]}, etcdTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer agentsCli.Close()
	if _, err := agentsCli.Get(ctx, "/hoard/platform/apps/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the agents' user reads the application records: %v", err)
	}

	// The controller calls the agent (its dashboard's state asks every
	// agent for its instances) over mutual TLS, each checking the other's
	// role.
	if err := agentAnswersController(ctx, t, cliF, ca.CertFile(), controllerURL, admin); err != nil {
		t.Errorf("the controller calling the agent: %v", err)
	}

	// The agent's API takes the controller alone.
	agentURL := fmt.Sprintf("https://127.0.0.1:%d/v1/instances", agentPort)
	if err := status(ctx, httpsClient(t, controllerF, ca.CertFile()), agentURL, agentToken, http.StatusOK); err != nil {
		t.Errorf("the controller at the agent: %v", err)
	}
	for _, c := range []struct {
		name  string
		files pki.Files
		want  int // 0: refused at the handshake
	}{
		{"no certificate", pki.Files{}, 0},
		{"another CA's controller", strangerF, 0},
		{"a cachelet of the agents' issuer", cacheletF, 0},
		{"the CLI", cliF, 0},
		{"another agent (package relay only)", agentF, http.StatusForbidden},
	} {
		err := status(ctx, httpsClient(t, c.files, ca.CertFile()), agentURL, agentToken, c.want)
		if err != nil {
			t.Errorf("%s at the agent: %v", c.name, err)
		}
	}
	// The controller's API takes certificates of the CA alone.
	for _, c := range []struct {
		name  string
		files pki.Files
	}{{"no certificate", pki.Files{}}, {"another CA's controller", strangerF}} {
		if err := status(ctx, httpsClient(t, c.files, ca.CertFile()), controllerURL+"/v1/apps", admin, 0); err != nil {
			t.Errorf("%s at the controller: %v", c.name, err)
		}
	}
	if err := status(ctx, httpsClient(t, cacheletF, ca.CertFile()), controllerURL+"/v1/apps", "", http.StatusUnauthorized); err != nil {
		t.Errorf("a cachelet without a token at the controller: %v", err)
	}
}

func podSpec(o object) map[string]any {
	return o["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
}

func containers(pod map[string]any) []map[string]any {
	var cs []map[string]any
	for _, key := range []string{"initContainers", "containers"} {
		l, _ := pod[key].([]any)
		for _, c := range l {
			cs = append(cs, c.(map[string]any))
		}
	}
	return cs
}

// mountPod lays pod's volumes out under dir as the kubelet mounts them
// (Secrets' items with their defaultMode, empty directories), runs its
// init containers' shell scripts there, and returns the arguments of its
// container named name with the mount paths moved under dir and the
// downward API's variables set (the pod on 127.0.0.1, node "node-a").
func mountPod(t *testing.T, dir string, pod map[string]any, secrets map[string]map[string]string, name string) []string {
	t.Helper()
	volumes := map[string]string{} // name → directory
	for _, v := range pod["volumes"].([]any) {
		v := v.(map[string]any)
		vname := v["name"].(string)
		d := filepath.Join(dir, "volumes", vname)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		volumes[vname] = d
		var sources []map[string]any
		mode := os.FileMode(0o644)
		if s, ok := v["secret"].(map[string]any); ok {
			sources = append(sources, map[string]any{"name": s["secretName"], "items": s["items"]})
			if m, ok := s["defaultMode"].(int); ok {
				mode = os.FileMode(m)
			}
		}
		if p, ok := v["projected"].(map[string]any); ok {
			if m, ok := p["defaultMode"].(int); ok {
				mode = os.FileMode(m)
			}
			for _, src := range p["sources"].([]any) {
				sources = append(sources, src.(map[string]any)["secret"].(map[string]any))
			}
		}
		if len(sources) > 0 && mode&0o044 == 0o044 {
			// The kubelet's mode for Secrets: 0440 with fsGroup, which
			// hoard refuses for its secret files (the init containers
			// copy them).
			t.Fatalf("volume %s: mode %v: the chart sets none, or one others may read", vname, mode)
		}
		for _, s := range sources {
			data, ok := secrets[s["name"].(string)]
			if !ok {
				t.Fatalf("volume %s: no Secret %s", vname, s["name"])
			}
			for _, it := range s["items"].([]any) {
				it := it.(map[string]any)
				val, ok := data[it["key"].(string)]
				if !ok {
					t.Fatalf("volume %s: Secret %s has no key %s", vname, s["name"], it["key"])
				}
				p := filepath.Join(d, it["path"].(string))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(val), mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(p, mode); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// remap moves a container's mount paths (longest first) under dir.
	remap := func(c map[string]any, s string) string {
		type m struct{ path, dir string }
		var ms []m
		for _, vm := range c["volumeMounts"].([]any) {
			vm := vm.(map[string]any)
			ms = append(ms, m{vm["mountPath"].(string), volumes[vm["name"].(string)]})
		}
		sort.Slice(ms, func(i, j int) bool { return len(ms[i].path) > len(ms[j].path) })
		var pairs []string
		for _, x := range ms {
			pairs = append(pairs, x.path, x.dir)
		}
		return strings.NewReplacer(pairs...).Replace(s)
	}
	for _, ic := range pod["initContainers"].([]any) {
		ic := ic.(map[string]any)
		args := ic["args"].([]any)
		script := remap(ic, args[0].(string))
		cmd := exec.Command("/bin/sh", "-euc", script)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("init container %s: %v\n%s", ic["name"], err, out)
		}
	}
	var c map[string]any
	for _, x := range pod["containers"].([]any) {
		if x.(map[string]any)["name"] == name {
			c = x.(map[string]any)
		}
	}
	if c == nil {
		t.Fatalf("no container %s", name)
	}
	var out []string
	for _, a := range c["args"].([]any) {
		s := remap(c, a.(string))
		s = strings.NewReplacer("$(POD_IP)", "127.0.0.1", "$(NODE_NAME)", "node-a", "$(POD_NAME)", "hoard-agent-x").Replace(s)
		out = append(out, s)
	}
	return out
}

// startProcess runs hoard with args until the test ends, its output in
// logPath; an environment with nothing of the test's.
func startProcess(t *testing.T, hoard string, args []string, logPath string) <-chan struct{} {
	t.Helper()
	lf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	cmd := exec.Command(hoard, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + filepath.Dir(logPath)}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			t.Logf("%s %s's log:\n%s", filepath.Base(hoard), args[0], tail(readFile(logPath), 3000))
		}
	})
	return exited
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// waitUntil polls check until it passes, failing the test (with the log
// at logPath) when ctx ends or the process exits first.
func waitUntil(t *testing.T, ctx context.Context, what string, exited <-chan struct{}, logPath string, check func() error) {
	t.Helper()
	for {
		err := check()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v\n%s", what, err, tail(readFile(logPath), 3000))
		case <-exited:
			t.Fatalf("%s: the process exited: %v\n%s", what, err, tail(readFile(logPath), 3000))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpsClient presents f's certificate (none when f is zero) and trusts
// the CA bundle caFile, host names checked.
func httpsClient(t *testing.T, f pki.Files, caFile string) *http.Client {
	t.Helper()
	tc, err := pki.ClientConfig(pki.Files{Cert: f.Cert, Key: f.Key, CA: caFile}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
}

// status GETs url with a bearer token and checks the answer's status;
// want 0 means the TLS handshake must fail (no answer at all).
func status(ctx context.Context, c *http.Client, url, token string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		var terr *tls.CertificateVerificationError
		if want == 0 && !errors.As(err, &terr) {
			return nil // refused by the server's handshake
		}
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if want == 0 {
		return fmt.Errorf("answered %d, want the handshake refused", resp.StatusCode)
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%d %s, want %d", resp.StatusCode, bytes.TrimSpace(body), want)
	}
	return nil
}

// TestChartSidecarTLS runs the cachelet sidecars of two applications as
// the chart renders them with tls.enabled and their Secrets (laid out as
// the kubelet mounts them, their init containers run): each serves S3 over
// https to its function (which trusts AWS_CA_BUNDLE, the CA alone mounted
// in its container), joins its ring through an etcd that requires client
// certificates, and takes its own application's cachelets alone at its
// peer listener: another application's, another CA's and none are
// refused at the handshake.
func TestChartSidecarTLS(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	hoard := bin(t, "HOARD_BIN")
	chart := chartDir(t)
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	ca, err := pki.OpenCA(filepath.Join(root, "pki", "ca"), nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, id pki.Identity) pki.Files {
		f, err := ca.Issue(name, pki.Request{Identity: id, Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	thumbsF, thumbs2F, etlF := issue("thumbs", pki.Cachelet("thumbs", "thumbs-cachelet")), issue("thumbs2", pki.Cachelet("thumbs", "thumbs-other")), issue("etl", pki.Cachelet("etl", "etl-cachelet"))
	etcdF := issue("etcd", pki.Client("etcd"))
	stranger, err := pki.OpenCA(filepath.Join(root, "pki", "stranger"), nil)
	if err != nil {
		t.Fatal(err)
	}
	strangerF, err := stranger.Issue("thumbs", pki.Request{Identity: pki.Cachelet("thumbs", "x"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(root, "etcd"), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0",
		TLS: &etcdembed.TLSFiles{Cert: etcdF.Cert, Key: etcdF.Key, CA: ca.CertFile()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	secrets := map[string]map[string]string{}
	type app struct {
		name             string
		files            pki.Files
		s3, peer, metric int
	}
	apps := []app{{"thumbs", thumbsF, freePort(t), freePort(t), freePort(t)}, {"etl", etlF, freePort(t), freePort(t), freePort(t)}}
	var entries []map[string]any
	for _, a := range apps {
		doc, err := json.Marshal(map[string]any{
			"version": 1, "app": a.name,
			"access_key": a.name + "-function-key", "secret_key": a.name + "-function-secret-0123456789",
			"peer_secret":    a.name + "-peer-secret-0123456789",
			"etcd_endpoints": etcd.Endpoints(),
			"store":          map[string]any{"endpoint": "https://127.0.0.1:1", "access_key": "storeaccess0123", "secret_key": "storesecret0123456789"},
		})
		if err != nil {
			t.Fatal(err)
		}
		secrets[a.name+"-cachelet"] = map[string]string{"document.json": string(doc)}
		secrets[a.name+"-tls"] = map[string]string{"tls.crt": read(a.files.Cert), "tls.key": read(a.files.Key), "ca.crt": read(ca.CertFile())}
		entries = append(entries, map[string]any{"name": a.name, "image": "docker.io/hoard-io/hoard-worker:dev", "replicas": 1,
			"secret": a.name + "-cachelet", "tlsSecret": a.name + "-tls", "s3Port": a.s3, "peerPort": a.peer, "metricsPort": a.metric})
	}
	appsJSON, err := json.Marshal(entries)
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, helm, chart, "-f", filepath.Join(chart, "ci", "sidecar-values.yaml"), "--set-json", "sidecar.apps="+string(appsJSON),
		"--set", "etcd.deploy=false,etcd.endpoints={"+etcd.Endpoints()[0]+"}")
	pods := map[string]map[string]any{}
	for _, o := range objs {
		if o.kind() == "Deployment" {
			pods[o.name()] = podSpec(o)
		}
	}
	for _, a := range apps {
		pod := pods[a.name]
		if pod == nil {
			t.Fatalf("no Deployment %s", a.name)
		}
		// The function's container: https, the CA bundle, and of the TLS
		// volume the CA alone.
		fn := containers(pod)[1]
		env, _ := json.Marshal(fn["env"])
		mounts, _ := json.Marshal(fn["volumeMounts"])
		if !strings.Contains(string(env), fmt.Sprintf(`"value":"https://127.0.0.1:%d"`, a.s3)) || !strings.Contains(string(env), `{"name":"AWS_CA_BUNDLE","value":"/etc/hoard/ca/ca.crt"}`) {
			t.Errorf("%s's function's environment: %s", a.name, env)
		}
		if string(mounts) != `[{"mountPath":"/etc/hoard/ca/ca.crt","name":"tls","readOnly":true,"subPath":"ca.crt"}]` {
			t.Errorf("%s's function mounts %s, want the CA alone", a.name, mounts)
		}
		dir := filepath.Join(root, a.name)
		args := mountPod(t, dir, pod, secrets, "cachelet")
		exited := startProcess(t, hoard, args, filepath.Join(dir, "log"))
		s3 := httpsClient(t, pki.Files{}, filepath.Join(dir, "volumes", "tls", "ca.crt"))
		// S3 over https, the certificate trusted through the CA bundle the
		// function gets: an unsigned request is the S3 front's to refuse.
		waitUntil(t, ctx, a.name+"'s cachelet serving S3 over https", exited, filepath.Join(dir, "log"), func() error {
			return status(ctx, s3, fmt.Sprintf("https://127.0.0.1:%d/", a.s3), "", http.StatusForbidden)
		})
	}

	// Both joined their rings through etcd, over TLS with their
	// certificates.
	etcdTLS, err := pki.ClientConfig(pki.Files{Cert: etcdF.Cert, Key: etcdF.Key, CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := etcdauth.ClientTLS(etcd.Endpoints(), etcdauth.Credentials{}, etcdTLS)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for _, a := range apps {
		waitUntil(t, ctx, a.name+" in its ring", nil, filepath.Join(root, a.name, "log"), func() error {
			r, err := cli.Get(ctx, etcdmembership.RingPrefix("", a.name), clientv3.WithPrefix())
			if err == nil && len(r.Kvs) != 1 {
				err = fmt.Errorf("%d members", len(r.Kvs))
			}
			return err
		})
	}

	// thumbs's peer listener: its application's cachelets alone.
	peer := fmt.Sprintf("https://127.0.0.1:%d/", apps[0].peer)
	if _, err := answered(ctx, httpsClient(t, thumbs2F, ca.CertFile()), peer); err != nil {
		t.Errorf("another cachelet of thumbs at thumbs's peer listener: %v", err)
	}
	for _, c := range []struct {
		name  string
		files pki.Files
	}{{"etl's cachelet", etlF}, {"no certificate", pki.Files{}}, {"another CA's thumbs cachelet", strangerF}} {
		if err := status(ctx, httpsClient(t, c.files, ca.CertFile()), peer, "", 0); err != nil {
			t.Errorf("%s at thumbs's peer listener: %v", c.name, err)
		}
	}
}

// answered GETs url and returns the status of whatever answer came.
func answered(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// agentAnswersController signs in to the controller's dashboard (the
// admin's token, the CLI's certificate) and checks that its state lists
// agent-node-a as answering: the controller reached its API.
func agentAnswersController(ctx context.Context, t *testing.T, cliF pki.Files, caFile, controllerURL, admin string) error {
	t.Helper()
	c := httpsClient(t, cliF, caFile)
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	c.Jar = jar
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, controllerURL+"/v1/dashboard/login", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+admin)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	var login struct {
		Path string `json:"path"`
	}
	err = json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if err != nil || login.Path == "" {
		return fmt.Errorf("a login code: %v (%s)", err, resp.Status)
	}
	if _, err := answered(ctx, c, controllerURL+login.Path); err != nil {
		return err
	}
	req, err = http.NewRequestWithContext(ctx, http.MethodGet, controllerURL+"/dashboard/api/state", nil)
	if err != nil {
		return err
	}
	resp, err = c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Agents []struct {
			ID, Error string
		} `json:"agents"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("the dashboard's state (%s): %v", resp.Status, err)
	}
	if len(st.Agents) != 1 || st.Agents[0].ID != "agent-node-a" || st.Agents[0].Error != "" {
		return fmt.Errorf("the dashboard's agents: %+v", st.Agents)
	}
	return nil
}
