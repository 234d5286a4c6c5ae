//go:build integration

package s3store_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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
