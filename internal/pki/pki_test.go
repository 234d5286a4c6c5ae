package pki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is a settable now for OpenCA.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newCA(t *testing.T) (*CA, *clock) {
	t.Helper()
	c := &clock{t: time.Now()}
	ca, err := OpenCA(filepath.Join(t.TempDir(), "tls"), c.now)
	if err != nil {
		t.Fatal(err)
	}
	return ca, c
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(path, strings.TrimSuffix(path, ".crt")+".key")
	if err != nil {
		t.Fatal(err)
	}
	return kp.Leaf
}

func TestIssueSANsAndIdentity(t *testing.T) {
	ca, _ := newCA(t)
	f, err := ca.Issue("agent-1", Request{Identity: Agent("n1"), Hosts: []string{"127.0.0.1", "localhost", "10.77.0.2"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	cert := readCert(t, f.Cert)
	for _, h := range []string{"127.0.0.1", "localhost", "10.77.0.2"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("certificate does not name %s: %v", h, err)
		}
	}
	if err := cert.VerifyHostname("10.77.0.3"); err == nil {
		t.Error("certificate names a host it was not issued for")
	}
	id, err := IdentityOf(cert)
	if err != nil || id != Agent("n1") {
		t.Errorf("identity = %v, %v; want agent n1", id, err)
	}
	pool, err := LoadPool(f.CA)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("issued certificate does not chain to the CA: %v", err)
	}
	if got := time.Until(cert.NotAfter); got > DefaultLeafValidity || got < DefaultLeafValidity-2*time.Hour {
		t.Errorf("validity left %v, want about %v", got, DefaultLeafValidity)
	}
}

func TestKeyFileModes(t *testing.T) {
	ca, _ := newCA(t)
	f, err := ca.Issue("controller", Request{Identity: Controller(), Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{
		f.Key: 0o600, filepath.Join(filepath.Dir(f.CA), caKeyFile): 0o600,
		f.Cert: 0o644, f.CA: 0o644, filepath.Dir(f.CA): 0o700 | os.ModeDir,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", filepath.Base(path), fi.Mode(), want)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(f.CA), ".*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestReuseAcrossRestarts(t *testing.T) {
	ca, c := newCA(t)
	dir := filepath.Dir(ca.CertFile())
	req := Request{Identity: Cachelet("a", "a-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true}
	f, err := ca.Issue("a-1", req)
	if err != nil {
		t.Fatal(err)
	}
	before := readCert(t, f.Cert)
	// A restart: the CA and the certificate are read back, not made anew.
	c.t = c.t.Add(24 * time.Hour)
	ca2, err := OpenCA(dir, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if !ca2.Cert().Equal(ca.Cert()) {
		t.Fatal("the CA was remade on restart")
	}
	f2, err := ca2.Issue("a-1", req)
	if err != nil {
		t.Fatal(err)
	}
	if after := readCert(t, f2.Cert); !after.Equal(before) {
		t.Error("a fresh certificate was reissued on restart")
	}
	// A different request under the same name is reissued.
	req.Hosts = append(req.Hosts, "10.0.0.9")
	f3, err := ca2.Issue("a-1", req)
	if err != nil {
		t.Fatal(err)
	}
	if after := readCert(t, f3.Cert); after.Equal(before) || after.VerifyHostname("10.0.0.9") != nil {
		t.Error("a certificate missing a requested host was reused")
	}
	req.Identity = Cachelet("b", "a-1")
	f4, _ := ca2.Issue("a-1", req)
	if id, _ := IdentityOf(readCert(t, f4.Cert)); id.App != "b" {
		t.Errorf("identity %v after a changed request, want app b", id)
	}
}

func TestRenewalBeforeExpiry(t *testing.T) {
	ca, c := newCA(t)
	req := Request{Identity: Controller(), Hosts: []string{"127.0.0.1"}, Server: true}
	f, _ := ca.Issue("controller", req)
	first := readCert(t, f.Cert)
	// Half the validity gone: still reused.
	c.t = c.t.Add(DefaultLeafValidity / 2)
	f, _ = ca.Issue("controller", req)
	if !readCert(t, f.Cert).Equal(first) {
		t.Fatal("renewed with half its validity left")
	}
	// Less than a third left: renewed, and valid well beyond the old end.
	c.t = first.NotAfter.Add(-DefaultLeafValidity / 4)
	f, _ = ca.Issue("controller", req)
	renewed := readCert(t, f.Cert)
	if renewed.Equal(first) || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatalf("not renewed before expiry: old until %v, new until %v", first.NotAfter, renewed.NotAfter)
	}

	// The CA renews itself the same way; certificates of the old CA are
	// then reissued, as they no longer chain to it.
	dir := filepath.Dir(ca.CertFile())
	c.t = ca.Cert().NotAfter.Add(-DefaultCAValidity / 4)
	ca2, err := OpenCA(dir, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if ca2.Cert().Equal(ca.Cert()) {
		t.Fatal("CA not renewed with a quarter of its validity left")
	}
	f, _ = ca2.Issue("controller", req)
	if err := readCert(t, f.Cert).CheckSignatureFrom(ca2.Cert()); err != nil {
		t.Errorf("certificate of the old CA kept: %v", err)
	}
}

func TestIdentityURIs(t *testing.T) {
	for _, id := range []Identity{Controller(), Agent("node-2"), Cachelet("shop", "shop-1a2b"), Client("cli")} {
		ca, _ := newCA(t)
		f, err := ca.Issue("x", Request{Identity: id, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := IdentityOf(readCert(t, f.Cert))
		if err != nil || got != id {
			t.Errorf("%v read back as %v, %v", id, got, err)
		}
	}
	for _, bad := range []Identity{{Role: "root"}, Agent(""), Cachelet("a/b", "c"), Cachelet("", "c"), {Role: RoleController, App: "a"}} {
		if bad.Validate() == nil {
			t.Errorf("%+v validated", bad)
		}
	}
}

// TestMutualTLS runs a listener whose rule is the peer listener's
// (application a or the platform) and dials it with each kind of client.
func TestMutualTLS(t *testing.T) {
	ca, _ := newCA(t)
	other, _ := newCA(t) // another CA: an attacker's
	issue := func(ca *CA, name string, id Identity) Files {
		f, err := ca.Issue(name, Request{Identity: id, Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	srvFiles := issue(ca, "a-1", Cachelet("a", "a-1"))
	scfg, err := ServerConfig(srvFiles, AppOrPlatform("a"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	// Not StartTLS: it adds httptest's own certificate, which crypto/tls
	// prefers to GetCertificate when the client sends no server name.
	srv.Listener = tls.NewListener(srv.Listener, scfg)
	srv.Start()
	defer srv.Close()

	get := func(f Files, allow Allow) error {
		ccfg, err := ClientConfig(f, allow)
		if err != nil {
			return err
		}
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: ccfg}, Timeout: 5 * time.Second}
		defer cl.CloseIdleConnections()
		resp, err := cl.Get("https://" + srv.Listener.Addr().String())
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	withCA := func(f Files) Files { f.CA = ca.CertFile(); return f }
	for _, tc := range []struct {
		name  string
		files Files
		allow Allow
		ok    bool
	}{
		{"same application", issue(ca, "a-2", Cachelet("a", "a-2")), AppOrPlatform("a"), true},
		{"agent", issue(ca, "agent", Agent("n1")), AppOrPlatform("a"), true},
		{"controller", issue(ca, "controller", Controller()), nil, true},
		// An attacker's client checks nothing of the server: the server refuses.
		{"other application", issue(ca, "b-1", Cachelet("b", "b-1")), nil, false},
		{"no certificate", Files{CA: ca.CertFile()}, nil, false},
		{"other CA", withCA(issue(other, "a-9", Cachelet("a", "a-9"))), AppOrPlatform("a"), false},
		// The client's own check: a server of application a is not one of b.
		{"server of another application", issue(ca, "b-2", Cachelet("b", "b-2")), AppOrPlatform("b"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "server of another application" {
				// b's cachelet trusts the server only if it is b's: it is a's.
				err := get(tc.files, AppOrPlatform("b"))
				if err == nil || !strings.Contains(err.Error(), "not allowed") {
					t.Fatalf("dialled a server of another application: %v", err)
				}
				return
			}
			err := get(tc.files, tc.allow)
			if tc.ok != (err == nil) {
				t.Fatalf("ok = %v, err = %v", tc.ok, err)
			}
		})
	}
	// A client with no CA bundle does not trust the server either.
	if err := get(Files{}, nil); err == nil {
		t.Error("a client with no CA trusted the local CA's server")
	}
}

func TestServerWithoutClientCA(t *testing.T) {
	ca, _ := newCA(t)
	f, _ := ca.Issue("s3", Request{Identity: Cachelet("a", "a-1"), Hosts: []string{"127.0.0.1", "localhost"}, Server: true})
	scfg, err := ServerConfig(Files{Cert: f.Cert, Key: f.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if scfg.ClientAuth != tls.NoClientCert || scfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("client auth %v, min version %x", scfg.ClientAuth, scfg.MinVersion)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	ccfg, _ := ClientConfig(Files{CA: f.CA}, nil)
	ccfg.ServerName = "localhost"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := tls.Dialer{Config: ccfg, NetDialer: &net.Dialer{}}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("a client with the CA bundle and no certificate: %v", err)
	}
	c.Close()
}

func TestIdentityOfRejects(t *testing.T) {
	for _, uris := range [][]string{nil, {"hoard://platform/root"}, {"hoard://app/a/b/c"}, {"hoard://app/a/b", "hoard://platform/controller"}} {
		cert := &x509.Certificate{}
		for _, s := range uris {
			u, _ := url.Parse(s)
			cert.URIs = append(cert.URIs, u)
		}
		if _, err := IdentityOf(cert); !errors.Is(err, ErrNoIdentity) {
			t.Errorf("%v: err %v, want ErrNoIdentity", uris, err)
		}
	}
}

// TestLoadCAIntermediate: an operator's intermediate CA, loaded (never
// made) by LoadCA, issues certificates that carry it, so that a party
// trusting only the operator's root verifies them.
func TestLoadCAIntermediate(t *testing.T) {
	root, _ := newCA(t)
	dir := filepath.Join(t.TempDir(), "issuer")
	if _, err := LoadCA(dir, nil); err == nil {
		t.Fatal("LoadCA made a CA where there was none")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "agent issuer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, &key.PublicKey, root.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writePair(filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile), der, nil, key, -1, -1); err != nil {
		t.Fatal(err)
	}
	inter, err := LoadCA(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := inter.IssueIn(t.TempDir(), "c", Request{Identity: Cachelet("a", "a-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(kp.Certificate) != 2 {
		t.Fatalf("issued file holds %d certificates, want the leaf and the intermediate", len(kp.Certificate))
	}
	pool, _ := LoadPool(root.CertFile())
	inters := x509.NewCertPool()
	ic, _ := x509.ParseCertificate(kp.Certificate[1])
	inters.AddCert(ic)
	if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Errorf("a certificate of the intermediate does not verify against the root: %v", err)
	}
}

// TestIssueCA: the intermediate CA the local CA gives a node agent is
// reused while fresh, and its certificates verify against the root.
func TestIssueCA(t *testing.T) {
	root, c := newCA(t)
	dir := filepath.Join(t.TempDir(), "node-0")
	if err := root.IssueCA(dir); err != nil {
		t.Fatal(err)
	}
	inter, err := LoadCA(dir, c.now)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.IssueCA(dir); err != nil {
		t.Fatal(err)
	}
	again, _ := LoadCA(dir, c.now)
	if !again.Cert().Equal(inter.Cert()) {
		t.Error("a fresh intermediate was remade")
	}
	if fi, err := os.Stat(filepath.Join(dir, caKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("intermediate key: %v, %v", fi.Mode(), err)
	}
	srv, err := inter.IssueIn(t.TempDir(), "c", Request{Identity: Cachelet("a", "a-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.CA = root.CertFile()
	scfg, err := ServerConfig(srv, AppOrPlatform("a"))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	// A peer of the same application, its certificate from the root's
	// other intermediate: both ends verify the other's chain to the root.
	dir2 := filepath.Join(t.TempDir(), "node-1")
	if err := root.IssueCA(dir2); err != nil {
		t.Fatal(err)
	}
	inter2, _ := LoadCA(dir2, c.now)
	cli, _ := inter2.IssueIn(t.TempDir(), "c", Request{Identity: Cachelet("a", "a-2"), Server: true, Client: true})
	cli.CA = root.CertFile()
	ccfg, err := ClientConfig(cli, AppOrPlatform("a"))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
	if err != nil {
		t.Fatalf("cachelets of two intermediates: %v", err)
	}
	// In TLS 1.3 the server's verdict on the client's certificate
	// arrives with the first read.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err != nil && strings.Contains(err.Error(), "certificate") {
		t.Errorf("the server refused the client's chain: %v", err)
	}
	conn.Close()

	// The intermediate names cachelets only: a controller's certificate
	// it makes does not verify, so an agent cannot pose as the
	// controller to another agent.
	forged, err := inter.IssueIn(t.TempDir(), "forged", Request{Identity: Controller(), Client: true})
	if err != nil {
		t.Fatal(err)
	}
	kp, err := tls.LoadX509KeyPair(forged.Cert, forged.Key)
	if err != nil {
		t.Fatal(err)
	}
	pool, _ := LoadPool(root.CertFile())
	inters := x509.NewCertPool()
	ic, _ := x509.ParseCertificate(kp.Certificate[1])
	inters.AddCert(ic)
	if _, err := kp.Leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inters, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Error("an agent's intermediate made a controller's certificate that verifies")
	}
}

// TestReload: a renewed certificate is served from the next handshake on,
// without a restart; a key removed after the start (a cachelet's) keeps
// the pair loaded.
func TestReload(t *testing.T) {
	ca, c := newCA(t)
	req := Request{Identity: Controller(), Hosts: []string{"127.0.0.1"}, Server: true}
	f, err := ca.Issue("controller", req)
	if err != nil {
		t.Fatal(err)
	}
	scfg, err := ServerConfig(Files{Cert: f.Cert, Key: f.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			_ = conn.(*tls.Conn).Handshake()
			conn.Close()
		}
	}()
	ccfg, _ := ClientConfig(Files{CA: f.CA}, nil)
	ccfg.Time = c.now // the renewed certificate is valid from the moved clock on
	served := func() *x509.Certificate {
		t.Helper()
		conn, err := tls.Dial("tcp", ln.Addr().String(), ccfg)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0]
	}
	first := served()
	c.t = first.NotAfter.Add(-DefaultLeafValidity / 4)
	if _, err := ca.Issue("controller", req); err != nil {
		t.Fatal(err)
	}
	renewed := served()
	if renewed.Equal(first) || !renewed.NotAfter.After(first.NotAfter) {
		t.Fatal("the renewed certificate is not served")
	}
	if err := os.Remove(f.Key); err != nil {
		t.Fatal(err)
	}
	if got := served(); !got.Equal(renewed) {
		t.Error("the pair changed after its key file was removed")
	}
}

// writeIntermediate writes into dir (LoadCA's layout) an intermediate CA
// of root valid for life, and returns its certificate.
func writeIntermediate(t *testing.T, root *CA, dir string, life time.Duration) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "agent issuer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(life),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true, MaxPathLenZero: true,
		PermittedURIDomains: []string{"app"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, root.cert, &key.PublicKey, root.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writePair(filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile), der, nil, key, -1, -1); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFileIssuerRenewed: an issuing CA renewed in place (as cert-manager
// renews a mounted Secret) is used from the next certificate on, a
// certificate of the old one is reissued, a file caught mid-update keeps
// the CA loaded last; and no leaf outlives its CA.
func TestFileIssuerRenewed(t *testing.T) {
	root, _ := newCA(t)
	dir := filepath.Join(t.TempDir(), "issuer")
	if _, err := OpenIssuer(dir, nil); err == nil {
		t.Fatal("OpenIssuer opened an empty directory")
	}
	first := writeIntermediate(t, root, dir, 24*time.Hour)
	iss, err := OpenIssuer(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Identity: Cachelet("a", "a-1"), Server: true, Client: true}
	inst := t.TempDir()
	f, err := iss.IssueIn(inst, "cachelet", req)
	if err != nil {
		t.Fatal(err)
	}
	leaf := readCert(t, f.Cert)
	if leaf.CheckSignatureFrom(first) != nil {
		t.Fatal("the leaf is not the first CA's")
	}
	if leaf.NotAfter.After(first.NotAfter) {
		t.Errorf("the leaf ends %v, after its CA (%v)", leaf.NotAfter, first.NotAfter)
	}

	second := writeIntermediate(t, root, dir, 48*time.Hour)
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, CACertFile), later, later); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{inst, t.TempDir()} {
		f, err := iss.IssueIn(d, "cachelet", req)
		if err != nil {
			t.Fatal(err)
		}
		if readCert(t, f.Cert).CheckSignatureFrom(second) != nil {
			t.Errorf("after the renewal, a certificate in %s is not the new CA's", d)
		}
	}

	// Caught mid-update: the last CA loaded goes on issuing.
	if err := os.WriteFile(filepath.Join(dir, CACertFile), []byte("-----BEGIN"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err = iss.IssueIn(t.TempDir(), "cachelet", req)
	if err != nil {
		t.Fatalf("mid-update: %v", err)
	}
	if readCert(t, f.Cert).CheckSignatureFrom(second) != nil {
		t.Error("mid-update, a certificate not of the CA loaded last")
	}
}

// TestStoreClientConfig: the store's TLS trusts a store of the platform's
// CA and the system's roots (a public S3), refuses a stranger's, checks
// host names, and presents no certificate.
func TestStoreClientConfig(t *testing.T) {
	ca, _ := newCA(t)
	f, err := ca.Issue("store", Request{Identity: Client("store"), Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	srvCfg, err := ServerConfig(Files{Cert: f.Cert, Key: f.Key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			http.Error(w, "a client certificate", http.StatusBadRequest)
		}
	}))
	srv.Listener = tls.NewListener(srv.Listener, srvCfg) // not StartTLS: see TestMutualTLS
	srv.Start()
	defer srv.Close()
	srv.URL = strings.Replace(srv.URL, "http://", "https://", 1)
	get := func(caFile, url string) error {
		cfg, err := StoreClientConfig(caFile)
		if err != nil {
			return err
		}
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 10 * time.Second}
		resp, err := c.Get(url)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New(resp.Status)
		}
		return nil
	}
	if err := get(ca.CertFile(), srv.URL); err != nil {
		t.Errorf("a store of the platform's CA: %v", err)
	}
	stranger, _ := newCA(t)
	if err := get(stranger.CertFile(), srv.URL); err == nil {
		t.Error("a store of another CA was trusted")
	}
	if err := get(ca.CertFile(), strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)); err == nil {
		t.Error("a store's certificate for another host name was trusted")
	}
	if _, err := StoreClientConfig(filepath.Join(t.TempDir(), "none.crt")); err == nil {
		t.Error("a missing CA bundle was accepted")
	}
	// The system's roots are kept beside the bundle.
	cfg, err := StoreClientConfig(ca.CertFile())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt")
	if err != nil {
		t.Fatalf("the system's bundle: %v", err)
	}
	var root *x509.Certificate
	for rest := b; root == nil; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			t.Fatal("no certificate in the system's bundle")
		}
		root, _ = x509.ParseCertificate(blk.Bytes)
	}
	if _, err := root.Verify(x509.VerifyOptions{Roots: cfg.RootCAs}); err != nil {
		t.Errorf("a system root (%s) is not trusted: %v", root.Subject, err)
	}
}
