package agent

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/pki"
)

// With TLS, each cachelet gets a certificate of its application and
// instance, naming its peer host, its key 0600 and the CA bundle beside
// it; the function's environment names the bundle and an https endpoint.
func TestCacheletTLS(t *testing.T) {
	ca, err := pki.OpenCA(filepath.Join(t.TempDir(), "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := appspec.Parse([]byte("name: app\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: Config{PeerHost: "10.77.0.2", Region: "us-east-1", TLS: &TLS{Issuer: ca, CA: ca.CertFile()}}}
	in := &Instance{agent: a, spec: spec, dir: t.TempDir(), req: api.StartRequest{App: "app", ID: "app-1"}}
	files, err := in.cacheletTLS(in.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := in.document(control.Endpoint{}, files)
	if d.TLS == nil || d.TLS.Cert != filepath.Join(in.dir, "cachelet.crt") || d.TLS.CA != filepath.Join(in.dir, "ca.crt") {
		t.Fatalf("document TLS %+v", d.TLS)
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{d.TLS.Key: 0o600, d.TLS.Cert: 0o644, d.TLS.CA: 0o644} {
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v, %v; want %v", filepath.Base(path), fi.Mode(), err, mode)
		}
	}
	kp, err := tls.LoadX509KeyPair(d.TLS.Cert, d.TLS.Key)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := pki.IdentityOf(kp.Leaf); err != nil || id != pki.Cachelet("app", "app-1") {
		t.Errorf("identity %v, %v", id, err)
	}
	for _, h := range []string{"127.0.0.1", "localhost", "10.77.0.2"} {
		if kp.Leaf.VerifyHostname(h) != nil {
			t.Errorf("certificate does not name %s", h)
		}
	}
	in.ready = control.Ready{Endpoint: "https://127.0.0.1:9999"}
	env := in.workerEnv()
	if !slices.Contains(env, "AWS_CA_BUNDLE="+ca.CertFile()) || !slices.Contains(env, "AWS_ENDPOINT_URL=https://127.0.0.1:9999") {
		t.Errorf("worker environment %v", env)
	}
	for _, e := range env {
		if strings.Contains(e, "PRIVATE KEY") || strings.Contains(e, ".key") {
			t.Errorf("a key in the worker's environment: %s", e)
		}
	}
	// What a jail gets at /run/hoard/ca.crt (jail.go).
	if !strings.Contains(in.caBundle, "BEGIN CERTIFICATE") {
		t.Errorf("the bundle for the jail: %q", in.caBundle)
	}
}
