package peer

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/store"
)

// mutualTLS issues app's cachelet a certificate from a fresh local CA and
// returns the peer listener's and the peer client's tls.Configs, as an
// instance builds them.
func mutualTLS(tb testing.TB, app string) (srv, cli *tls.Config) {
	tb.Helper()
	return mutualTLSFrom(tb, newTestCA(tb), app)
}

func newTestCA(tb testing.TB) *pki.CA {
	tb.Helper()
	ca, err := pki.OpenCA(filepath.Join(tb.TempDir(), "tls"), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return ca
}

func mutualTLSFrom(tb testing.TB, ca *pki.CA, app string) (srv, cli *tls.Config) {
	tb.Helper()
	f, err := ca.Issue(app+"-1", pki.Request{Identity: pki.Cachelet(app, app+"-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		tb.Fatal(err)
	}
	if srv, err = pki.ServerConfig(f, pki.AppOrPlatform(app)); err != nil {
		tb.Fatal(err)
	}
	if cli, err = pki.ClientConfig(f, pki.AppOrPlatform(app)); err != nil {
		tb.Fatal(err)
	}
	return srv, cli
}

// TestMutualTLS fetches over the peer protocol on mutual TLS, and checks
// that a client of another application, of another CA, or with no
// certificate is refused at the handshake: the store fallback follows
// (store.ErrUnavailable), never an answer.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	srvTLS, cliTLS := mutualTLSFrom(t, ca, "app1")
	owner := newFakeOwner()
	owner.objects["bkt/k"] = stored{info: store.ObjectInfo{ETag: "e", Size: 5}, data: []byte("hello")}
	auth, _ := NewAuth("app1", []byte(secret), nil)
	srv := httptest.NewUnstartedServer(NewServer(auth, owner, nil))
	srv.Listener = tls.NewListener(srv.Listener, srvTLS) // not StartTLS, which adds a certificate of its own
	srv.Start()
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	get := func(cfg *tls.Config) ([]byte, error) {
		cl := NewClient(auth, ClientConfig{TLS: cfg})
		defer cl.Close()
		obj, err := cl.Get(context.Background(), addr, "bkt", "k", "")
		if err != nil {
			return nil, err
		}
		defer obj.Body.Close()
		return io.ReadAll(obj.Body)
	}
	if b, err := get(cliTLS); err != nil || !bytes.Equal(b, []byte("hello")) {
		t.Fatalf("fetch over mutual TLS: %q, %v", b, err)
	}

	_, otherApp := mutualTLSFrom(t, ca, "app2")
	otherApp.VerifyConnection = nil // the attacker trusts any server of the CA
	otherApp.InsecureSkipVerify = true
	_, otherCA := mutualTLS(t, "app1")
	otherCA.VerifyConnection, otherCA.InsecureSkipVerify = nil, true
	noCert := cliTLS.Clone()
	noCert.Certificates, noCert.GetClientCertificate = nil, nil
	for name, cfg := range map[string]*tls.Config{"other application": otherApp, "other CA": otherCA, "no certificate": noCert} {
		b, err := get(cfg)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: got %q, %v; want refused (store.ErrUnavailable)", name, b, err)
		}
	}
	// Plain HTTP to the TLS listener gets nothing either.
	if b, err := get(nil); err == nil {
		t.Errorf("plain HTTP: got %q", b)
	}

	// The client's side: app2's cachelet does not take app1's listener
	// for one of its own.
	_, app2 := mutualTLSFrom(t, ca, "app2")
	if _, err := get(app2); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("app2's client dialled app1's listener: %v", err)
	}
}
