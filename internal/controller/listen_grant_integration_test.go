//go:build integration

package controller_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/controller"
	"github.com/hoard-io/hoard/internal/grant"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

// TestListenGrant: an application's store identity may follow the changes
// of its own buckets (ADR 0028) and of no other: the attacker, app beta,
// is refused the change stream of alpha's bucket.
func TestListenGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	srv, err := localstore.StartMinIO(ctx, localstore.Config{DataDir: filepath.Join(t.TempDir(), "data"), Addr: "127.0.0.1:0",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("start MinIO: %v", err)
	}
	t.Cleanup(func() { srv.Close() })
	root, err := s3store.New(s3store.Config{Endpoint: srv.Endpoint(), AccessKey: srv.AccessKey(), SecretKey: srv.SecretKey()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"alpha-data", "beta-data"} {
		if err := root.CreateBucket(ctx, b, ""); err != nil {
			t.Fatal(err)
		}
	}
	ids, err := controller.NewMinIOIdentities(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), nil)
	if err != nil {
		t.Fatal(err)
	}
	client := func(app, bucket string) *s3store.Store {
		keys, err := ids.Grant(ctx, app, []grant.Bucket{{Name: bucket, Access: grant.ReadOnly}}, api.StoreKeys{})
		if err != nil {
			t.Fatal(err)
		}
		st, err := s3store.New(s3store.Config{Endpoint: srv.Endpoint(), AccessKey: keys.AccessKey, SecretKey: keys.SecretKey}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	alpha, beta := client("alpha", "alpha-data"), client("beta", "beta-data")
	listen := func(st *s3store.Store, bucket string) error {
		lctx, cancel := context.WithTimeout(ctx, 4*time.Second)
		defer cancel()
		return st.Listen(lctx, bucket, 3*time.Second, nil, func(store.Change) {})
	}
	denied := func(err error) bool {
		var api *store.APIError
		return errors.As(err, &api) && api.Code == "AccessDenied"
	}
	if err := listen(beta, "alpha-data"); !denied(err) {
		t.Errorf("beta listening to alpha's bucket: %v, want AccessDenied", err)
	}
	for _, c := range []struct {
		st     *s3store.Store
		bucket string
	}{{alpha, "alpha-data"}, {beta, "beta-data"}} {
		if err := listen(c.st, c.bucket); denied(err) {
			t.Errorf("listening to its own bucket %s: %v", c.bucket, err)
		}
	}
}
