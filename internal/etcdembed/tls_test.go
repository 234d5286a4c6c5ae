package etcdembed

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hoard-io/hoard/internal/pki"
)

// TestTLS serves etcd over TLS with client certificate authentication: a
// client with a certificate of the CA reads and writes; one without a
// certificate, or with another CA's, or speaking plain HTTP, gets nothing.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := pki.OpenCA(filepath.Join(dir, "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	srvFiles, err := ca.Issue("etcd", pki.Request{Identity: pki.Controller(), Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(t.Context(), Config{Dir: dir, TLS: &TLSFiles{Cert: srvFiles.Cert, Key: srvFiles.Key, CA: srvFiles.CA}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if eps := s.Endpoints(); !strings.HasPrefix(eps[0], "https://") {
		t.Fatalf("endpoints %v, want https", eps)
	}

	try := func(eps []string, tc *tls.Config) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, TLS: tc, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		if _, err := c.Put(ctx, "k", "v"); err != nil {
			return err
		}
		_, err = c.Get(ctx, "k")
		return err
	}
	agentFiles, _ := ca.Issue("agent-n1", pki.Request{Identity: pki.Agent("n1"), Client: true})
	good, err := pki.ClientConfig(agentFiles, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := try(s.Endpoints(), good); err != nil {
		t.Fatalf("client with a certificate of the CA: %v", err)
	}

	noCert, _ := pki.ClientConfig(pki.Files{CA: ca.CertFile()}, nil)
	other, err := pki.OpenCA(filepath.Join(t.TempDir(), "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	otherFiles, _ := other.Issue("agent-n1", pki.Request{Identity: pki.Agent("n1"), Client: true})
	otherFiles.CA = ca.CertFile() // trusts the server, presents another CA's certificate
	otherCA, _ := pki.ClientConfig(otherFiles, nil)
	plain := []string{"http://" + strings.TrimPrefix(s.Endpoints()[0], "https://")}
	for name, c := range map[string]struct {
		eps []string
		tc  *tls.Config
	}{"no certificate": {s.Endpoints(), noCert}, "other CA": {s.Endpoints(), otherCA}, "plain HTTP": {plain, nil}} {
		if err := try(c.eps, c.tc); err == nil {
			t.Errorf("%s: etcd answered", name)
		}
	}
}
