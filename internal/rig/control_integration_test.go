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
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

// An instance's cachelet, as the agent starts it, has no secret on its
// command line or in its environment, its configuration document is gone
// once it serves, and its control socket is private and refuses whoever
// lacks the instance's token: another process of the same user (the
// function, say) can neither read the cache's access metadata nor drop or
// shrink it.
func TestCacheletContract(t *testing.T) {
	e := start(t)
	e.deploy(t, testSpec)
	e.put(t, "data", "hello.txt", "hello, hoard")
	rec := invoke(t, e.p.Controller, "t1", "upper", map[string]string{"bucket": "data", "key": "hello.txt"})
	if !rec.OK {
		t.Fatalf("invocation: %+v", rec.Error)
	}
	dir := filepath.Join(e.cfg.Dir, "agent", "instances", rec.Instance)
	if _, err := os.Stat(filepath.Join(dir, "cachelet.json")); !os.IsNotExist(err) {
		t.Fatalf("the configuration document outlived the start: %v", err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("instance directory %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	socket := filepath.Join(dir, "control.sock")
	fi, err := os.Stat(socket)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %v, %v; want a socket of mode 0600", fi.Mode(), err)
	}

	// The cachelet's process: found by the document it was started on.
	pid := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmdline, err := os.ReadFile(p)
		if err == nil && bytes.Contains(cmdline, []byte(filepath.Join(dir, "cachelet.json"))) {
			fmt.Sscanf(filepath.Base(filepath.Dir(p)), "%d", &pid)
			creds, _ := e.p.Controller.Credentials("t1")
			secrets := []string{e.cfg.StoreSecretKey, e.cfg.ControllerToken, e.cfg.EtcdCredentials.Password, creds.PlatformToken}
			environ, err := os.ReadFile(filepath.Join(filepath.Dir(p), "environ"))
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
		}
	}
	if pid == 0 {
		t.Fatal("no cachelet process started on the instance's document")
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
	in := e.p.Agent.Instance(rec.Instance)
	if in == nil {
		t.Fatalf("no instance %s", rec.Instance)
	}
	got, err := in.CacheSettings(t.Context())
	want := cacheconfig.Settings{Consistency: "strong", Eviction: cacheconfig.PolicyOwnerLRU, Budget: 32 << 20,
		MaxObjectSize: 16 << 20, MemoryLimitOverhead: cacheconfig.DefaultMemoryOverhead}
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
