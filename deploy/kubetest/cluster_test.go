//go:build kube

package kubetest

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
)

// TestCluster runs a single-node cluster (make test-cluster; root): the
// embedded etcd, kube-apiserver, kubelet, kube-controller-manager and
// kube-scheduler built from the pinned source, Debian's containerd, runc
// and CNI bridge, the images imported from the archives `make images`
// writes (no registry). A pod of both images must run to completion and
// say what it ran; the node agent must start jailed in a pod and come
// back after a kill; then the chart's controller and agents must become
// ready, and an agent pod deleted be replaced by its DaemonSet. It needs
// $HOARD_KUBELET_BIN, $HOARD_KUBE_CONTROLLER_MANAGER_BIN,
// $HOARD_KUBE_SCHEDULER_BIN, $HOARD_HELM_BIN, $HOARD_MINIO_BIN,
// $HOARD_DEBIAN_ROOT (containerd, runc, the CNI plugins unpacked) and
// $HOARD_IMAGES (hoard.tar, hoard-worker.tar, pause.tar).
func TestCluster(t *testing.T) {
	kubelet := bin(t, "HOARD_KUBELET_BIN")
	debian := os.Getenv("HOARD_DEBIAN_ROOT")
	images := os.Getenv("HOARD_IMAGES")
	if debian == "" || images == "" {
		t.Fatal("$HOARD_DEBIAN_ROOT and $HOARD_IMAGES are required: run make test-cluster")
	}
	api := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The state lives outside t.TempDir: containerd's and the kubelet's
	// trees hold files the test's cleanup must not race with; removed at
	// the end.
	dir, err := os.MkdirTemp("", "hoard-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A shim can outlive containerd once its tasks are gone: end the
		// ones of this test's containerd (their -address names dir).
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			b, _ := os.ReadFile(f)
			if cmd := string(b); strings.Contains(cmd, "containerd-shim") && strings.Contains(cmd, dir+"/") {
				var pid int
				if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		// The kubelet bind-mounts its root directory, and containerd
		// its sandboxes' shm: undo what is left under dir, deepest first.
		b, _ := os.ReadFile("/proc/self/mountinfo")
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
				mounts = append(mounts, f[4])
			}
		}
		sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
		for _, m := range mounts {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v", m, err)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
		// containerd's parent cgroup of its containers (cgroupsPerQOS
		// off), empty once its tasks are gone.
		hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*/k8s.io")
		if fi, err := os.Stat("/sys/fs/cgroup/k8s.io"); err == nil && fi.IsDir() {
			hierarchies = append(hierarchies, "/sys/fs/cgroup/k8s.io")
		}
		for _, h := range hierarchies {
			os.Remove(h) // an error: still in use (another containerd's), left alone
		}
	})
	path := filepath.Join(debian, "usr/bin") + ":" + filepath.Join(debian, "usr/sbin") + ":" + os.Getenv("PATH")

	// containerd, with its CRI plugin. restrict_oom_score_adj: where the
	// machine withholds CAP_SYS_RESOURCE (containers, CI), runc cannot
	// lower the sandbox's OOM score, and sandboxes fail to start without it.
	sock := filepath.Join(dir, "containerd.sock")
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/hoard-io/pause:dev"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "containerd"), filepath.Join(dir, "containerd-state"), sock, filepath.Join(debian, "usr/lib/cni"), filepath.Join(dir, "cni"))
	writeFile(t, filepath.Join(dir, "containerd.toml"), conf)
	// Pod networking: a bridge on the node, addresses from host-local
	// (its state under dir); removed at the end.
	if err := os.MkdirAll(filepath.Join(dir, "cni"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cni", "10-hoard.conflist"), fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "hoard-test", "plugins": [
  {"type": "bridge", "bridge": "hoardtest0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "%s.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}}]}`, filepath.Join(dir, "cni-state"), podNet))
	t.Cleanup(func() { exec.Command("ip", "link", "del", "hoardtest0").Run() })
	containerd := start(ctx, t, "containerd", path, filepath.Join(debian, "usr/bin/containerd"), "--config", filepath.Join(dir, "containerd.toml"))
	waitFor(t, "containerd's socket", time.Minute, containerd, func() bool { _, err := os.Stat(sock); return err == nil })

	ctr := filepath.Join(debian, "usr/bin/ctr")
	// Containers outlive containerd (their shims are their parents): once
	// the kubelet has stopped (its cleanup runs before this one), every
	// task is killed and deleted, which ends the shims.
	t.Cleanup(func() {
		tasks := func() []string {
			out, err := exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "ls", "-q").Output()
			if err != nil {
				t.Errorf("ctr tasks ls: %v", err)
				return nil
			}
			return strings.Fields(string(out))
		}
		// A delete can race with a task ending or its shim leaving (a
		// pod's last task): errors are judged by what is left after.
		for range 3 {
			ids := tasks()
			if len(ids) == 0 {
				return
			}
			for _, id := range ids {
				exec.Command(ctr, "--address", sock, "-n", "k8s.io", "tasks", "delete", "--force", id).Run()
			}
			time.Sleep(500 * time.Millisecond)
		}
		if ids := tasks(); len(ids) > 0 {
			t.Errorf("tasks left running: %v", ids)
		}
	})

	// The images, from their archives.
	for _, name := range []string{"pause.tar", "hoard.tar", "hoard-worker.tar"} {
		out, err := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "images", "import", "--snapshotter", "native", filepath.Join(images, name)).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", name, err, out)
		}
	}

	// The kubelet, signed in as the node.
	node := "hoard-node"
	cert, key := issue(t, api.ca, api.caKey, "system:node:"+node, []string{"system:nodes"}, nil, x509.ExtKeyUsageClientAuth)
	pemFile(t, filepath.Join(dir, "node.crt"), "CERTIFICATE", cert.Raw)
	keyFile(t, filepath.Join(dir, "node.key"), key)
	serving, servingKey := issue(t, api.ca, api.caKey, node, nil, []net.IP{net.ParseIP("127.0.0.1")}, x509.ExtKeyUsageServerAuth)
	pemFile(t, filepath.Join(dir, "kubelet.crt"), "CERTIFICATE", serving.Raw)
	keyFile(t, filepath.Join(dir, "kubelet.key"), servingKey)
	writeFile(t, filepath.Join(dir, "kubeconfig"), fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: node, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: c, context: {cluster: c, user: node}}]
current-context: c
`, api.url, filepath.Join(api.dir, "ca.crt"), filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")))
	// failCgroupV1 false: the kubelet refuses cgroup v1 hosts unless told;
	// cgroupsPerQOS false: no QoS tree of cgroups (a container's host
	// may not let the kubelet make one).
	writeFile(t, filepath.Join(dir, "kubelet.yaml"), fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: %q}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
tlsCertFile: %q
tlsPrivateKeyFile: %q
address: 127.0.0.1
port: %d
healthzPort: %d
readOnlyPort: 0
resolvConf: ""
podLogsDir: %q
`, filepath.Join(api.dir, "ca.crt"), sock, filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key"), freePort(t), freePort(t), filepath.Join(dir, "pods")))
	klet := start(ctx, t, "kubelet", path, kubelet, "--config", filepath.Join(dir, "kubelet.yaml"), "--kubeconfig", filepath.Join(dir, "kubeconfig"),
		"--hostname-override", node, "--root-dir", filepath.Join(dir, "kubelet"), "--node-ip", nodeIP(t))
	waitFor(t, "the node's registration", 2*time.Minute, klet, func() bool {
		return api.get(t, "/api/v1/nodes/"+node) == http.StatusOK
	})

	// A pod of both images: the static hoard, and the worker image's
	// Python with boto3 and hoard_worker, as the agent runs them.
	pod := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "images", "namespace": "default"},
		"spec": map[string]any{
			"nodeName": node, "hostNetwork": true, "restartPolicy": "Never", "automountServiceAccountToken": false,
			"containers": []any{
				map[string]any{"name": "hoard", "image": "docker.io/hoard-io/hoard:dev", "imagePullPolicy": "Never", "args": []string{"version"}},
				map[string]any{"name": "worker", "image": "docker.io/hoard-io/hoard-worker:dev", "imagePullPolicy": "Never",
					"command": []string{"/usr/bin/python3", "-c", "import os, sys; sys.path.insert(0, os.environ['HOARD_WORKER_PATH']); import boto3, hoard_worker; print('boto3', boto3.__version__, 'uid', os.getuid())"}},
			},
		},
	}
	// (No controller-manager makes the namespace's default ServiceAccount,
	// which admission requires of every pod.)
	api.create(t, "/api/v1/namespaces/default/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": "default"}})
	api.create(t, "/api/v1/namespaces/default/pods", pod)
	var phase string
	waitFor(t, "the pod to finish", 3*time.Minute, klet, func() bool {
		code, body := api.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/images", "", nil)
		if code != http.StatusOK {
			return false
		}
		var p struct {
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		phase = p.Status.Phase
		return phase == "Succeeded" || phase == "Failed"
	})
	logs := map[string]string{}
	for _, c := range []string{"hoard", "worker"} {
		files, _ := filepath.Glob(filepath.Join(dir, "pods", "default_images_*", c, "*.log"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			logs[c] += string(b)
		}
	}
	t.Logf("pod %s; logs: %q", phase, logs)
	if phase != "Succeeded" {
		t.Fatalf("the pod %s", phase)
	}
	if !strings.Contains(logs["hoard"], "hoard dev") {
		t.Errorf("the hoard container said %q, want its version", logs["hoard"])
	}
	if !strings.Contains(logs["worker"], "boto3 1.43.64") {
		t.Errorf("the worker container said %q, want boto3 1.43.64", logs["worker"])
	}

	// The node agent in a pod as the chart runs it (privileged, root, a
	// read-only root file system, its secrets as an owner-only file) on
	// the cluster's etcd and a MinIO: it starts only where it can jail
	// functions (namespaces, cgroups), and says so. Then its process is
	// killed, and the kubelet must bring it back.
	minio, err := localstore.StartMinIO(ctx, localstore.Config{DataDir: filepath.Join(dir, "minio", "data"), Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minio.Close() })
	secrets := filepath.Join(dir, "agent-secrets")
	if err := os.MkdirAll(secrets, 0o700); err != nil {
		t.Fatal(err)
	}
	token, err := json.Marshal(map[string]string{"token": "agent-token-of-the-cluster-test", "store-access-key": minio.AccessKey(), "store-secret-key": minio.SecretKey()})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(secrets, "secrets.json"), string(token))
	agentPort := freePort(t)
	agent := map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": "agent", "namespace": "default"},
		"spec": map[string]any{
			"nodeName": node, "hostNetwork": true, "restartPolicy": "Always", "automountServiceAccountToken": false,
			"containers": []any{map[string]any{
				"name": "agent", "image": "docker.io/hoard-io/hoard-worker:dev", "imagePullPolicy": "Never",
				"args": []string{"agent", "--id=agent-" + node, fmt.Sprintf("--listen=127.0.0.1:%d", agentPort), "--dir=/var/lib/hoard",
					"--etcd-endpoints=" + strings.Join(api.etcd, ","), "--store-endpoint=" + minio.Endpoint(), "--secrets=/run/hoard/secrets.json"},
				"securityContext": map[string]any{"privileged": true, "runAsUser": 0, "readOnlyRootFilesystem": true},
				"volumeMounts": []any{
					map[string]any{"name": "run", "mountPath": "/run/hoard", "readOnly": true},
					map[string]any{"name": "state", "mountPath": "/var/lib/hoard"},
					map[string]any{"name": "tmp", "mountPath": "/tmp"},
				},
			}},
			"volumes": []any{
				map[string]any{"name": "run", "hostPath": map[string]any{"path": secrets, "type": "Directory"}},
				map[string]any{"name": "state", "emptyDir": map[string]any{}},
				map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
			},
		},
	}
	api.create(t, "/api/v1/namespaces/default/pods", agent)
	healthz := func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", agentPort))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	agentLog := func() string {
		files, _ := filepath.Glob(filepath.Join(dir, "pods", "default_agent_*", "agent", "*.log"))
		var all string
		for _, f := range files {
			b, _ := os.ReadFile(f)
			all += string(b)
		}
		return all
	}
	waitFor(t, "the agent's /healthz", 2*time.Minute, klet, func() bool {
		if healthz() {
			return true
		}
		if l := agentLog(); strings.Contains(l, "hoard: ") {
			t.Fatalf("the agent did not start:\n%s", tail(l, 3000))
		}
		return false
	})
	// Its start-up check of namespaces and cgroups passed: it jails
	// functions (it would refuse to start otherwise).
	waitFor(t, "the agent saying it jails functions", time.Minute, klet, func() bool {
		return strings.Contains(agentLog(), "functions run jailed")
	})
	for _, line := range strings.Split(agentLog(), "\n") {
		if strings.Contains(line, "msg=\"sandbox: ") {
			t.Logf("agent: %s", line[strings.Index(line, "msg="):])
		}
	}
	restarts := func() int {
		_, body := api.do(t, http.MethodGet, "/api/v1/namespaces/default/pods/agent", "", nil)
		var p struct {
			Status struct {
				ContainerStatuses []struct {
					RestartCount int `json:"restartCount"`
				} `json:"containerStatuses"`
			} `json:"status"`
		}
		if err := json.Unmarshal(body, &p); err != nil || len(p.Status.ContainerStatuses) == 0 {
			return -1
		}
		return p.Status.ContainerStatuses[0].RestartCount
	}
	waitFor(t, "the agent's status", time.Minute, klet, func() bool { return restarts() == 0 })
	out, err := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	killed := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "RUNNING" {
			// The agent's container is the one running task that is
			// not a sandbox (pause); kill its process, as a crash would.
			info, _ := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "containers", "info", f[0]).Output()
			if strings.Contains(string(info), "hoard-worker") {
				if out, err := exec.CommandContext(ctx, ctr, "--address", sock, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", f[0]).CombinedOutput(); err != nil {
					t.Fatalf("ctr tasks kill: %v\n%s", err, out)
				}
				killed++
			}
		}
	}
	if killed != 1 {
		t.Fatalf("found %d agent containers to kill in:\n%s", killed, out)
	}
	waitFor(t, "the agent back after its kill", 2*time.Minute, klet, func() bool { return restarts() >= 1 && healthz() })
	t.Logf("the agent came back (restarts: %d)", restarts())

	chartOnCluster(ctx, t, api, klet, dir, node)
}

// chartOnCluster installs the chart's platform (the controller and the
// agents' DaemonSet; etcd and the store outside the cluster, as with a
// managed etcd and S3) on the single node with the controller-manager and
// the scheduler: the pods must become ready, their secrets prepared by
// the init containers; a deleted agent pod must be replaced by its
// DaemonSet.
func chartOnCluster(ctx context.Context, t *testing.T, api *apiserver, klet *proc, dir, node string) {
	t.Helper()
	helm := bin(t, "HOARD_HELM_BIN")
	kcm := bin(t, "HOARD_KUBE_CONTROLLER_MANAGER_BIN")
	sched := bin(t, "HOARD_KUBE_SCHEDULER_BIN")
	ip := nodeIP(t)

	// The admin's kubeconfig, for the controller-manager and the scheduler.
	cert, key := issue(t, api.ca, api.caKey, "cluster-admin", []string{"system:masters"}, nil, x509.ExtKeyUsageClientAuth)
	pemFile(t, filepath.Join(dir, "admin.crt"), "CERTIFICATE", cert.Raw)
	keyFile(t, filepath.Join(dir, "admin.key"), key)
	writeFile(t, filepath.Join(dir, "admin.kubeconfig"), fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: admin, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: c, context: {cluster: c, user: admin}}]
current-context: c
`, api.url, filepath.Join(api.dir, "ca.crt"), filepath.Join(dir, "admin.crt"), filepath.Join(dir, "admin.key")))
	kc := filepath.Join(dir, "admin.kubeconfig")
	cm := start(ctx, t, "kube-controller-manager", os.Getenv("PATH"), kcm, "--kubeconfig", kc, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file", filepath.Join(api.dir, "sa.key"), "--root-ca-file", filepath.Join(api.dir, "ca.crt"),
		"--use-service-account-credentials=false")
	sc := start(ctx, t, "kube-scheduler", os.Getenv("PATH"), sched, "--kubeconfig", kc, "--leader-elect=false", "--secure-port=0")

	// hoard's etcd (authentication on, root's password in a Secret) and
	// its store, on the node's address, where pods reach them.
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: filepath.Join(dir, "hoard-etcd"), ClientAddr: ip + ":0", PeerAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	rootPassword := etcdauth.NewPassword()
	if err := etcdauth.Enable(ctx, etcd.Endpoints(), rootPassword); err != nil {
		t.Fatal(err)
	}
	store, err := localstore.StartMinIO(ctx, localstore.Config{DataDir: filepath.Join(dir, "store", "data"), Addr: ip + ":0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	api.create(t, "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": namespace}})
	secret := func(name string, data map[string]string) {
		api.create(t, "/api/v1/namespaces/"+namespace+"/secrets", map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": name}, "stringData": data})
	}
	secret("hoard-store", map[string]string{"access-key": store.AccessKey(), "secret-key": store.SecretKey()})
	secret("hoard-etcd-root", map[string]string{"username": "root", "password": rootPassword})

	// Installed with helm itself (not rendered and applied), so that the
	// upgrade at the end is helm's, with the Secrets it keeps.
	helmRun(ctx, t, helm, dir, kc, "install", "hoard", chartDir(t), "--namespace", namespace,
		"-f", filepath.Join(chartDir(t), "ci", "platform-values.yaml"),
		"--set", "etcd.deploy=false,etcd.endpoints[0]="+etcd.Endpoints()[0]+",store.endpoint="+store.Endpoint()+",store.identities=minio",
		"--set", "controller.resources.requests.cpu=10m,agent.resources.requests.cpu=10m,agent.resources.requests.memory=64Mi")

	ready := func(component string) []clusterPod { return readyPods(t, api, component) }
	t.Cleanup(func() {
		if t.Failed() {
			_, body := api.do(t, http.MethodGet, "/api/v1/namespaces/"+namespace+"/pods", "", nil)
			t.Logf("pods in %s: %s", namespace, tail(string(body), 6000))
		}
	})
	waitFor(t, "the controller and the agent ready", 4*time.Minute, klet, func() bool {
		for _, p := range []*proc{cm, sc} {
			select {
			case <-p.done:
				t.Fatalf("%s exited", p.name)
			default:
			}
		}
		return len(ready("controller")) == 1 && len(ready("agent")) == 1
	})
	first := ready("agent")[0]
	t.Logf("chart installed: controller %s and agent %s ready", ready("controller")[0].Metadata.Name, first.Metadata.Name)

	// An agent pod deleted comes back: its DaemonSet makes another.
	if code, body := api.do(t, http.MethodDelete, "/api/v1/namespaces/"+namespace+"/pods/"+first.Metadata.Name, "", nil); code != http.StatusOK {
		t.Fatalf("deleting %s: %d %s", first.Metadata.Name, code, body)
	}
	waitFor(t, "a new agent pod ready", 4*time.Minute, klet, func() bool {
		r := ready("agent")
		return len(r) == 1 && r[0].Metadata.UID != first.Metadata.UID
	})
	t.Logf("agent %s deleted; %s ready in its place", first.Metadata.Name, ready("agent")[0].Metadata.Name)

	// A function deployed through the controller runs on the agent's
	// node, jailed, and reads and writes the store through its
	// instance's cachelet.
	hoard := bin(t, "HOARD_BIN")
	_, body := api.do(t, http.MethodGet, "/api/v1/namespaces/"+namespace+"/secrets/hoard-tokens", "", nil)
	var tokens struct {
		Data map[string][]byte `json:"data"`
	}
	if err := json.Unmarshal(body, &tokens); err != nil || len(tokens.Data["admin-token"]) == 0 {
		t.Fatalf("the chart's tokens Secret: %v %s", err, tail(string(body), 500))
	}
	app := filepath.Join(dir, "upper")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(app, "hoard.yaml"), "name: upper\nbuckets: {kdata: read-write}\nfunctions:\n  upper: {handler: main.handler}\n")
	writeFile(t, filepath.Join(app, "main.py"), `import boto3

s3 = boto3.client("s3")


def handler(event, context):
    body = s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read()
    s3.put_object(Bucket=event["bucket"], Key="upper/" + event["key"], Body=body.upper())
    return {"bytes": len(body)}
`)
	mc, err := minio.New(strings.TrimPrefix(store.Endpoint(), "http://"), &minio.Options{Creds: credentials.NewStaticV4(store.AccessKey(), store.SecretKey(), "")})
	if err != nil {
		t.Fatal(err)
	}
	if err := mc.MakeBucket(ctx, "kdata", minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "hello from a pod"
	if _, err := mc.PutObject(ctx, "kdata", "k", strings.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(cctx, hoard, args...)
		cmd.Env = append(os.Environ(), "HOARD_CONTROLLER_URL=http://"+ready("controller")[0].Status.PodIP+":9100", "HOARD_CONTROLLER_TOKEN="+string(tokens.Data["admin-token"]))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("hoard %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	t.Logf("deploy: %s", strings.TrimSpace(cli("deploy", app)))
	t.Logf("invoke: %s", strings.TrimSpace(cli("invoke", "upper", "upper", "--data", `{"bucket": "kdata", "key": "k"}`)))
	obj, err := mc.GetObject(ctx, "kdata", "upper/k", minio.GetObjectOptions{})
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

	// The sidecar mode: two function pods of an application with a
	// cachelet each, joined to the application's ring in etcd; each
	// function writes through its cachelet and reads the other's object
	// back through it.
	doc, err := json.Marshal(map[string]any{
		"version": 1, "app": "thumbs",
		"access_key": "thumbs-function-key", "secret_key": "thumbs-function-secret-0123456789",
		"peer_secret":    "thumbs-peer-secret-0123456789",
		"etcd_endpoints": etcd.Endpoints(), "etcd_username": "root", "etcd_password": rootPassword,
		"store": map[string]any{"endpoint": store.Endpoint(), "access_key": store.AccessKey(), "secret_key": store.SecretKey()},
	})
	if err != nil {
		t.Fatal(err)
	}
	secret("thumbs-cachelet", map[string]string{"document.json": string(doc)})
	secret("thumbs-keys", map[string]string{"AWS_ACCESS_KEY_ID": "thumbs-function-key", "AWS_SECRET_ACCESS_KEY": "thumbs-function-secret-0123456789", "AWS_DEFAULT_REGION": "us-east-1"})
	// Objects neither function wrote, read by both: in one ring, the
	// cachelet that does not own such an object asks the one that does.
	// (An object a function wrote is in its own cachelet's memory; the
	// other's read of it goes to a peer only where the ring makes the
	// writer its owner, one chance in two: both such reads stay off the
	// peer protocol one time in four.)
	const shared = 16
	for i := range shared {
		v := fmt.Sprintf("shared object %d", i)
		if _, err := mc.PutObject(ctx, "kdata", fmt.Sprintf("shared/%02d", i), strings.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	script := `import boto3, os, time
s3 = boto3.client("s3")
me = os.environ["HOSTNAME"]
s3.put_object(Bucket="kdata", Key="sidecar/" + me, Body=me.encode())
while True:
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="kdata", Prefix="sidecar/").get("Contents", [])]
    if len(keys) >= 2:
        for k in keys:
            assert s3.get_object(Bucket="kdata", Key=k)["Body"].read() == k.split("/")[1].encode()
        for i in range(` + fmt.Sprint(shared) + `):
            assert s3.get_object(Bucket="kdata", Key="shared/%02d" % i)["Body"].read() == b"shared object %d" % i
        s3.put_object(Bucket="kdata", Key="sidecar-read/" + me, Body=b"ok")
        break
    time.sleep(0.5)
time.sleep(1e9)
`
	objs := render(t, helm, chartDir(t), "--set", "mode=sidecar,etcd.deploy=false,etcd.endpoints[0]="+etcd.Endpoints()[0]+",etcd.credentialsSecret=hoard-etcd-root",
		"--set-json", `sidecar.apps=[{"name":"thumbs","image":"docker.io/hoard-io/hoard-worker:dev","replicas":2,"secret":"thumbs-cachelet","envFrom":[{"secretRef":{"name":"thumbs-keys"}}],"command":["/usr/bin/python3","-c",`+strconvQuote(script)+`]}]`)
	for _, o := range objs {
		if code, body := api.apply(t, o, false); code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("%s %s refused (%d): %s", o.kind(), o.name(), code, body)
		}
	}
	waitFor(t, "both functions to read each other's object through their cachelets", 4*time.Minute, klet, func() bool {
		n := 0
		for o := range mc.ListObjects(ctx, "kdata", minio.ListObjectsOptions{Prefix: "sidecar-read/"}) {
			if o.Err == nil {
				n++
			}
		}
		return n == 2 && len(ready("function")) == 2
	})
	// They did as one ring: every shared object was read once through
	// its owner by the other cachelet, over the peer protocol (two rings
	// of one would serve none).
	served := 0.0
	for _, p := range ready("function") {
		resp, err := http.Get("http://" + p.Status.PodIP + ":9201/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "hoard_cachelet_peer_served_total") {
				var v float64
				if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); err == nil {
					served += v
				}
			}
		}
	}
	if served < shared {
		t.Errorf("the two cachelets served each other %v reads (hoard_cachelet_peer_served_total), want at least %d, one per shared object: not one ring", served, shared)
	}
	t.Logf("sidecar mode: 2 function pods ready, each read both written objects and %d shared ones through its cachelet; %v reads served by the peer", shared, served)

	// TLS turned on in the running install (the sidecar pods, whose
	// documents name etcd in plain, leave first).
	if code, body := api.do(t, http.MethodDelete, "/apis/apps/v1/namespaces/"+namespace+"/deployments/thumbs", "", nil); code != http.StatusOK {
		t.Fatalf("deleting the sidecar Deployment: %d %s", code, body)
	}
	tlsUpgrade(ctx, t, &release{api: api, klet: klet, dir: dir, helm: helm, kubeconfig: kc, hoard: hoard, ip: ip,
		etcd: etcd, etcdDir: filepath.Join(dir, "hoard-etcd"), mc: mc, adminToken: string(tokens.Data["admin-token"])})
}

// strconvQuote is s as a JSON string.
func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// proc is a process the test started; done closes when it exits.
type proc struct {
	name string
	done chan struct{}
	logs *bytes.Buffer
}

func start(ctx context.Context, t *testing.T, name, path, exe string, args ...string) *proc {
	t.Helper()
	cmd := exec.CommandContext(ctx, exe, args...)
	cmd.Env = append(os.Environ(), "PATH="+path)
	p := &proc{name: name, done: make(chan struct{}), logs: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s's log (end):\n%s", name, tail(p.logs.String(), 3000))
		}
	})
	return p
}

// waitFor polls cond until it holds, failing the test past limit or if
// p exits first.
func waitFor(t *testing.T, what string, limit time.Duration, p *proc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case <-p.done:
			t.Fatalf("%s exited while waiting for %s", p.name, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s in %v", what, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

// nodeIP is the machine's first non-loopback IPv4 address (the kubelet
// refuses a loopback node address).
func nodeIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Fatal("no non-loopback IPv4 address for the node")
	return ""
}
