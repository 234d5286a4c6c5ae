//go:build kube

package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/pki"
)

// podNet is the first three octets of the single-node cluster's pod
// addresses (its CNI bridge's /24).
const podNet = "10.244.7"

// clusterPod is what the cluster test reads of a pod.
type clusterPod struct {
	Metadata struct {
		Name   string            `json:"name"`
		UID    string            `json:"uid"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Status struct {
		Phase      string `json:"phase"`
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// readyPods are the ready pods of the chart's component in the test's
// namespace.
func readyPods(t *testing.T, api *apiserver, component string) []clusterPod {
	t.Helper()
	_, body := api.do(t, http.MethodGet, "/api/v1/namespaces/"+namespace+"/pods?labelSelector=app.kubernetes.io%2Fcomponent%3D"+component, "", nil)
	var list struct{ Items []clusterPod }
	if err := json.Unmarshal(body, &list); err != nil {
		t.Fatal(err)
	}
	var out []clusterPod
	for _, p := range list.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				out = append(out, p)
			}
		}
	}
	return out
}

// helmRun runs helm against the cluster as its admin, its own state under
// dir, and returns its output.
func helmRun(ctx context.Context, t *testing.T, helm, dir, kubeconfig string, args ...string) string {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, helm, append(args, "--kubeconfig", kubeconfig)...)
	home := filepath.Join(dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(home, "cache"), "HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args[:min(2, len(args))], " "), err, tail(string(out), 3000))
	}
	return string(out)
}

// release is the chart installed on the single-node cluster (platform
// mode, etcd and the store outside it), with the function upper
// deployed.
type release struct {
	api                              *apiserver
	klet                             *proc
	dir, helm, kubeconfig, hoard, ip string
	etcd                             *etcdembed.Server
	etcdDir                          string
	mc                               *minio.Client
	adminToken                       string
}

// tlsUpgrade turns TLS on in the running install as docs/kubernetes.md
// says for an etcd of the operator's: the Secrets made, etcd restarted
// with its certificate and client certificates required, then helm
// upgrade --reuse-values with tls.enabled and etcd's https endpoint. The
// controller and the agent must come back ready with new pods, the
// Secrets helm keeps (tokens, etcd's agents' user) unchanged, the
// function deployed before the upgrade invoked again over mutual TLS
// (its record kept in etcd), and the controller must no longer answer in
// plain HTTP.
func tlsUpgrade(ctx context.Context, t *testing.T, r *release) {
	t.Helper()
	secretData := func(name string) map[string]string {
		_, body := r.api.do(t, http.MethodGet, "/api/v1/namespaces/"+namespace+"/secrets/"+name, "", nil)
		var s struct {
			Data map[string][]byte `json:"data"`
		}
		if err := json.Unmarshal(body, &s); err != nil || len(s.Data) == 0 {
			t.Fatalf("Secret %s: %v %s", name, err, tail(string(body), 500))
		}
		m := map[string]string{}
		for k, v := range s.Data {
			m[k] = string(v)
		}
		return m
	}
	keptAgents, keptTokens := secretData("hoard-etcd-agents"), secretData("hoard-tokens")
	ctrlBefore, agentBefore := readyPods(t, r.api, "controller"), readyPods(t, r.api, "agent")
	if len(ctrlBefore) != 1 || len(agentBefore) != 1 {
		t.Fatalf("before the upgrade: %d controllers and %d agents ready, want 1 and 1", len(ctrlBefore), len(agentBefore))
	}

	// The operator's PKI. The controller's certificate names every pod
	// address of the node, as the CLI reaches it at its pod's (no
	// cluster DNS or kube-proxy here; elsewhere its Service's name).
	ca, err := pki.OpenCA(filepath.Join(r.dir, "pki", "ca"), nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, id pki.Identity, server bool, hosts ...string) pki.Files {
		f, err := ca.Issue(name, pki.Request{Identity: id, Hosts: hosts, Server: server, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	hosts := []string{"127.0.0.1", "hoard-controller.hoard.svc"}
	for i := 1; i < 255; i++ {
		hosts = append(hosts, fmt.Sprintf("%s.%d", podNet, i))
	}
	controllerF := issue("controller", pki.Controller(), true, hosts...)
	agentF := issue("agent", pki.Agent("hoard-agent"), true, "127.0.0.1")
	etcdF := issue("etcd", pki.Client("etcd"), true, r.ip)
	cliF := issue("cli", pki.Client("admin"), false)
	issuerDir := filepath.Join(r.dir, "pki", "issuer")
	if err := ca.IssueCA(issuerDir); err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tlsSecret := func(name, cert, key string) {
		r.api.create(t, "/api/v1/namespaces/"+namespace+"/secrets", map[string]any{"apiVersion": "v1", "kind": "Secret",
			"metadata": map[string]any{"name": name}, "type": "kubernetes.io/tls",
			"stringData": map[string]string{"tls.crt": read(cert), "tls.key": read(key), "ca.crt": read(ca.CertFile())}})
	}
	tlsSecret("hoard-controller-tls", controllerF.Cert, controllerF.Key)
	tlsSecret("hoard-agent-tls", agentF.Cert, agentF.Key)
	tlsSecret("hoard-agent-issuer-tls", filepath.Join(issuerDir, "ca.crt"), filepath.Join(issuerDir, "ca.key"))

	// etcd to TLS: the same member and data, on the same address.
	addr := strings.TrimPrefix(r.etcd.Endpoints()[0], "http://")
	r.etcd.Close()
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: r.etcdDir, ClientAddr: addr, PeerAddr: "127.0.0.1:0",
		TLS: &etcdembed.TLSFiles{Cert: etcdF.Cert, Key: etcdF.Key, CA: ca.CertFile()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)

	start := time.Now()
	out := helmRun(ctx, t, r.helm, r.dir, r.kubeconfig, "upgrade", "hoard", chartDir(t), "--namespace", namespace, "--reuse-values",
		"--set", "tls.enabled=true,tls.controllerSecret=hoard-controller-tls,tls.agentSecret=hoard-agent-tls,tls.agentIssuerSecret=hoard-agent-issuer-tls",
		"--set", "etcd.endpoints[0]="+etcd.Endpoints()[0])
	t.Logf("helm upgrade: %s", firstLine(out))
	waitFor(t, "the controller and the agent ready again, with TLS", 4*time.Minute, r.klet, func() bool {
		c, a := readyPods(t, r.api, "controller"), readyPods(t, r.api, "agent")
		return len(c) == 1 && len(a) == 1 && c[0].Metadata.UID != ctrlBefore[0].Metadata.UID && a[0].Metadata.UID != agentBefore[0].Metadata.UID
	})
	ctrl := readyPods(t, r.api, "controller")[0]
	t.Logf("TLS on: controller %s and agent %s ready %v after helm upgrade", ctrl.Metadata.Name, readyPods(t, r.api, "agent")[0].Metadata.Name,
		time.Since(start).Round(time.Second))
	if got := secretData("hoard-etcd-agents"); got["password"] != keptAgents["password"] {
		t.Error("helm upgrade changed the agents' etcd password")
	}
	if got := secretData("hoard-tokens"); got["admin-token"] != keptTokens["admin-token"] || got["agent-token"] != keptTokens["agent-token"] {
		t.Error("helm upgrade changed the tokens")
	}

	// The function deployed before, invoked over mutual TLS: the CLI
	// with a certificate of the CA, the function's cachelet's from the
	// agent's issuer.
	want := "hello again, over tls"
	if _, err := r.mc.PutObject(ctx, "kdata", "k2", strings.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.hoard, "invoke", "upper", "upper", "--data", `{"bucket": "kdata", "key": "k2"}`)
	cmd.Env = append(os.Environ(), "HOARD_CONTROLLER_URL=https://"+ctrl.Status.PodIP+":9100", "HOARD_CONTROLLER_TOKEN="+r.adminToken,
		"HOARD_TLS_CA="+ca.CertFile(), "HOARD_TLS_CERT="+cliF.Cert, "HOARD_TLS_KEY="+cliF.Key)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hoard invoke over TLS: %v\n%s", err, b)
	}
	t.Logf("invoke over TLS: %s", strings.TrimSpace(string(b)))
	obj, err := r.mc.GetObject(ctx, "kdata", "upper/k2", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("the function's output: %v", err)
	}
	if string(got) != strings.ToUpper(want) {
		t.Errorf("the function wrote %q, want %q", got, strings.ToUpper(want))
	}

	// Plain HTTP is over.
	hc := &http.Client{Timeout: 10 * time.Second}
	if resp, err := hc.Get("http://" + ctrl.Status.PodIP + ":9100/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the controller still answers plain HTTP after the upgrade")
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
