// Package pki gives hoard's listeners and clients their TLS: a local
// certificate authority and the certificates it issues (what `hoard up
// --tls` makes under the state directory), the loading of an operator's
// own files, and the tls.Configs every part uses, with the identity
// checks of mutual TLS.
//
// An identity is carried in a certificate as one URI SAN (Identity.URI):
// hoard://platform/controller, hoard://platform/agent/<id> for the
// platform's roles, hoard://app/<app>/<cachelet> for a cachelet of one
// application. Listeners check the identity after the chain: the peer
// listener of application A accepts A's cachelets and the platform, not
// B's (ADR 0017). Mutual TLS is a layer under the bearer tokens and the
// peer MACs, which keep scoping what an authenticated caller may do.
//
// Only the standard library is used: P-256 ECDSA keys, TLS 1.3 minimum.
package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// Identity is who a certificate speaks for.
type Identity struct {
	// Role is "controller", "agent", "cachelet" or "client".
	Role string
	// Name is an agent's, a cachelet's or a client's id; empty for the
	// controller.
	Name string
	// App is a cachelet's application; empty for the platform's roles.
	App string
}

// The roles an Identity may have.
const (
	RoleController = "controller"
	RoleAgent      = "agent"
	RoleCachelet   = "cachelet"
	// RoleClient is a caller of the controller's API with a token of its
	// own: the CLI, the store's event webhook. It is not the platform.
	RoleClient = "client"
)

// Controller and Agent are the platform's identities.
func Controller() Identity             { return Identity{Role: RoleController} }
func Agent(id string) Identity         { return Identity{Role: RoleAgent, Name: id} }
func Cachelet(app, id string) Identity { return Identity{Role: RoleCachelet, App: app, Name: id} }
func Client(name string) Identity      { return Identity{Role: RoleClient, Name: name} }

// Platform reports whether id is one of the platform's own roles (the
// controller or an agent), trusted by every application's listeners.
func (id Identity) Platform() bool { return id.Role == RoleController || id.Role == RoleAgent }

// URI is the identity's URI SAN.
func (id Identity) URI() *url.URL {
	switch id.Role {
	case RoleCachelet:
		return &url.URL{Scheme: "hoard", Host: "app", Path: "/" + id.App + "/" + id.Name}
	case RoleAgent, RoleClient:
		return &url.URL{Scheme: "hoard", Host: "platform", Path: "/" + id.Role + "/" + id.Name}
	default:
		return &url.URL{Scheme: "hoard", Host: "platform", Path: "/" + id.Role}
	}
}

func (id Identity) String() string { return id.URI().String() }

// Validate checks that id names a role with the parts it needs, none of
// which may contain a "/".
func (id Identity) Validate() error {
	bad := func(s string) bool { return s == "" || strings.ContainsAny(s, "/?#%") }
	switch id.Role {
	case RoleController:
		if id.Name != "" || id.App != "" {
			return errors.New("pki: the controller's identity has no name or application")
		}
	case RoleAgent, RoleClient:
		if bad(id.Name) || id.App != "" {
			return fmt.Errorf("pki: %s identity %q: want a name and no application", id.Role, id.Name)
		}
	case RoleCachelet:
		if bad(id.Name) || bad(id.App) {
			return fmt.Errorf("pki: cachelet identity %q/%q: want an application and a name", id.App, id.Name)
		}
	default:
		return fmt.Errorf("pki: unknown role %q", id.Role)
	}
	return nil
}

// IdentityOf reads the identity of a certificate from its one hoard URI
// SAN. A certificate with none, or more than one, has no identity.
func IdentityOf(cert *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range cert.URIs {
		if u.Scheme != "hoard" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		var id Identity
		switch {
		case u.Host == "app" && len(parts) == 2:
			id = Cachelet(parts[0], parts[1])
		case u.Host == "platform" && len(parts) == 1 && parts[0] == RoleController:
			id = Controller()
		case u.Host == "platform" && len(parts) == 2 && parts[0] == RoleAgent:
			id = Agent(parts[1])
		case u.Host == "platform" && len(parts) == 2 && parts[0] == RoleClient:
			id = Client(parts[1])
		default:
			return Identity{}, fmt.Errorf("%w: %s", ErrNoIdentity, u)
		}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("%w: %v", ErrNoIdentity, err)
		}
		found = append(found, id)
	}
	if len(found) != 1 {
		return Identity{}, fmt.Errorf("%w: %d hoard URIs", ErrNoIdentity, len(found))
	}
	return found[0], nil
}

// Errors of the identity checks.
var (
	// ErrNoIdentity: the certificate carries no (or no valid) identity.
	ErrNoIdentity = errors.New("pki: certificate has no hoard identity")
	// ErrNotAllowed: the certificate's identity may not use this listener.
	ErrNotAllowed = errors.New("pki: identity not allowed here")
)

// Files names one party's PEM files: its certificate (chain), its key
// (0600, readable by that party only), and the CA bundle it trusts
// (for servers: the CAs clients' certificates must chain to; for
// clients: the CAs servers' certificates must chain to).
type Files struct {
	Cert, Key, CA string
}

// Zero reports whether no file is named.
func (f Files) Zero() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// LoadPool reads a PEM bundle of CA certificates.
func LoadPool(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pki: CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("pki: CA bundle %s: no certificate in it", path)
	}
	return pool, nil
}

// Allow decides whether an identity, proven by a verified certificate,
// may use a listener (or, on a client, may be the server dialled).
type Allow func(Identity) bool

// AnyIdentity allows every identity of the trusted CAs.
func AnyIdentity(Identity) bool { return true }

// PlatformOnly allows the controller and the agents.
func PlatformOnly(id Identity) bool { return id.Platform() }

// ControllerOnly allows the controller: an agent's listener's rule.
func ControllerOnly(id Identity) bool { return id.Role == RoleController }

// AppOrPlatform allows app's cachelets and the platform: the peer
// listener's rule.
func AppOrPlatform(app string) Allow {
	return func(id Identity) bool { return id.Platform() || (id.Role == RoleCachelet && id.App == app) }
}

// ServerConfig is a listener's TLS: its certificate and key from f (read
// again when the certificate file changes: a renewal takes effect at the
// next handshake), TLS 1.3 minimum. With f.CA set, clients must present a certificate
// chaining to it whose identity allow accepts (mutual TLS); allow nil
// means AnyIdentity. Without f.CA, clients are not asked for one (the
// S3 listener, whose clients are functions signing with SigV4).
func ServerConfig(f Files, allow Allow) (*tls.Config, error) {
	kp, err := loadKeyPair(f.Cert, f.Key)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return kp.get() }}
	if f.CA == "" {
		return cfg, nil
	}
	pool, err := LoadPool(f.CA)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs = pool
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.VerifyConnection = checkIdentity(allow)
	return cfg, nil
}

// ClientConfig is a client's TLS: it trusts the CAs in f.CA (the system's
// without), and presents f's certificate when f.Cert is set (read again
// when the file changes, as ServerConfig's). With allow
// set, the server's certificate is checked by chain and identity
// instead of host name: cachelets dial peers by address, which may be a
// node's address no certificate names. Without allow, the host name is
// checked as usual.
func ClientConfig(f Files, allow Allow) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13}
	if f.CA != "" {
		pool, err := LoadPool(f.CA)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if f.Cert != "" || f.Key != "" {
		kp, err := loadKeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return kp.get() }
	}
	if allow != nil {
		if cfg.RootCAs == nil {
			return nil, errors.New("pki: checking the server by identity needs a CA bundle")
		}
		roots := cfg.RootCAs
		// Host names are not checked; VerifyConnection checks the chain
		// against roots and the identity, which is stronger here.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("pki: the server sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("pki: server certificate: %w", err)
			}
			return allowed(cs.PeerCertificates[0], allow)
		}
	}
	return cfg, nil
}

// StoreClientConfig is the TLS of calls to the object store, which is
// not one of hoard's parts: it trusts the system's roots (a public
// endpoint such as AWS S3) and the CA bundle at caFile when set (a store
// of the operator's, or MinIO under `hoard up --tls`), host names
// checked, and presents no certificate (a store authenticates requests
// by their signatures).
func StoreClientConfig(caFile string) (*tls.Config, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if caFile != "" {
		b, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("pki: CA bundle: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("pki: CA bundle %s: no certificate in it", caFile)
		}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// checkIdentity is a server's VerifyConnection: the chain was verified
// by crypto/tls (RequireAndVerifyClientCert); the identity is checked.
func checkIdentity(allow Allow) func(tls.ConnectionState) error {
	if allow == nil {
		allow = AnyIdentity
	}
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("pki: the client sent no certificate")
		}
		return allowed(cs.PeerCertificates[0], allow)
	}
}

func allowed(cert *x509.Certificate, allow Allow) error {
	id, err := IdentityOf(cert)
	if err != nil {
		return err
	}
	if !allow(id) {
		return fmt.Errorf("%w: %s", ErrNotAllowed, id)
	}
	return nil
}
