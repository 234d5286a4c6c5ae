package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/rig"
)

// tlsDir is where `hoard up --tls` keeps its local CA and certificates,
// in the state directory: ca.crt (the bundle clients trust), ca.key and
// every part's key (0600).
const tlsDir = "tls"

// upTLS is `hoard up --tls`'s PKI (ADR 0017): the local CA, opened (made
// on the first start, renewed when old) at every start, and each part's
// certificate, reused across restarts and renewed before expiry.
type upTLS struct {
	ca                                     *pki.CA
	hosts                                  []string
	controller, agent, etcd, store, client pki.Files
}

// newUpTLS issues every certificate of a one-node platform; hosts are the
// addresses its listeners are reached on besides 127.0.0.1 and localhost.
func newUpTLS(dir string, hosts ...string) (*upTLS, error) {
	ca, err := pki.OpenCA(filepath.Join(dir, tlsDir), nil)
	if err != nil {
		return nil, err
	}
	all := []string{"127.0.0.1", "localhost"}
	for _, h := range hosts {
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			all = append(all, h)
		}
	}
	u := &upTLS{ca: ca, hosts: all}
	return u, u.issue()
}

// issue issues (or reuses, while fresh) every part's certificate.
func (u *upTLS) issue() error {
	all := u.hosts
	var err error
	for _, c := range []struct {
		f    *pki.Files
		name string
		req  pki.Request
	}{
		{&u.controller, "controller", pki.Request{Identity: pki.Controller(), Hosts: all, Server: true, Client: true}},
		{&u.agent, "agent", pki.Request{Identity: pki.Agent("local"), Hosts: all, Server: true, Client: true}},
		// etcd and the store serve, and call out (etcd's peer listener,
		// MinIO's webhook) as clients of no role: no listener of the
		// platform's own accepts them for more than their tokens allow.
		{&u.etcd, "etcd", pki.Request{Identity: pki.Client("etcd"), Hosts: all, Server: true, Client: true}},
		{&u.store, "store", pki.Request{Identity: pki.Client("store"), Hosts: all, Server: true, Client: true}},
		// The CLI's, named in the env file: a caller of the controller
		// with the admin token.
		{&u.client, "cli", pki.Request{Identity: pki.Client("cli"), Client: true}},
	} {
		if *c.f, err = u.ca.Issue(c.name, c.req); err != nil {
			return err
		}
	}
	return nil
}

// renewEvery checks the certificates every period until ctx ends,
// renewing those with less than a third of their validity left; the
// listeners and clients read a renewed file at their next handshake
// (pki.ServerConfig). MinIO's copy of its own is refreshed at the next
// start. The returned function stops the loop and waits for it.
func (u *upTLS) renewEvery(ctx context.Context, period time.Duration, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := u.issue(); err != nil {
					log.Error("renewing the TLS certificates", "err", err)
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// rig is the platform's TLS: the controller requires clients'
// certificates of the CA, the agent the controller's.
func (u *upTLS) rig() *rig.TLS {
	return &rig.TLS{Controller: u.controller, Agent: u.agent, CA: u.ca.CertFile(), Issuer: u.ca}
}

// cachelet puts `hoard up`'s own cachelet i (of application app) on TLS:
// https for S3, mutual TLS for its peers, its certificate towards the
// controller.
func (u *upTLS) cachelet(cfg *instance.Config, app string, i int) error {
	f, err := u.ca.Issue(fmt.Sprintf("cachelet-%d", i), pki.Request{
		Identity: pki.Cachelet(app, fmt.Sprintf("up-%d", i)), Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true,
	})
	if err != nil {
		return err
	}
	if cfg.TLS, err = pki.ServerConfig(pki.Files{Cert: f.Cert, Key: f.Key}, nil); err != nil {
		return err
	}
	if cfg.PeerTLS, err = pki.ServerConfig(f, pki.AppOrPlatform(app)); err != nil {
		return err
	}
	if cfg.PeerClientTLS, err = pki.ClientConfig(f, pki.AppOrPlatform(app)); err != nil {
		return err
	}
	if cfg.PlatformTLS, err = pki.ClientConfig(f, nil); err != nil {
		return err
	}
	cfg.Store.TLS, err = pki.ClientConfig(pki.Files{CA: f.CA}, nil)
	return err
}

// etcdClient is the TLS of `hoard up`'s own etcd clients: the
// controller's certificate (they run in its process).
func (u *upTLS) etcdClient() (*tls.Config, error) { return pki.ClientConfig(u.controller, nil) }

// minioEnv makes MinIO's webhook present the store's certificate to the
// controller, which requires one of the CA.
func (u *upTLS) minioEnv() []string { return rig.MinIOWebhookClientEnv(u.store) }

// env is the env file's TLS settings: paths, not secrets. AWS SDKs read
// AWS_CA_BUNDLE; the CLI the HOARD_TLS_* (clientFlags).
func (u *upTLS) env() string {
	return fmt.Sprintf("AWS_CA_BUNDLE=%s\nHOARD_TLS_CA=%s\nHOARD_TLS_CERT=%s\nHOARD_TLS_KEY=%s\n",
		u.ca.CertFile(), u.ca.CertFile(), u.client.Cert, u.client.Key)
}
