//go:build kube

// Package kubetest proves the Helm chart (deploy/helm/hoard) on a real
// Kubernetes control plane: it starts etcd (the project's embedded etcd)
// and kube-apiserver built from the pinned Kubernetes source (make
// kube-apiserver), renders the chart with helm (make helm) and applies
// every object server-side with dry-run and strict field validation, as
// `kubectl apply --server-side --dry-run=server` would. Run by make
// test-kube (part of make test); it needs $HOARD_HELM_BIN and
// $HOARD_KUBE_APISERVER_BIN.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hoard-io/hoard/internal/etcdembed"
)

// kubeVersion is the Kubernetes the chart is rendered for and checked
// against: the version make kube-apiserver builds.
const kubeVersion = "1.37.2"

const namespace = "hoard"

// apiserver is a running kube-apiserver and a client signed in to it as a
// member of system:masters.
type apiserver struct {
	url    string
	client *http.Client
	// The CA that signs the server's and its clients' certificates, and
	// the directory of the server's files.
	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
	dir   string
	// etcd is the embedded etcd's client URLs (the cluster's, which the
	// cluster test's agent uses too).
	etcd []string
	// resources maps apiVersion/kind to its REST path segment and scope,
	// from the server's discovery.
	mu        sync.Mutex
	resources map[string]resource
}

type resource struct {
	name       string
	namespaced bool
}

func bin(t *testing.T, env string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		t.Fatalf("$%s is not set: run make test-kube (or make test-cluster), which builds it", env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("$%s: %v", env, err)
	}
	return p
}

func TestChartDryRun(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	api := startAPIServer(t)
	api.create(t, "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}})

	chart := chartDir(t)
	for _, c := range []struct {
		name, values string
		set          []string
		want         []string // kinds the chart must render
	}{
		{"platform", "platform-values.yaml", nil, []string{"Deployment", "DaemonSet", "StatefulSet", "Service", "Secret", "ServiceAccount"}},
		{"platform-unprivileged-agent", "platform-values.yaml", []string{"--set", "agent.privileged=false"}, []string{"DaemonSet"}},
		{"sidecar", "sidecar-values.yaml", nil, []string{"Deployment", "StatefulSet", "Service", "ServiceAccount"}},
		{"platform-tls", "platform-tls-values.yaml", nil, []string{"Deployment", "DaemonSet", "StatefulSet", "Secret"}},
		// Each agent pod's own certificate from cert-manager's csi-driver
		// (an inline CSI volume; the Certificates are cert-manager's kind,
		// checked by TestChartCertManager).
		{"sidecar-tls-cert-manager-csi", "sidecar-values.yaml", []string{"--set", "tls.certManager.issuer=hoard-ca,tls.certManager.csiDriver=true,sidecar.apps[0].tlsSecret="}, []string{"Deployment"}},
		{"platform-tls-cert-manager-csi", "platform-values.yaml", []string{"--set", "tls.enabled=true,tls.certManager.issuer=hoard-ca,tls.certManager.csiDriver=true"}, []string{"DaemonSet", "Certificate"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, helm, chart, append([]string{"-f", filepath.Join(chart, "ci", c.values)}, c.set...)...)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.kind()]++
				if o.apiVersion() == "cert-manager.io/v1" {
					continue
				}
				if code, body := api.dryRunApply(t, o); code != http.StatusOK && code != http.StatusCreated {
					t.Errorf("%s %s refused (%d): %s", o.kind(), o.name(), code, body)
				}
			}
			t.Logf("%d objects applied (dry run): %v", len(objs), kinds)
			for _, k := range c.want {
				if kinds[k] == 0 {
					t.Errorf("the chart rendered no %s", k)
				}
			}
			// Dry-run: nothing was stored.
			for _, o := range objs {
				if o.kind() == "Deployment" {
					if code := api.get(t, "/apis/apps/v1/namespaces/"+namespace+"/deployments/"+o.name()); code != http.StatusNotFound {
						t.Errorf("deployment %s after a dry run: %d, want 404", o.name(), code)
					}
				}
			}
		})
	}

	// The check can fail: a field the API does not have, or a value it
	// refuses, is refused.
	objs := render(t, helm, chart, "-f", filepath.Join(chart, "ci", "platform-values.yaml"))
	var ds object
	for _, o := range objs {
		if o.kind() == "DaemonSet" {
			ds = o
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet rendered")
	}
	bad := clone(t, ds)
	container := bad["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	container["privilegd"] = true
	// (kube-apiserver answers an unknown field in an apply patch with 500,
	// "field not declared in schema".)
	if code, body := api.dryRunApply(t, bad); code < 400 || !strings.Contains(body, "privilegd") {
		t.Errorf("a DaemonSet with an unknown field: %d, want it refused naming the field: %s", code, body)
	}
	bad = clone(t, ds)
	bad["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)["ports"] = []any{map[string]any{"name": "api", "containerPort": 70000}}
	if code, body := api.dryRunApply(t, bad); code != http.StatusUnprocessableEntity {
		t.Errorf("a DaemonSet with port 70000: %d, want 422: %s", code, body)
	}
}

// TestChartCertManager: with a cert-manager issuer the chart asks
// cert-manager for the controller's and etcd's certificates. The
// Certificate resource is cert-manager's (a CRD this control plane does
// not have), so its rendering is checked here, not applied.
func TestChartCertManager(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	chart := chartDir(t)
	objs := render(t, helm, chart, "-f", filepath.Join(chart, "ci", "sidecar-values.yaml"),
		"--set", "tls.etcdSecret=,tls.certManager.issuer=hoard-ca,tls.certManager.issuerKind=ClusterIssuer")
	var certs []object
	for _, o := range objs {
		if o.kind() == "Certificate" {
			certs = append(certs, o)
		}
	}
	if len(certs) != 1 || certs[0].apiVersion() != "cert-manager.io/v1" {
		t.Fatalf("want etcd's cert-manager.io/v1 Certificate, got %d Certificates", len(certs))
	}
	spec := certs[0]["spec"].(map[string]any)
	if spec["secretName"] != "hoard-etcd-tls" || spec["issuerRef"].(map[string]any)["kind"] != "ClusterIssuer" {
		t.Errorf("etcd's Certificate: %v", spec)
	}
	dns := fmt.Sprint(spec["dnsNames"])
	if !strings.Contains(dns, "*.hoard-etcd.hoard.svc") || !strings.Contains(dns, "hoard-etcd.hoard.svc") {
		t.Errorf("etcd's Certificate names %s, not its members", dns)
	}

	// An application without a tlsSecret: a Certificate for its
	// cachelets (its identity, 127.0.0.1 for its function), or with the
	// csi-driver one per pod.
	objs = render(t, helm, chart, "-f", filepath.Join(chart, "ci", "sidecar-values.yaml"),
		"--set", "tls.certManager.issuer=hoard-ca,sidecar.apps[0].tlsSecret=")
	var thumbs map[string]any
	for _, o := range objs {
		if o.kind() == "Certificate" && o.name() == "thumbs-cachelet" {
			thumbs = o["spec"].(map[string]any)
		}
		if o.kind() == "Certificate" && o.name() == "etl-cachelet" {
			t.Error("a Certificate for etl, which has a tlsSecret")
		}
	}
	if thumbs == nil || fmt.Sprint(thumbs["uris"]) != "[hoard://app/thumbs/thumbs-cachelet]" || fmt.Sprint(thumbs["ipAddresses"]) != "[127.0.0.1]" || thumbs["secretName"] != "thumbs-cachelet-tls" {
		t.Errorf("thumbs's cachelets' Certificate: %v", thumbs)
	}
	objs = render(t, helm, chart, "-f", filepath.Join(chart, "ci", "sidecar-values.yaml"),
		"--set", "tls.certManager.issuer=hoard-ca,tls.certManager.csiDriver=true,sidecar.apps[0].tlsSecret=")
	for _, o := range objs {
		if o.kind() == "Certificate" && strings.HasSuffix(o.name(), "-cachelet") {
			t.Errorf("with the csi-driver, a Certificate %s", o.name())
		}
		if o.kind() == "Deployment" && o.name() == "thumbs" {
			b, _ := json.Marshal(podSpec(o)["volumes"])
			if !strings.Contains(string(b), `"csi.cert-manager.io/uri-sans":"hoard://app/thumbs/${POD_NAME}"`) || !strings.Contains(string(b), `"csi.cert-manager.io/ip-sans":"127.0.0.1"`) {
				t.Errorf("thumbs's volumes: %s", b)
			}
		}
	}
}

// TestChartCertManagerPlatform: in platform mode cert-manager issues the
// controller, etcd, the agents (one certificate they share, or one per
// pod through its csi-driver) and the agents' issuing CA, constrained to
// cachelets' identities; each Secret is the one its pods mount.
func TestChartCertManagerPlatform(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	chart := chartDir(t)
	base := []string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "tls.enabled=true,tls.certManager.issuer=hoard-ca"}
	certs := func(objs []object) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			if o.kind() == "Certificate" {
				m[o.name()] = o["spec"].(map[string]any)
			}
		}
		return m
	}
	mounted := func(objs []object, kind string) string {
		for _, o := range objs {
			if o.kind() == kind {
				b, _ := json.Marshal(podSpec(o)["volumes"])
				return string(b)
			}
		}
		t.Fatalf("no %s", kind)
		return ""
	}
	objs := render(t, helm, chart, base...)
	cs := certs(objs)
	if len(cs) != 5 {
		t.Fatalf("Certificates %v, want the controller's, the CLI's, etcd's, the agents' and their issuer's", cs)
	}
	if u := fmt.Sprint(cs["hoard-controller"]["uris"]); u != "[hoard://platform/controller]" {
		t.Errorf("the controller's URI SANs: %s", u)
	}
	if ip := fmt.Sprint(cs["hoard-controller"]["ipAddresses"]); ip != "[127.0.0.1]" {
		t.Errorf("the controller's IP SANs (kubectl port-forward): %s", ip)
	}
	if cli := cs["hoard-cli"]; fmt.Sprint(cli["uris"]) != "[hoard://platform/client/admin]" || fmt.Sprint(cli["usages"]) != "[client auth digital signature]" {
		t.Errorf("the CLI's Certificate: %v", cli)
	}
	agent := cs["hoard-agent"]
	if u := fmt.Sprint(agent["uris"]); !strings.HasPrefix(u, "[hoard://platform/agent/") || agent["secretName"] != "hoard-agent-tls" {
		t.Errorf("the agents' Certificate: %v", agent)
	}
	if us := fmt.Sprint(agent["usages"]); !strings.Contains(us, "server auth") || !strings.Contains(us, "client auth") {
		t.Errorf("the agents' usages: %s", us)
	}
	iss := cs["hoard-agent-issuer"]
	if iss["isCA"] != true || fmt.Sprint(iss["nameConstraints"]) != "map[critical:true permitted:map[uriDomains:[app]]]" || iss["secretName"] != "hoard-agent-issuer-tls" {
		t.Errorf("the agents' issuer: %v", iss)
	}
	vols := mounted(objs, "DaemonSet")
	for _, want := range []string{`"secretName":"hoard-agent-tls"`, `"secretName":"hoard-agent-issuer-tls"`, `"path":"ca.key"`} {
		if !strings.Contains(vols, want) {
			t.Errorf("the agents' volumes lack %s: %s", want, vols)
		}
	}
	if vols := mounted(objs, "Deployment"); !strings.Contains(vols, `"secretName":"hoard-controller-tls"`) {
		t.Errorf("the controller's volumes: %s", vols)
	}
	// Prometheus scrapes the controller and the agents over https.
	for _, o := range objs {
		if o.kind() == "Deployment" || o.kind() == "DaemonSet" {
			ann := o["spec"].(map[string]any)["template"].(map[string]any)["metadata"].(map[string]any)["annotations"].(map[string]any)
			if ann["prometheus.io/scheme"] != "https" {
				t.Errorf("%s's scrape annotations: %v", o.kind(), ann)
			}
		}
	}

	// Without name constraints (cert-manager's feature gate off).
	objs = render(t, helm, chart, append(base, "--set", "tls.certManager.nameConstraints=false")...)
	if nc, ok := certs(objs)["hoard-agent-issuer"]["nameConstraints"]; ok {
		t.Errorf("nameConstraints=false rendered %v", nc)
	}

	// One certificate per agent pod from the csi-driver: no shared one.
	objs = render(t, helm, chart, append(base, "--set", "tls.certManager.csiDriver=true")...)
	cs = certs(objs)
	if _, ok := cs["hoard-agent"]; ok || len(cs) != 4 {
		t.Errorf("with the csi-driver, Certificates %v", cs)
	}
	vols = mounted(objs, "DaemonSet")
	for _, want := range []string{`"driver":"csi.cert-manager.io"`, `"csi.cert-manager.io/uri-sans":"hoard://platform/agent/${POD_NAME}"`, `"csi.cert-manager.io/issuer-name":"hoard-ca"`, `"secretName":"hoard-agent-issuer-tls"`} {
		if !strings.Contains(vols, want) {
			t.Errorf("the agents' volumes lack %s: %s", want, vols)
		}
	}
}

// TestChartEtcdAuth: the controller turns etcd's authentication on and
// makes the agents' user, whose Secret (not root's) the agents mount;
// with auth left to the operator the controller does neither.
func TestChartEtcdAuth(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	chart := chartDir(t)
	find := func(objs []object, kind string) object {
		for _, o := range objs {
			if o.kind() == kind {
				return o
			}
		}
		t.Fatalf("no %s", kind)
		return nil
	}
	args := func(o object) string {
		b, _ := json.Marshal(containers(podSpec(o))[1]["args"])
		return string(b)
	}
	vols := func(o object) string {
		b, _ := json.Marshal(podSpec(o)["volumes"])
		return string(b)
	}
	objs := render(t, helm, chart, "-f", filepath.Join(chart, "ci", "platform-values.yaml"))
	if a := args(find(objs, "Deployment")); !strings.Contains(a, `"--etcd-enable-auth"`) || !strings.Contains(a, `"--etcd-agents-credentials=/run/hoard/etcd-agents.json"`) {
		t.Errorf("the controller's arguments: %s", a)
	}
	if v := vols(find(objs, "DaemonSet")); !strings.Contains(v, `"name":"hoard-etcd-agents"`) || strings.Contains(v, "hoard-etcd-root") {
		t.Errorf("the agents mount %s, want the agents' etcd Secret and not root's", v)
	}
	var made []string
	for _, o := range objs {
		if o.kind() == "Secret" {
			made = append(made, o.name())
		}
	}
	if fmt.Sprint(made) != "[hoard-etcd-agents hoard-tokens]" {
		t.Errorf("Secrets made %v, want the agents' etcd user's and the tokens (root's is the operator's here)", made)
	}

	objs = render(t, helm, chart, "-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "etcd.auth.enabled=false,etcd.agentCredentialsSecret=my-agents")
	if a := args(find(objs, "Deployment")); strings.Contains(a, "--etcd-enable-auth") || strings.Contains(a, "--etcd-agents-credentials") {
		t.Errorf("with etcd.auth.enabled=false the controller's arguments: %s", a)
	}
	if v := vols(find(objs, "DaemonSet")); !strings.Contains(v, `"name":"my-agents"`) {
		t.Errorf("the agents mount %s, want my-agents", v)
	}
}

// TestChartRefusesBadValues: values the chart cannot honour fail at
// render time, saying which.
func TestChartRefusesBadValues(t *testing.T) {
	helm := bin(t, "HOARD_HELM_BIN")
	chart := chartDir(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "store.endpoint is required"},
		{[]string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "etcd.replicas=2"}, "etcd.replicas must be odd"},
		{[]string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "store.identities=aws"}, "store.identities must be file or minio"},
		{[]string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "tls.enabled=true,tls.controllerSecret=c,tls.etcdSecret=e,tls.agentIssuerSecret=i"}, "tls.agentSecret (a Secret of type kubernetes.io/tls) or tls.certManager.issuer is required"},
		{[]string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "tls.enabled=true,tls.controllerSecret=c,tls.etcdSecret=e,tls.agentSecret=a"}, "tls.agentIssuerSecret (a Secret of type kubernetes.io/tls) or tls.certManager.issuer is required"},
		{[]string{"-f", filepath.Join(chart, "ci", "platform-values.yaml"), "--set", "etcd.auth.enabled=false"}, "etcd.agentCredentialsSecret is required with etcd.auth.enabled=false"},
		{[]string{"-f", filepath.Join(chart, "ci", "sidecar-values.yaml"), "--set", "sidecar.apps[0].name=Bad_Name"}, "1-40 of a-z 0-9 -"},
		{[]string{"-f", filepath.Join(chart, "ci", "sidecar-values.yaml"), "--set", "sidecar.apps[1].tlsSecret="}, "sidecar.apps[etl].tlsSecret (a Secret of type kubernetes.io/tls) or tls.certManager.issuer is required"},
	} {
		out, err := helmTemplate(helm, chart, c.args...)
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("helm template %v: %v, want an error saying %q; output:\n%.600s", c.args, err, c.want, out)
		}
	}
}

func chartDir(t *testing.T) string {
	t.Helper()
	d, err := filepath.Abs("../helm/hoard")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type object map[string]any

func (o object) kind() string { s, _ := o["kind"].(string); return s }
func (o object) apiVersion() string {
	s, _ := o["apiVersion"].(string)
	return s
}
func (o object) name() string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

func clone(t *testing.T, o object) object {
	t.Helper()
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var c object
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	return c
}

func helmTemplate(helm, chart string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := append([]string{"template", "hoard", chart, "--namespace", namespace, "--kube-version", kubeVersion}, args...)
	return exec.CommandContext(ctx, helm, a...).CombinedOutput()
}

// render runs helm template and returns its objects.
func render(t *testing.T, helm, chart string, args ...string) []object {
	t.Helper()
	out, err := helmTemplate(helm, chart, args...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	var objs []object
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template's output: %v", err)
		}
		if o == nil {
			continue
		}
		objs = append(objs, object(o))
	}
	if len(objs) == 0 {
		t.Fatal("helm template rendered nothing")
	}
	return objs
}

// startAPIServer starts etcd and kube-apiserver for the test's life.
func startAPIServer(t *testing.T) *apiserver {
	t.Helper()
	exe := bin(t, "HOARD_KUBE_APISERVER_BIN")
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// kube-apiserver grants etcd leases as long as its events live
	// (--event-ttl); the embedded etcd's cap is raised above that.
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", MaxLeaseTTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	ca, caKey := newCA(t)
	pemFile(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.Raw)
	serving, servingKey := issue(t, ca, caKey, "kube-apiserver", nil, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	pemFile(t, filepath.Join(dir, "apiserver.crt"), "CERTIFICATE", serving.Raw)
	keyFile(t, filepath.Join(dir, "apiserver.key"), servingKey)
	client, clientKey := issue(t, ca, caKey, "hoard-chart-test", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	keyFile(t, filepath.Join(dir, "sa.key"), saKey)

	port := freePort(t)
	cmd := exec.CommandContext(ctx, exe,
		"--etcd-servers="+strings.Join(etcd.Endpoints(), ","),
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+filepath.Join(dir, "apiserver.crt"),
		"--tls-private-key-file="+filepath.Join(dir, "apiserver.key"),
		"--client-ca-file="+filepath.Join(dir, "ca.crt"),
		"--service-account-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		// As kubeadm, EKS, GKE and AKS run it: privileged pods are a
		// namespace's Pod Security level's to allow or refuse.
		"--allow-privileged=true",
		"--event-ttl=10m",
		"--cert-dir="+filepath.Join(dir, "certs"),
	)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("kube-apiserver's log (end):\n%s", tail(logs.String(), 4000))
		}
	})

	pool := x509.NewCertPool()
	pool.AddCert(ca)
	api := &apiserver{
		ca: ca, caKey: caKey, dir: dir, etcd: etcd.Endpoints(),
		url: fmt.Sprintf("https://127.0.0.1:%d", port),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{{Certificate: [][]byte{client.Raw}, PrivateKey: clientKey}},
			MinVersion:   tls.VersionTLS12,
		}}},
	}
	// Ready when /readyz says so: every post-start hook done, the
	// built-in types served.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-exited:
			t.Fatalf("kube-apiserver exited: %v\n%s", exitErr, tail(logs.String(), 4000))
		default:
		}
		if code := api.get(t, "/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready in 2 minutes\n%s", tail(logs.String(), 4000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return api
}

func (a *apiserver) do(t *testing.T, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, a.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func (a *apiserver) get(t *testing.T, path string) int {
	t.Helper()
	code, _ := a.do(t, http.MethodGet, path, "", nil)
	return code
}

func (a *apiserver) create(t *testing.T, path string, obj any) {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := a.do(t, http.MethodPost, path, "application/json", b); code != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", path, code, body)
	}
}

// resource finds apiVersion/kind's REST name and scope in the server's
// discovery documents.
func (a *apiserver) resource(t *testing.T, apiVersion, kind string) (resource, bool) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resources == nil {
		a.resources = map[string]resource{}
	}
	if r, ok := a.resources[apiVersion+"/"+kind]; ok {
		return r, true
	}
	path := "/apis/" + apiVersion
	if apiVersion == "v1" {
		path = "/api/v1"
	}
	code, body := a.do(t, http.MethodGet, path, "", nil)
	if code != http.StatusOK {
		return resource{}, false
	}
	var list struct {
		Resources []struct {
			Name       string `json:"name"`
			Kind       string `json:"kind"`
			Namespaced bool   `json:"namespaced"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatalf("discovery %s: %v", path, err)
	}
	for _, r := range list.Resources {
		if !strings.Contains(r.Name, "/") {
			a.resources[apiVersion+"/"+r.Kind] = resource{r.Name, r.Namespaced}
		}
	}
	r, ok := a.resources[apiVersion+"/"+kind]
	return r, ok
}

// dryRunApply applies o server-side, dry-run, with strict field
// validation, and returns the server's status and answer.
func (a *apiserver) dryRunApply(t *testing.T, o object) (int, string) {
	t.Helper()
	return a.apply(t, o, true)
}

// apply applies o server-side (dry-run or not) in the test's namespace.
func (a *apiserver) apply(t *testing.T, o object, dryRun bool) (int, string) {
	t.Helper()
	r, ok := a.resource(t, o.apiVersion(), o.kind())
	if !ok {
		return 0, fmt.Sprintf("the API server does not serve %s %s", o.apiVersion(), o.kind())
	}
	path := "/apis/" + o.apiVersion()
	if o.apiVersion() == "v1" {
		path = "/api/v1"
	}
	if r.namespaced {
		path += "/namespaces/" + namespace
	}
	path += "/" + r.name + "/" + url.PathEscape(o.name()) + "?fieldManager=hoard-chart-test&fieldValidation=Strict&force=true"
	if dryRun {
		path += "&dryRun=All"
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	code, body := a.do(t, http.MethodPatch, path, "application/apply-patch+yaml", b)
	return code, tail(string(body), 1500)
}

func newCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hoard chart test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

var serial int64 = 1

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, orgs []string, ips []net.IP, usage x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: ips, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

func pemFile(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func keyFile(t *testing.T, path string, k *ecdsa.PrivateKey) {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pemFile(t, path, "EC PRIVATE KEY", der)
}

// freePort is a port nothing listens on now; kube-apiserver binds it
// itself. A race with another process taking it first shows as the
// server exiting, which fails the test loudly.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
