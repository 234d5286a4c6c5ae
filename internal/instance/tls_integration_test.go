//go:build integration

package instance_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	s3v2 "github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/instance"
	"github.com/hoard-io/hoard/internal/localstore"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
	"github.com/hoard-io/hoard/internal/pki"
)

// TestTLSCluster runs two cachelets of one application with every
// listener on TLS: etcd (client certificates required), the S3 endpoints
// (https, the CA bundle the clients' only trust) and the peer protocol
// (mutual TLS, same application or platform). A key owned by one is read
// through the other (a peer fetch over mutual TLS); a cachelet of another
// application, a client of another CA, and a client with no certificate
// are refused by the peer listener.
func TestTLSCluster(t *testing.T) {
	dir := t.TempDir()
	srv := startStore(t, localstore.StartMinIO, filepath.Join(dir, "data"), "127.0.0.1:0")
	t.Cleanup(func() { srv.Close() })
	ca, err := pki.OpenCA(filepath.Join(dir, "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(name string, id pki.Identity) pki.Files {
		f, err := ca.Issue(name, pki.Request{Identity: id, Hosts: []string{"127.0.0.1", "localhost"}, Server: true, Client: true})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ef := issue("etcd", pki.Controller())
	etcd, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, TLS: &etcdembed.TLSFiles{Cert: ef.Cert, Key: ef.Key, CA: ef.CA}})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(etcd.Close)

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := &clusterEnv{store: srv}
	for i := range 2 {
		id := fmt.Sprintf("shop-%d", i)
		f := issue(id, pki.Cachelet("shop", id))
		etcdTLS, err := pki.ClientConfig(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		reg, err := etcdmembership.New(etcdmembership.Config{Endpoints: etcd.Endpoints(), TLS: etcdTLS})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = reg.Close() })
		cfg := instance.Config{
			AccessKey: clientAK, SecretKey: clientSK, MetricsListen: "off",
			Registry: reg, App: "shop", ID: id,
			Secret: []byte("0123456789abcdef-shop-secret"),
		}
		if cfg.TLS, err = pki.ServerConfig(pki.Files{Cert: f.Cert, Key: f.Key}, nil); err != nil {
			t.Fatal(err)
		}
		if cfg.PeerTLS, err = pki.ServerConfig(f, pki.AppOrPlatform("shop")); err != nil {
			t.Fatal(err)
		}
		if cfg.PeerClientTLS, err = pki.ClientConfig(f, pki.AppOrPlatform("shop")); err != nil {
			t.Fatal(err)
		}
		cfg.Store.Endpoint, cfg.Store.AccessKey, cfg.Store.SecretKey = srv.Endpoint(), storeAK, storeSK
		cfg.Cachelet.Cache.Budget = 64 << 20
		in, err := instance.Start(ctx, cfg, log.With("cachelet", i))
		if err != nil {
			t.Fatalf("start cachelet %d: %v", i, err)
		}
		t.Cleanup(func() { _ = in.Close(context.Background()) })
		if ep := in.Endpoint(); ep[:8] != "https://" {
			t.Fatalf("endpoint %s, want https", ep)
		}
		e.ins = append(e.ins, in)
	}
	e.waitRings(t, 2)

	clientTLS, err := pki.ClientConfig(pki.Files{CA: ca.CertFile()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s3 := func(i int) *s3v2.Client {
		return s3v2.New(s3v2.Options{
			BaseEndpoint: aws.String(e.ins[i].Endpoint()), Region: "us-east-1", UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(clientAK, clientSK, ""),
			HTTPClient:  &http.Client{Transport: &http.Transport{TLSClientConfig: clientTLS}, Timeout: 10 * time.Second},
		})
	}
	const bucket = "tls"
	if _, err := s3(0).CreateBucket(ctx, &s3v2.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket over https: %v", err)
	}
	direct := minioClient(t, srv.Endpoint(), storeAK, storeSK)
	// 100 KiB answers leave in several writes; 5 KiB ones are held and
	// sent whole (onewrite), beneath the TLS records on both listeners.
	var own int
	for _, size := range []int{100 << 10, 5 << 10} {
		want := randomBytes(t, size)
		key := fmt.Sprintf("behind-%d", size)
		if _, err := direct.PutObject(ctx, bucket, key, bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		own = e.owner(t, bucket, key)
		other := 1 - own
		for _, step := range []struct {
			via  int
			read string
		}{{other, "remote_miss"}, {own, "local_hit"}, {other, "local_hit"}} {
			out, err := s3(step.via).GetObject(ctx, &s3v2.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if err != nil {
				t.Fatalf("get through cachelet %d: %v", step.via, err)
			}
			got, err := io.ReadAll(out.Body)
			out.Body.Close()
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("get through cachelet %d: %d bytes, %v", step.via, len(got), err)
			}
			raw, _ := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response)
			if read := raw.Header.Get("X-Hoard-Read"); read != step.read {
				t.Errorf("through cachelet %d (owner %d): x-hoard-read %q, want %q (a peer fetch over mutual TLS)", step.via, own, read, step.read)
			}
		}
	}
	// A plain-HTTP client of the S3 endpoint gets no answer.
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get("http://" + e.ins[0].Endpoint()[len("https://"):] + "/"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("plain HTTP to the TLS S3 endpoint: %s", resp.Status)
		}
	}

	// Attackers at the owner's peer listener, straight at the socket: the
	// handshake fails before any request is read.
	peerURL := "https://" + e.ins[own].PeerAddr() + "/v1/probe?bytes=1"
	b := issue("other-1", pki.Cachelet("other", "other-1"))
	otherApp, _ := pki.ClientConfig(b, nil)
	foreign, err := pki.OpenCA(filepath.Join(t.TempDir(), "tls"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ff, _ := foreign.Issue("shop-9", pki.Request{Identity: pki.Cachelet("shop", "shop-9"), Client: true})
	ff.CA = ca.CertFile()
	otherCA, _ := pki.ClientConfig(ff, nil)
	noCert := clientTLS
	for name, tc := range map[string]*tls.Config{"cachelet of another application": otherApp, "another CA": otherCA, "no certificate": noCert} {
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 5 * time.Second}
		resp, err := cl.Get(peerURL)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: the peer listener answered %s", name, resp.Status)
		}
		cl.CloseIdleConnections()
	}
	// The same request with a certificate of the application reaches the
	// protocol (and is refused there for want of a signature: the MACs
	// stay on under TLS).
	same := issue("shop-7", pki.Cachelet("shop", "shop-7"))
	sameTLS, _ := pki.ClientConfig(same, nil)
	cl := &http.Client{Transport: &http.Transport{TLSClientConfig: sameTLS}, Timeout: 5 * time.Second}
	resp, err := cl.Get(peerURL)
	if err != nil {
		t.Fatalf("a cachelet of the application: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("an unsigned peer request over mutual TLS: %s, want 401 or 403", resp.Status)
	}
}
