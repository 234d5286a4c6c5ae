//go:build integration

package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
	"github.com/hoard-io/hoard/internal/store/storetest"
)

// servers are started once in TestMain and shared by the tests of this
// package: starting MinIO takes seconds, and every subtest uses its own
// bucket anyway.
type servers struct {
	minio, versitygw *localstore.Server
}

var shared servers //nolint:gochecknoglobals // test fixture owned by TestMain

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hoard-s3store-it-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	shared.minio, err = localstore.StartMinIO(ctx, localstore.Config{
		DataDir: filepath.Join(dir, "minio", "data"), Logger: logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.minio.Close()
	shared.versitygw, err = localstore.StartVersitygw(ctx, localstore.Config{
		DataDir: filepath.Join(dir, "versitygw", "data"), Logger: logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer shared.versitygw.Close()
	return m.Run()
}

func storeFor(t *testing.T, srv *localstore.Server) store.Store {
	t.Helper()
	st, err := s3store.New(s3store.Config{
		Endpoint:  srv.Endpoint(),
		AccessKey: srv.AccessKey(),
		SecretKey: srv.SecretKey(),
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestConformanceMinIO(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return storeFor(t, shared.minio) })
}

func TestConformanceVersitygw(t *testing.T) {
	storetest.RunWith(t, storetest.Capabilities{
		// versitygw answers a HEAD on a missing bucket with a bare
		// 404 and no error-code header.
		StatMissingBucketIsNoSuchKey: true,
		// versitygw answers If-None-Match with an ETag on a PUT with
		// 501 NotImplemented, and If-Match "*" with 412.
		PartialConditionalPut: true,
	}, func(t *testing.T) store.Store { return storeFor(t, shared.versitygw) })
}

// TestPassMinIO: requests passed through reach a real MinIO re-signed,
// with their sub-resources, bodies and odd keys, and its answers come back
// as it gave them, errors included.
func TestPassMinIO(t *testing.T) {
	st := storeFor(t, shared.minio).(*s3store.Store)
	ctx := t.Context()
	if err := st.CreateBucket(ctx, "pass", ""); err != nil {
		t.Fatal(err)
	}
	pass := func(method, path, query, body string) (int, string) {
		t.Helper()
		req := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: query}, Header: http.Header{}}
		if body != "" {
			req.Body, req.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
		}
		resp, err := st.Pass(ctx, req)
		if err != nil {
			t.Fatalf("%s %s?%s: %v", method, path, query, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	versioning := `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>`
	if status, body := pass(http.MethodPut, "/pass", "versioning=", versioning); status != http.StatusOK {
		t.Fatalf("put versioning: %d %s", status, body)
	}
	if status, body := pass(http.MethodGet, "/pass", "versioning=", ""); status != http.StatusOK || !strings.Contains(body, "<Status>Enabled</Status>") {
		t.Errorf("get versioning: %d %s", status, body)
	}
	for _, key := range []string{"plain", "a b+c%d", " ", "dir/ü/x"} {
		if status, body := pass(http.MethodPut, "/pass/"+key, "", "data of "+key); status != http.StatusOK {
			t.Errorf("put %q: %d %s", key, status, body)
			continue
		}
		if status, body := pass(http.MethodGet, "/pass/"+key, "", ""); status != http.StatusOK || body != "data of "+key {
			t.Errorf("get %q: %d %q", key, status, body)
		}
	}
	if status, body := pass(http.MethodGet, "/pass/missing", "", ""); status != http.StatusNotFound || !strings.Contains(body, "<Code>NoSuchKey</Code>") {
		t.Errorf("missing key: %d %s", status, body)
	}
	if status, body := pass(http.MethodGet, "/pass", "versions=", ""); status != http.StatusOK || !strings.Contains(body, "<Key>plain</Key>") {
		t.Errorf("list versions: %d %s", status, body)
	}
}

// TestVersioningAndDeleteMarkersMinIO: Versioned says what the store's
// versioning is, a missing bucket is ErrNoSuchBucket, and a key whose
// latest version is a delete marker is a DeleteMarkerError naming it.
func TestVersioningAndDeleteMarkersMinIO(t *testing.T) {
	st := storeFor(t, shared.minio).(*s3store.Store)
	ctx := t.Context()
	if _, err := st.Versioned(ctx, "no-such-bucket-here"); !errors.Is(err, store.ErrNoSuchBucket) {
		t.Errorf("missing bucket: %v, want ErrNoSuchBucket", err)
	}
	if err := st.CreateBucket(ctx, "vers", ""); err != nil {
		t.Fatal(err)
	}
	if v, err := st.Versioned(ctx, "vers"); v || err != nil {
		t.Errorf("new bucket: versioned %v, %v", v, err)
	}
	put := func(key string) {
		t.Helper()
		if _, err := st.Put(ctx, "vers", key, strings.NewReader("x"), 1, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put("k")
	if err := st.Delete(ctx, "vers", "k"); err != nil {
		t.Fatal(err)
	}
	var dm *store.DeleteMarkerError
	if _, err := st.Stat(ctx, "vers", "k"); !errors.Is(err, store.ErrNoSuchKey) || errors.As(err, &dm) {
		t.Errorf("deleted, unversioned: %v, want a plain ErrNoSuchKey", err)
	}
	versioning := `<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status></VersioningConfiguration>`
	req := &http.Request{Method: http.MethodPut, URL: &url.URL{Path: "/vers", RawQuery: "versioning="}, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(versioning)), ContentLength: int64(len(versioning))}
	resp, err := st.Pass(ctx, req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("enable versioning: %v %v", resp, err)
	}
	resp.Body.Close()
	if v, err := st.Versioned(ctx, "vers"); !v || err != nil {
		t.Errorf("versioned bucket: versioned %v, %v", v, err)
	}
	put("k")
	if err := st.Delete(ctx, "vers", "k"); err != nil {
		t.Fatal(err)
	}
	_, err = st.Stat(ctx, "vers", "k")
	if !errors.Is(err, store.ErrNoSuchKey) || !errors.As(err, &dm) || dm.VersionID == "" {
		t.Errorf("deleted, versioned: %v, want a DeleteMarkerError with a version", err)
	}
}

// TestEncodedWordMetadataMinIO: a metadata value that looks MIME-encoded
// (RFC 2047) comes back as it was written, as the store keeps and sends
// it, from Stat and Get alike (minio-go would decode it).
func TestEncodedWordMetadataMinIO(t *testing.T) {
	st := storeFor(t, shared.minio)
	ctx := t.Context()
	if err := st.CreateBucket(ctx, "words", ""); err != nil {
		t.Fatal(err)
	}
	const word = "=?UTF-8?B?w7w=?="
	meta := map[string]string{"name": word, "plain": "=?not a word"}
	if _, err := st.Put(ctx, "words", "k", strings.NewReader("x"), 1, store.PutOptions{UserMetadata: meta}); err != nil {
		t.Fatal(err)
	}
	info, err := st.Stat(ctx, "words", "k")
	if err != nil {
		t.Fatal(err)
	}
	body, ginfo, _, err := st.Get(ctx, "words", "k", store.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	body.Close()
	for name, got := range map[string]map[string]string{"stat": info.UserMetadata, "get": ginfo.UserMetadata} {
		for k, v := range meta {
			if got[k] != v {
				t.Errorf("%s: x-amz-meta-%s = %q, want %q", name, k, got[k], v)
			}
		}
	}
}
