package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/pki"
)

// With TLS (ADR 0017), each instance's cachelet gets a certificate of its
// own, issued at load into the instance's private directory: its
// identity is its application and instance (pki.Cachelet), so that the
// peer listeners of other applications refuse it; its hosts are the
// addresses its listeners are reached on. The key file (0600) is removed
// with the configuration document once the cachelet is serving: the
// cachelet holds it in memory, and the function, whose home the
// directory may be, never finds it. The function trusts its cachelet
// through the CA bundle (AWS_CA_BUNDLE, a path: inside a jail, a copy
// under /run/hoard).

// TLS is how an agent's cachelets get their TLS.
type TLS struct {
	// Issuer issues each cachelet its certificate. Required.
	Issuer Issuer
	// CA is the platform's CA bundle (PEM file): what the cachelets
	// trust of their peers, etcd and the controller, and what functions
	// trust of their cachelet. Required.
	CA string
}

// Issuer issues certificates (pki.CA.IssueIn). It is called for
// different names concurrently.
type Issuer interface {
	IssueIn(dir, name string, req pki.Request) (pki.Files, error)
}

// Validate checks the TLS settings.
func (t *TLS) Validate() error {
	if t.Issuer == nil || t.CA == "" {
		return errors.New("agent: TLS needs an issuer and a CA bundle")
	}
	return nil
}

// jailCABundle is where a jailed function finds the CA bundle.
const jailCABundle = "/run/hoard/ca.crt"

// cacheletTLS issues the instance's cachelet its certificate into dir
// (the directory of its document), its key owned by owner when set (a
// cachelet with a uid of its own), with a copy of the CA bundle beside it
// (0644: the cachelet need not reach the agent's files); and reads the
// bundle for its function. nil without TLS.
func (in *Instance) cacheletTLS(dir string, owner *pki.Owner) (*control.TLSFiles, error) {
	t := in.agent.cfg.TLS
	if t == nil {
		return nil, nil
	}
	hosts := []string{"127.0.0.1", "localhost"}
	if h := in.agent.cfg.PeerHost; h != "127.0.0.1" && net.ParseIP(h) != nil {
		hosts = append(hosts, h)
	}
	f, err := t.Issuer.IssueIn(dir, "cachelet", pki.Request{
		Identity: pki.Cachelet(in.spec.Name, in.req.ID), Hosts: hosts, Server: true, Client: true, KeyOwner: owner,
	})
	if err != nil {
		return nil, fmt.Errorf("the cachelet's certificate: %w", err)
	}
	ca, err := os.ReadFile(t.CA)
	if err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	caCopy := filepath.Join(dir, "ca.crt")
	if err := control.WriteFileAtomic(caCopy, ca, 0o644); err != nil {
		return nil, fmt.Errorf("the CA bundle: %w", err)
	}
	in.caBundle = string(ca)
	return &control.TLSFiles{Cert: f.Cert, Key: f.Key, CA: caCopy}, nil
}
