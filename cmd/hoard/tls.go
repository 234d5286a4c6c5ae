package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"strings"

	"github.com/hoard-io/hoard/internal/pki"
)

// tlsFlags are a process's TLS files (ADR 0017): its certificate and key,
// the CA bundle it trusts for the servers it calls (and, unless
// --tls-client-ca says otherwise, for its clients' certificates).
type tlsFlags struct {
	cert, key, ca, clientCA string
}

// register adds --tls-cert, --tls-key, --tls-ca and, with clientCA,
// --tls-client-ca; def's paths are the defaults (a configuration
// document's).
func (t *tlsFlags) register(fs *flag.FlagSet, def pki.Files, clientCA bool) {
	fs.StringVar(&t.cert, "tls-cert", def.Cert, "serve TLS with this certificate (PEM; with --tls-key); its identity, for mutual TLS, is a hoard URI SAN (docs/security.md)")
	fs.StringVar(&t.key, "tls-key", def.Key, "the key of --tls-cert (PEM, mode 0600)")
	fs.StringVar(&t.ca, "tls-ca", def.CA, "CA bundle (PEM) trusted for the servers this process calls (etcd, controller, agents, peers, the store) and for the certificates of the clients it requires them of")
	if clientCA {
		fs.StringVar(&t.clientCA, "tls-client-ca", "", "CA bundle the API's clients must present certificates of (mutual TLS; default --tls-ca; \"none\": no client certificate asked)")
	}
}

// on reports whether the process serves TLS.
func (t *tlsFlags) on() bool { return t.cert != "" || t.key != "" }

func (t *tlsFlags) validate() error {
	if (t.cert == "") != (t.key == "") {
		return fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	if t.clientCA != "" && t.clientCA != "none" && !t.on() {
		return fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", errUsage)
	}
	return nil
}

// files are the process's own files: its certificate and key, and the CA
// bundle it trusts.
func (t *tlsFlags) files() pki.Files { return pki.Files{Cert: t.cert, Key: t.key, CA: t.ca} }

// client is the TLS of calls to endpoints (URLs): nil when none is https
// (plain HTTP); else the CA (the system's roots without --tls-ca) and the
// process's certificate, host names checked.
func (t *tlsFlags) client(endpoints ...string) (*tls.Config, error) {
	https := false
	for _, e := range endpoints {
		https = https || strings.HasPrefix(e, "https://")
	}
	if !https {
		return nil, nil
	}
	return pki.ClientConfig(t.files(), nil)
}
