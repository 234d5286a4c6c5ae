//go:build integration

package rig

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

// An instance's cachelet, as the agent starts it, runs as an
// unprivileged uid of its own, has no secret on its command line or in
// its environment, its configuration document (its uid's alone, 0600) is
// gone once it serves, and its control socket is private and refuses
// whoever lacks the instance's token: another process (the function,
// say) can neither read the cache's access metadata nor drop or shrink
// it.
func TestCacheletContract(t *testing.T) {
	e := start(t)
	e.deploy(t, testSpec)
	e.put(t, "data", "hello.txt", "hello, hoard")
	rec := invoke(t, e.p.Controller, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
	if !rec.OK {
		t.Fatalf("invocation: %+v", rec.Error)
	}
	dir := filepath.Join(e.cfg.Dir, "agent", "instances", rec.Instance)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("instance directory %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	in := e.p.Agent.Instance(rec.Instance)
	if in == nil {
		t.Fatalf("no instance %s", rec.Instance)
	}
	// The cachelet runs as a uid of its own, neither root nor its
	// function's, which owns its private directory (0700), control
	// socket (0600) and nothing else of the agent's.
	fnUID, uid := in.UIDs()
	if uid == 0 || uid == fnUID {
		t.Fatalf("the cachelet's uid %d, the function's %d: want two unprivileged uids", uid, fnUID)
	}
	pid := in.CacheletPID()
	if got := procUIDs(t, pid); got != [4]int{uid, uid, uid, uid} {
		t.Errorf("the cachelet's process runs as uids %v; want %d", got, uid)
	}
	socket := in.ControlSocket()
	for p, mode := range map[string]os.FileMode{filepath.Dir(socket): os.ModeDir | 0o700, socket: os.ModeSocket | 0o600} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&(os.ModeType|os.ModePerm) != mode || int(st.Uid) != uid {
			t.Errorf("%s: mode %v owner %d; want %v, owned by the cachelet's uid %d", p, fi.Mode(), st.Uid, mode, uid)
		}
	}
	for _, d := range []string{dir, filepath.Dir(socket)} {
		if _, err := os.Stat(filepath.Join(d, "cachelet.json")); !os.IsNotExist(err) {
			t.Fatalf("the configuration document outlived the start: %v", err)
		}
	}

	// No secret on its command line or in its environment.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(cmdline, []byte(filepath.Join(filepath.Dir(socket), "cachelet.json"))) {
		t.Errorf("the cachelet was not started on its document: %q", cmdline)
	}
	creds, _ := e.p.Controller.Credentials("t1")
	secrets := []string{e.cfg.StoreSecretKey, e.cfg.ControllerToken, e.cfg.EtcdCredentials.Password, creds.PlatformToken}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
	if len(vars) != 1 || !strings.HasPrefix(vars[0], "PATH=") {
		t.Errorf("the cachelet's environment holds more than PATH: %d variables", len(vars))
	}
	for _, s := range secrets {
		if bytes.Contains(cmdline, []byte(s)) || bytes.Contains(environ, []byte(s)) {
			t.Errorf("a secret is on the cachelet's command line or in its environment")
		}
	}

	for _, auth := range []string{"", "Bearer " + control.NewToken()} {
		for _, req := range []string{"GET /v1/access", "POST /v1/drop", "POST /v1/budget", "GET /v1/stats"} {
			status, err := raw(socket, req, auth)
			if err != nil || status != http.StatusUnauthorized {
				t.Errorf("%s with authorization %q: %d, %v; want 401", req, auth, status, err)
			}
		}
	}
	// The spec's cache settings, as the cachelet applied them.
	got, err := in.CacheSettings(t.Context())
	want := cacheconfig.Settings{Consistency: "strong", Eviction: cacheconfig.PolicyOwnerLRU, Budget: 32 << 20,
		MaxObjectSize: 16 << 20, MemoryLimitOverhead: cacheconfig.DefaultMemoryOverhead,
		// OFC's sweep, on by default.
		SweepInterval: cacheconfig.Duration(cacheconfig.OFCSweepInterval), SweepMinReads: cacheconfig.OFCSweepMinReads,
		SweepIdle: cacheconfig.Duration(cacheconfig.OFCSweepIdle)}
	if err != nil || got != want {
		t.Fatalf("cache settings\n got %+v, %v\nwant %+v", got, err, want)
	}
	again := invoke(t, e.p.Controller, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
	if again.Instance != rec.Instance || again.Reads["local_hit"].Count != 1 {
		t.Fatalf("after the refused requests: instance %s (first %s), reads %+v; want the cached object hit", again.Instance, rec.Instance, again.Reads)
	}
}

// raw sends one request by hand on a fresh connection to the socket.
func raw(socket, req, auth string) (int, error) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	body := `{"bucket": "data", "bytes": 0}`
	if strings.HasSuffix(req, "budget") {
		body = `{"bytes": 0}`
	} else if strings.HasSuffix(req, "drop") {
		body = `{"bucket": "data"}`
	}
	h := ""
	if auth != "" {
		h = "Authorization: " + auth + "\r\n"
	}
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: cachelet\r\n%sContent-Length: %d\r\n\r\n%s", req, h, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// procUIDs are process pid's real, effective, saved and file-system uids.
func procUIDs(t *testing.T, pid int) (uids [4]int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 5 && f[0] == "Uid:" {
			for i := range uids {
				uids[i], _ = strconv.Atoi(f[i+1])
			}
			return uids
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return uids
}
