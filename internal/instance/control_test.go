package instance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// controlInstance starts an instance over an in-memory store with a
// control listener in a private directory, and a client of it.
func controlInstance(t *testing.T) (*Instance, control.Endpoint, *s3store.Store) {
	t.Helper()
	dir, err := os.MkdirTemp("", "inst") // t.TempDir's paths are too long for sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := baseConfig()
	c.Store.Endpoint = memStoreEndpoint(t, "data")
	c.App, c.ID = "app", "app-1"
	c.Cachelet.Cache.Budget = 1 << 20
	c.Control = control.Endpoint{Socket: filepath.Join(dir, "control.sock"), Token: control.NewToken()}
	in, err := Start(t.Context(), c, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(context.Background()) })
	client, err := s3store.New(s3store.Config{Endpoint: in.Endpoint(), AccessKey: "ak", SecretKey: "sk", Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return in, c.Control, client
}

func putGet(t *testing.T, client *s3store.Store, key string, size int) {
	t.Helper()
	data := bytes.Repeat([]byte("x"), size)
	if _, err := client.Put(t.Context(), "data", key, bytes.NewReader(data), int64(size), store.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	body, _, _, err := client.Get(t.Context(), "data", key, store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, body)
	body.Close()
}

// The agent's calls reach the cachelet behind the control listener.
func TestControlAPI(t *testing.T) {
	in, ep, client := controlInstance(t)
	c := control.NewClient(ep)
	defer c.Close()
	ctx := t.Context()

	r, err := c.Ready(ctx)
	if err != nil || r.Endpoint != in.Endpoint() || r.ID != "app-1" || r.PID != os.Getpid() {
		t.Fatalf("Ready = %+v, %v", r, err)
	}
	if fi, err := os.Stat(ep.Socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, %v; want mode 0600", fi.Mode().Perm(), err)
	}
	if s, err := c.Config(ctx); err != nil || s.Consistency != "strong" || s.Budget != 1<<20 || s.MaxObjectSize != 1<<19 {
		t.Fatalf("Config = %+v, %v", s, err)
	}
	before, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tmp/run-1/a", "tmp/run-1/b", "keep"} {
		putGet(t, client, k, 1000)
	}
	// A read counts once the server closed its body, which may be just
	// after the client had every byte.
	var after control.Stats
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if after, err = c.Stats(ctx); err != nil {
			t.Fatal(err)
		}
		d := after.Sub(before)
		if d["local_hit"].Count == 3 && after.Writes == 3 && after.CacheObjects == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v, reads since %v", after, d)
		}
	}
	if n, err := c.Drop(ctx, "data", "tmp/run-1/"); err != nil || n != 2 {
		t.Fatalf("Drop = %d, %v", n, err)
	}
	res, err := c.SetBudget(ctx, 0)
	if err != nil || res.Budget != 0 || res.Freed != 1000 || res.CacheBytes != 0 {
		t.Fatalf("SetBudget(0) = %+v, %v", res, err)
	}
	if _, err := c.SetBudget(ctx, 1<<20); err != nil {
		t.Fatal(err)
	}
	pr, err := c.Prewarm(ctx, []control.Key{{Bucket: "data", Key: "keep"}, {Bucket: "data", Key: "tmp/run-1/a"}})
	if err != nil || pr.Fetched != 2 || pr.Bytes != 2000 {
		t.Fatalf("Prewarm = %+v, %v", pr, err)
	}
	objs, err := c.AccessMetadata(ctx)
	if err != nil || len(objs) != 3 {
		t.Fatalf("AccessMetadata = %+v, %v", objs, err)
	}
}

// attackerEnv names the socket the attacker process is to try.
const attackerEnv = "HOARD_TEST_CONTROL_ATTACKER_SOCKET"

// TestControlAttackerHelper is the attacker process of
// TestControlRefusesOtherProcesses: it runs only when that test starts
// it, tries the control socket without the token and with guessed ones,
// and prints each answer's status.
func TestControlAttackerHelper(t *testing.T) {
	socket := os.Getenv(attackerEnv)
	if socket == "" {
		t.Skip("run by TestControlRefusesOtherProcesses")
	}
	for _, auth := range []string{"", "Bearer ", "Bearer " + control.NewToken(), "Basic YWdlbnQ6c2VjcmV0"} {
		for _, req := range []string{"POST /v1/budget", "GET /v1/access", "POST /v1/drop", "GET /v1/ready"} {
			body := `{"bytes": 0, "bucket": "data"}`
			if strings.HasSuffix(req, "drop") {
				body = `{"bucket": "data"}`
			} else if strings.HasSuffix(req, "budget") {
				body = `{"bytes": 0}`
			}
			status, err := rawControl(socket, req, auth, body)
			fmt.Printf("ATTACK %s %q %d %v\n", req, auth, status, err)
		}
	}
}

func rawControl(socket, req, auth, body string) (int, error) {
	conn, err := net.Dial("unix", socket)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	h := ""
	if auth != "" {
		h = "Authorization: " + auth + "\r\n"
	}
	fmt.Fprintf(conn, "%s HTTP/1.1\r\nHost: cachelet\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", req, h, len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Another process of the same user, which can connect to the socket but
// does not hold the token, is refused everything: it can neither read
// what the application accessed nor empty or shrink its cache.
func TestControlRefusesOtherProcesses(t *testing.T) {
	in, ep, client := controlInstance(t)
	putGet(t, client, "keep", 1000)
	cmd := exec.Command(os.Args[0], "-test.run=^TestControlAttackerHelper$", "-test.v")
	cmd.Env = append(os.Environ(), attackerEnv+"="+ep.Socket)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("attacker process: %v\n%s", err, out)
	}
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "ATTACK ") {
			continue
		}
		n++
		if !strings.Contains(line, " 401 ") {
			t.Errorf("not refused: %s", line)
		}
	}
	if n != 16 {
		t.Fatalf("the attacker made %d requests, want 16:\n%s", n, out)
	}
	if s := in.Cachelet().Stats(); s.Objects != 1 || s.Budget != 1<<20 {
		t.Fatalf("the cache changed under refused requests: %+v", s)
	}
	// The agent, with the token, is served.
	c := control.NewClient(ep)
	defer c.Close()
	if _, err := c.Ready(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := control.NewClient(control.Endpoint{Socket: ep.Socket, Token: control.NewToken()}).Stats(t.Context()); !errors.Is(err, control.ErrUnauthorized) {
		t.Fatalf("a guessed token: %v", err)
	}
}

// A control listener needs a token of the full length.
func TestControlValidate(t *testing.T) {
	c := baseConfig()
	c.Control = control.Endpoint{Socket: "/tmp/x.sock"}
	if err := c.Validate(); err == nil {
		t.Fatal("a control socket without a token validated")
	}
	c.Control.Token = "short"
	if err := c.Validate(); err == nil {
		t.Fatal("a short control token validated")
	}
}
