package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Validity periods of what a CA makes, and when it is renewed: a
// certificate (or the CA) with less than a third of its validity left is
// made anew by OpenCA and Issue, so a platform restarted at least every
// few weeks never serves an expired one.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 90 * 24 * time.Hour
)

// File names in a CA's directory.
const (
	CACertFile = "ca.crt"
	caKeyFile  = "ca.key"
)

// CA is a local certificate authority whose files live in one directory
// (the state directory's tls/): ca.crt (0644: the bundle clients trust,
// readable in jails) and ca.key (0600). Its methods are not safe for
// concurrent use, but for IssueIn.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  crypto.Signer
	now  func() time.Time
	// LeafValidity is how long issued certificates are valid; default
	// DefaultLeafValidity.
	LeafValidity time.Duration
}

// OpenCA opens the CA in dir, creating the directory (0700) and the CA
// when missing, and making a new CA when the old one has less than a
// third of its validity left (certificates it issued are then reissued
// by Issue, as they no longer chain to it). now is the clock; nil means
// time.Now.
func OpenCA(dir string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	ca := &CA{dir: dir, now: now, LeafValidity: DefaultLeafValidity}
	cert, key, err := readPair(filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile))
	if err == nil && cert.IsCA && fresh(cert, now()) {
		ca.cert, ca.key = cert, key
		return ca, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if err := ca.create(); err != nil {
		return nil, err
	}
	return ca, nil
}

// LoadCA opens an existing CA in dir (ca.crt, ca.key) without making or
// renewing one: an operator's, often an intermediate CA of their own
// given to one agent to issue its cachelets' certificates. Certificates
// it issues carry its certificate after theirs, so that clients trusting
// only the operator's root verify them. now nil means time.Now.
func LoadCA(dir string, now func() time.Time) (*CA, error) {
	if now == nil {
		now = time.Now
	}
	cert, key, err := readPair(filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, fmt.Errorf("pki: CA in %s: %w", dir, err)
	}
	if !cert.IsCA || now().After(cert.NotAfter) {
		return nil, fmt.Errorf("pki: %s is not a valid CA certificate", filepath.Join(dir, CACertFile))
	}
	return &CA{dir: dir, cert: cert, key: key, now: now, LeafValidity: DefaultLeafValidity}, nil
}

// CertFile is the path of the CA's certificate: the bundle every client
// and mutual-TLS listener of the platform trusts.
func (ca *CA) CertFile() string { return filepath.Join(ca.dir, CACertFile) }

// Cert is the CA's certificate.
func (ca *CA) Cert() *x509.Certificate { return ca.cert }

func (ca *CA) create() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"hoard"}, CommonName: "hoard local CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultCAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            1, // an operator may give an agent an intermediate (LoadCA)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("pki: CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return fmt.Errorf("pki: CA: %w", err)
	}
	if err := writePair(filepath.Join(ca.dir, CACertFile), filepath.Join(ca.dir, caKeyFile), der, nil, key, -1, -1); err != nil {
		return err
	}
	ca.cert, ca.key = cert, key
	return nil
}

// DefaultIntermediateValidity is how long an intermediate CA made by
// IssueCA is valid (renewed, as the rest, with a third left).
const DefaultIntermediateValidity = 365 * 24 * time.Hour

// IssueCA makes, in dir (created 0700), an intermediate CA signed by ca
// that LoadCA opens: one node agent's issuer of its cachelets'
// certificates, so that the agent never holds the platform's CA key. It
// is reused while it chains to ca with more than a third of its validity
// left, and made anew otherwise. It may issue cachelets' identities only
// (a name constraint on its URIs), so the agent holding it cannot pose as
// the controller or another agent.
func (ca *CA) IssueCA(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	certFile, keyFile := filepath.Join(dir, CACertFile), filepath.Join(dir, caKeyFile)
	if cert, _, err := readPair(certFile, keyFile); err == nil && cert.IsCA && fresh(cert, ca.now()) &&
		cert.CheckSignatureFrom(ca.cert) == nil && bytes.Equal(cert.RawIssuer, ca.cert.RawSubject) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"hoard"}, CommonName: "hoard issuer " + filepath.Base(dir)},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultIntermediateValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// It may name cachelets only (hoard://app/...): an agent's
		// issuer cannot make a controller's or another agent's
		// certificate that the platform's listeners would accept.
		PermittedURIDomains: []string{"app"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return fmt.Errorf("pki: intermediate CA: %w", err)
	}
	return writePair(certFile, keyFile, der, nil, key, -1, -1)
}

// Request is a certificate to issue.
type Request struct {
	// Identity is who the certificate speaks for (its URI SAN).
	Identity Identity
	// Hosts are the IP addresses and DNS names a server certificate
	// names (127.0.0.1, localhost, node addresses). Empty for a client
	// certificate only.
	Hosts []string
	// Server and Client are the extended key usages; a cachelet's
	// certificate, which it serves its peer listener with and dials peers
	// with, has both.
	Server, Client bool
	// KeyOwner, when set, owns the key file (the cachelet's user, which
	// must read it); nil leaves it to the caller's user.
	KeyOwner *Owner
}

// Owner is a file's owning user and group.
type Owner struct{ UID, GID int }

func (o *Owner) ids() (int, int) {
	if o == nil {
		return -1, -1
	}
	return o.UID, o.GID
}

// Issue is IssueIn the CA's own directory.
func (ca *CA) Issue(name string, req Request) (Files, error) { return ca.IssueIn(ca.dir, name, req) }

// IssueIn returns the files of the certificate name in dir (name.crt,
// name.key) and the CA's ca.crt, issuing the certificate when missing,
// when it no longer matches req (identity, hosts, usages), no longer
// chains to the CA, or has less than a third of its validity left;
// otherwise the files are reused as they are. The key file is 0600.
// It may be called concurrently for different files.
func (ca *CA) IssueIn(dir, name string, req Request) (Files, error) {
	if err := req.Identity.Validate(); err != nil {
		return Files{}, err
	}
	if name == "" || filepath.Base(name) != name || name == "ca" {
		return Files{}, fmt.Errorf("pki: bad certificate name %q", name)
	}
	f := Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: ca.CertFile()}
	if cert, _, err := readPair(f.Cert, f.Key); err == nil && ca.matches(cert, req) {
		if req.KeyOwner != nil {
			if err := os.Chown(f.Key, req.KeyOwner.UID, req.KeyOwner.GID); err != nil {
				return Files{}, fmt.Errorf("pki: %w", err)
			}
		}
		return f, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, fmt.Errorf("pki: %w", err)
	}
	now := ca.now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{Organization: []string{"hoard"}, CommonName: req.Identity.String()},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ca.LeafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		URIs:         []*url.URL{req.Identity.URI()},
	}
	// Never beyond the CA: a chain is valid only while all of it is (an
	// operator's intermediate may be shorter-lived than a leaf).
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if req.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, h := range req.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Files{}, fmt.Errorf("pki: issue %s: %w", name, err)
	}
	var chain []byte
	if !bytes.Equal(ca.cert.RawIssuer, ca.cert.RawSubject) {
		chain = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
	}
	uid, gid := req.KeyOwner.ids()
	if err := writePair(f.Cert, f.Key, der, chain, key, uid, gid); err != nil {
		return Files{}, err
	}
	return f, nil
}

// matches reports whether cert can be reused for req.
func (ca *CA) matches(cert *x509.Certificate, req Request) bool {
	if cert.CheckSignatureFrom(ca.cert) != nil || !bytes.Equal(cert.RawIssuer, ca.cert.RawSubject) || !fresh(cert, ca.now()) {
		return false
	}
	if id, err := IdentityOf(cert); err != nil || id != req.Identity {
		return false
	}
	if req.Server != slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) ||
		req.Client != slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return false
	}
	for _, h := range req.Hosts {
		if cert.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// fresh reports whether cert is valid at now with more than a third of
// its validity left.
func fresh(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotBefore) && cert.NotAfter.Sub(now) > life/3
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// readPair reads a certificate and its key and checks that they belong
// together.
func readPair(certFile, keyFile string) (*x509.Certificate, crypto.Signer, error) {
	kp, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		if _, serr := os.Stat(certFile); errors.Is(serr, os.ErrNotExist) {
			return nil, nil, serr
		}
		if _, serr := os.Stat(keyFile); errors.Is(serr, os.ErrNotExist) {
			return nil, nil, serr
		}
		return nil, nil, fmt.Errorf("pki: %w", err)
	}
	key, ok := kp.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("pki: %s: key cannot sign", keyFile)
	}
	return kp.Leaf, key, nil
}

// writePair writes a certificate (0644, followed by chain, PEM) and its
// key (0600, owned by uid:gid when not -1), each through a temporary file
// renamed into place, the key first: a reader never sees a certificate
// without its key.
func writePair(certFile, keyFile string, der, chain []byte, key *ecdsa.PrivateKey, uid, gid int) error {
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := writeFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), 0o600, uid, gid); err != nil {
		return err
	}
	return writeFile(certFile, append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), chain...), 0o644, -1, -1)
}

func writeFile(path string, data []byte, mode os.FileMode, uid, gid int) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if uid >= 0 || gid >= 0 {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("pki: %w", err)
		}
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("pki: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	return nil
}
