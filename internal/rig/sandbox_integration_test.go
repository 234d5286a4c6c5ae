//go:build integration

package rig

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/netshape"
)

const attackerSpec = `
name: attacker
memory: 512MiB
timeout: 60s
keep_alive: 1h
max_instances: 1
cache: {budget: 32MiB}
buckets: {data: read-write}
functions:
  attack: {handler: fns.attack}
  noop: {handler: fns.noop}
`

const victimSpec = `
name: victim
memory: 128MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
cache: {budget: 16MiB}
functions:
  noop: {handler: fns.noop}
`

// The attacker reports what it could do; the test asserts on each.
const attackerFns = `
import errno, os, signal, socket, time
import boto3

def noop(event, context):
    return "ok"

def attempt(f):
    try:
        return {"ok": True, "value": f()}
    except Exception as e:
        return {"ok": False, "error": type(e).__name__ + ": " + str(e)}

def connect(hostport):
    host, port = hostport.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=2)
    s.close()
    return "connected"

def fork_bomb(n):
    kids, err = [], None
    for _ in range(n):
        try:
            pid = os.fork()
        except OSError as e:
            err = errno.errorcode.get(e.errno, str(e.errno))
            break
        if pid == 0:
            try:
                os.execv("/bin/sleep", ["sleep", "60"])
            finally:
                os._exit(0)
        kids.append(pid)
    for pid in kids:
        os.kill(pid, signal.SIGKILL)
    for pid in kids:
        os.waitpid(pid, 0)
    return {"forked": len(kids), "error": err}

def write(path):
    with open(path, "w") as f:
        f.write("x")
    return "written"

def attack(event, context):
    out = {}
    out["uid"] = os.getuid()
    out["gid"] = os.getgid()
    out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    out["hostname"] = socket.gethostname()
    out["host_pids"] = {}
    for pid in event["host_pids"]:
        out["host_pids"][str(pid)] = {
            "environ": attempt(lambda: open("/proc/%d/environ" % pid, "rb").read().decode(errors="replace")),
            "kill": attempt(lambda: os.kill(pid, 0)),
        }
    out["paths"] = {p: attempt(lambda: os.listdir(p) if os.path.isdir(p) else open(p, "rb").read().decode(errors="replace"))
                    for p in event["paths"]}
    out["connect"] = {a: attempt(lambda: connect(a)) for a in event["addrs"]}
    s3 = boto3.client("s3")
    out["s3_put"] = attempt(lambda: s3.put_object(Bucket="data", Key="attacker/x", Body=b"hello") and "ok")
    out["s3_get"] = attempt(lambda: s3.get_object(Bucket="data", Key="attacker/x")["Body"].read().decode())
    out["tmp"] = attempt(lambda: write("/tmp/attacker"))
    out["code_write"] = attempt(lambda: write(os.path.join(os.getcwd(), "evil.py")))
    out["cwd"] = os.getcwd()
    out["endpoint"] = os.environ.get("AWS_ENDPOINT_URL", "")
    out["usr_write"] = attempt(lambda: write("/usr/evil"))
    out["fork_bomb"] = fork_bomb(event["forks"])
    return out
`

// deployCode deploys spec with fns as fns.py.
func (e *env) deployCode(t testing.TB, spec, fns string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fns.py"), []byte(fns), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Controller.Deploy(context.Background(), pkg.Data); err != nil {
		t.Fatal(err)
	}
}

// cacheletPID finds the host pid of instance id's cachelet: the `hoard
// serve` whose document was in the instance's directory.
func cacheletPID(t *testing.T, id string) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmd := strings.Split(string(b), "\x00")
		if len(cmd) > 3 && cmd[1] == "serve" && strings.Contains(cmd[3], "/instances/"+id+"/") {
			return pid
		}
	}
	t.Fatalf("no cachelet process for instance %s", id)
	return 0
}

func hostPort(t *testing.T, u string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return p.Host
}

// TestSandbox deploys a function that attacks its host and its
// neighbours, and checks that each attempt fails, while what a function
// is meant to do works.
func TestSandbox(t *testing.T) {
	e := start(t)
	c := e.p.Controller
	e.deployCode(t, victimSpec, attackerFns)
	e.deployCode(t, attackerSpec, attackerFns)
	if rec := invoke(t, c, "victim", "noop", map[string]any{}); !rec.OK {
		t.Fatalf("victim: %+v %s", rec.Error, rec.Log)
	}
	if rec := invoke(t, c, "attacker", "noop", map[string]any{}); !rec.OK {
		t.Fatalf("attacker: %+v %s", rec.Error, rec.Log)
	}
	byApp := map[string]api.InstanceInfo{}
	for _, in := range e.p.Agent.Instances() {
		byApp[in.App] = in
	}
	victim, attacker := byApp["victim"], byApp["attacker"]
	if victim.ID == "" || attacker.ID == "" {
		t.Fatalf("instances %+v", byApp)
	}
	ownCachelet, victimCachelet := cacheletPID(t, attacker.ID), cacheletPID(t, victim.ID)
	agentDir := filepath.Join(e.cfg.Dir, "agent")
	paths := []string{
		e.cfg.Dir, agentDir, filepath.Join(agentDir, "instances"),
		filepath.Join(agentDir, "instances", victim.ID), filepath.Join(agentDir, "instances", attacker.ID),
		filepath.Join(agentDir, "code"), filepath.Join(e.cfg.Dir, "credentials.json"),
	}
	addrs := map[string]string{
		"etcd":                hostPort(t, e.etcd.Endpoints()[0]),
		"controller":          e.cfg.ControllerListener.Addr().String(),
		"agent":               hostPort(t, e.p.AgentURL),
		"store":               hostPort(t, e.minio.Endpoint()),
		"victim peer port":    victim.PeerAddr,
		"victim S3 endpoint":  hostPort(t, victim.Endpoint),
		"own cachelet's host": hostPort(t, attacker.Endpoint),
		"own peer port":       attacker.PeerAddr,
	}
	var addrList []string
	for _, a := range addrs {
		addrList = append(addrList, a)
	}
	const forks = 2000
	rec := invoke(t, c, "attacker", "attack", map[string]any{
		"host_pids": []int{os.Getpid(), ownCachelet, victimCachelet},
		"paths":     paths, "addrs": addrList, "forks": forks,
	})
	if !rec.OK {
		t.Fatalf("attack: %+v %s", rec.Error, rec.Log)
	}
	type result struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	var r struct {
		UID, GID int
		PIDs     []int `json:"pids"`
		Hostname string
		HostPIDs map[string]struct{ Environ, Kill result } `json:"host_pids"`
		Paths    map[string]result
		Connect  map[string]result
		S3Put    result `json:"s3_put"`
		S3Get    struct {
			result
			Value string
		} `json:"s3_get"`
		Tmp       result
		CodeWrite result `json:"code_write"`
		UsrWrite  result `json:"usr_write"`
		Cwd       string
		Endpoint  string // the function's AWS_ENDPOINT_URL: its cachelet, in its namespace
		ForkBomb  struct {
			Forked int
			Error  string
		} `json:"fork_bomb"`
	}
	if err := json.Unmarshal(rec.Result, &r); err != nil {
		t.Fatalf("%v: %s", err, rec.Result)
	}
	t.Logf("attack report: %s", rec.Result)

	if r.UID == 0 || r.GID == 0 {
		t.Errorf("the function runs as uid %d gid %d; want unprivileged", r.UID, r.GID)
	}
	if len(r.PIDs) > 3 {
		t.Errorf("the function sees processes %v; want only its own (at most 3)", r.PIDs)
	}
	if r.Hostname == "" || r.Hostname == mustHostname(t) {
		t.Errorf("host name %q: want the jail's own", r.Hostname)
	}
	for pid, got := range r.HostPIDs {
		if got.Environ.OK {
			t.Errorf("read /proc/%s/environ (a host process) from the jail", pid)
		}
	}
	// Host pids do not exist in the jail's PID namespace (1 is the
	// worker itself).
	for _, pid := range []int{os.Getpid(), ownCachelet, victimCachelet} {
		if got := r.HostPIDs[strconv.Itoa(pid)]; got.Kill.OK {
			t.Errorf("signalled host process %d from the jail", pid)
		}
	}
	for _, p := range paths {
		if got := r.Paths[p]; got.OK || !strings.Contains(got.Error, "FileNotFoundError") {
			t.Errorf("%s from the jail: %+v; want not found", p, got)
		}
	}
	// The jail's loopback has one listener, its own cachelet's S3 socket,
	// on a port the kernel picked in the jail's namespace: a host port of
	// the same number reaches that socket, not the host's.
	own := r.Endpoint[strings.LastIndex(r.Endpoint, ":")+1:]
	if own == "" || !strings.HasPrefix(r.Endpoint, "http://127.0.0.1:") {
		t.Errorf("the function's endpoint %q: want its cachelet on the jail's loopback", r.Endpoint)
	}
	for what, a := range addrs {
		if got := r.Connect[a]; got.OK && a != "127.0.0.1:"+own {
			t.Errorf("connected to the %s (%s) from the jail", what, a)
		}
	}
	if !r.S3Put.OK || !r.S3Get.OK || r.S3Get.Value != "hello" {
		t.Errorf("own cachelet's S3: put %+v get %+v", r.S3Put, r.S3Get)
	}
	if !r.Tmp.OK {
		t.Errorf("/tmp not writable: %+v", r.Tmp)
	}
	if r.Cwd != "/var/task" {
		t.Errorf("working directory %q; want /var/task", r.Cwd)
	}
	if r.CodeWrite.OK || !strings.Contains(r.CodeWrite.Error, "Read-only") {
		t.Errorf("writing to the code directory: %+v; want a read-only file system", r.CodeWrite)
	}
	if r.UsrWrite.OK {
		t.Errorf("wrote to /usr")
	}
	if r.ForkBomb.Forked >= forks || r.ForkBomb.Error != "EAGAIN" {
		t.Errorf("fork bomb: %d forks, error %q; want stopped by the pids limit (EAGAIN)", r.ForkBomb.Forked, r.ForkBomb.Error)
	}
	// The instance survives its function's fork bomb.
	if rec := invoke(t, c, "attacker", "noop", map[string]any{}); !rec.OK {
		t.Errorf("after the attack: %+v %s", rec.Error, rec.Log)
	}
}

func mustHostname(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const benchSpec = `
name: bench
memory: 128MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
cache: {budget: 16MiB}
functions:
  noop: {handler: fns.noop}
`

// BenchmarkJail measures what jails cost, with functions unjailed and
// jailed on one host in one run: an instance's cold start (the agent's
// load time: code, sandbox, jail, cachelet, worker ready) and a warm
// invocation of a function that does nothing (through the controller and
// the agent, as a client sees it). Each iteration deploys a new version
// (one cold start) and invokes it warm 20 times; the metrics are medians.
// It logs the ratios (-v shows them).
//
//	go test -tags integration -run '^$' -bench Jail -benchtime 20x -v ./internal/rig
func BenchmarkJail(b *testing.B) {
	const warm = 20
	var got [2]struct{ cold, warm time.Duration }
	for i, mode := range []string{"unjailed", "jailed"} {
		b.Run(mode, func(b *testing.B) {
			e := startShaped(b, netshape.Link{}, func(c *Config) { c.Unjailed = mode == "unjailed" })
			c := e.p.Controller
			ctx := context.Background()
			var cold, hot []time.Duration
			b.ResetTimer()
			for n := range b.N {
				e.deployCode(b, benchSpec, fmt.Sprintf("# version %d\n%s", n, attackerFns))
				rec, err := c.Invoke(ctx, "bench", "noop", []byte("{}"), "bench")
				if err != nil || !rec.OK {
					b.Fatalf("cold invocation: %v %+v", err, rec)
				}
				for _, in := range e.p.Agent.Instances() {
					if in.ID == rec.Instance {
						cold = append(cold, time.Duration(in.StartMillis*float64(time.Millisecond)))
					}
				}
				for range warm {
					start := time.Now()
					rec, err := c.Invoke(ctx, "bench", "noop", []byte("{}"), "bench")
					if err != nil || !rec.OK {
						b.Fatalf("warm invocation: %v %+v", err, rec)
					}
					hot = append(hot, time.Since(start))
				}
			}
			got[i].cold, got[i].warm = median(cold), median(hot)
			b.ReportMetric(float64(got[i].cold.Microseconds())/1e3, "cold-start-ms")
			b.ReportMetric(float64(got[i].warm.Microseconds())/1e3, "invoke-ms")
		})
	}
	if got[0].cold > 0 && got[1].cold > 0 {
		b.Logf("cold start: unjailed %v, jailed %v (x%.2f); warm invocation: unjailed %v, jailed %v (x%.2f)",
			got[0].cold.Round(time.Microsecond), got[1].cold.Round(time.Microsecond), float64(got[1].cold)/float64(got[0].cold),
			got[0].warm.Round(time.Microsecond), got[1].warm.Round(time.Microsecond), float64(got[1].warm)/float64(got[0].warm))
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
