package main

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/notify"
	"github.com/hoard-io/hoard/internal/pki"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// `hoard serve --tls-cert --tls-key --tls-ca` serves S3 over https and
// posts its triggers to an https controller presenting its certificate.
func TestServeTLS(t *testing.T) {
	ca, err := pki.OpenCA(filepath.Join(t.TempDir(), "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.Issue("thumbs-1", pki.Request{Identity: pki.Cachelet("thumbs", "thumbs-1"), Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := ca.Issue("controller", pki.Request{Identity: pki.Controller(), Hosts: []string{"127.0.0.1"}, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	events := make(chan notify.Message, 1)
	sink := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m notify.Message
		_ = json.NewDecoder(r.Body).Decode(&m)
		events <- m
	}))
	sinkTLS, err := pki.ServerConfig(ctl, pki.AnyIdentity)
	if err != nil {
		t.Fatal(err)
	}
	sink.Listener = tls.NewListener(sink.Listener, sinkTLS) // not StartTLS, which adds a certificate of its own
	sink.Start()
	sinkURL := "https://" + sink.Listener.Addr().String()
	defer sink.Close()

	info, _ := serving(t, append(baseServeArgs(t, "bkt"), "--app", "thumbs", "--id", "thumbs-1", "--notify-url", sinkURL,
		"--tls-cert", f.Cert, "--tls-key", f.Key, "--tls-ca", f.CA)...)
	if !strings.HasPrefix(info.Endpoint, "https://127.0.0.1:") {
		t.Fatalf("endpoint %s, want https", info.Endpoint)
	}
	tc, err := pki.ClientConfig(pki.Files{CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	client, err := s3store.New(s3store.Config{Endpoint: info.Endpoint, AccessKey: "ak", SecretKey: "sk", Region: "us-east-1", TLS: tc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if _, err := client.Put(t.Context(), "bkt", "in/x.txt", strings.NewReader("hello"), 5, store.PutOptions{}); err != nil {
		t.Fatalf("PUT over https: %v", err)
	}
	select {
	case m := <-events:
		if len(m.Records) != 1 || m.Records[0].S3.Object.Key != "in/x.txt" {
			t.Errorf("event %+v", m)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event at the https controller, which requires the cachelet's certificate")
	}
	// A client that does not trust the CA gets nothing.
	untrusting, _ := s3store.New(s3store.Config{Endpoint: info.Endpoint, AccessKey: "ak", SecretKey: "sk", Region: "us-east-1", MaxAttempts: 1}, nil)
	defer untrusting.Close()
	if _, err := untrusting.Put(t.Context(), "bkt", "y", strings.NewReader("y"), 1, store.PutOptions{}); err == nil {
		t.Error("a client without the CA bundle trusted the cachelet")
	}
}

func TestTLSFlagsValidate(t *testing.T) {
	for _, tc := range []struct {
		f  tlsFlags
		ok bool
	}{
		{tlsFlags{}, true},
		{tlsFlags{cert: "c", key: "k"}, true},
		{tlsFlags{cert: "c"}, false},
		{tlsFlags{key: "k"}, false},
		{tlsFlags{clientCA: "ca"}, false},
		{tlsFlags{cert: "c", key: "k", clientCA: "none"}, true},
	} {
		err := tc.f.validate()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, errUsage) {
			t.Errorf("%+v: %v", tc.f, err)
		}
	}
}
