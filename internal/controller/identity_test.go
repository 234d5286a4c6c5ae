package controller

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/grant"
)

// fakeIdentities keeps each application's grant in memory.
type fakeIdentities struct {
	mu      sync.Mutex
	grants  map[string][]grant.Bucket
	keys    map[string]api.StoreKeys
	revoked []string
	n       int
}

func newFakeIdentities() *fakeIdentities {
	return &fakeIdentities{grants: map[string][]grant.Bucket{}, keys: map[string]api.StoreKeys{}}
}

func (f *fakeIdentities) Grant(_ context.Context, app string, buckets []grant.Bucket, current api.StoreKeys) (api.StoreKeys, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if current.AccessKey == "" {
		f.n++
		current = api.StoreKeys{AccessKey: app + "-key-" + strings.Repeat("x", f.n), SecretKey: app + "-secret"}
	}
	f.grants[app] = append([]grant.Bucket{}, buckets...)
	f.keys[app] = current
	return current, nil
}

func (f *fakeIdentities) Revoke(_ context.Context, app string, keys api.StoreKeys) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keys[app] != keys {
		return errors.New("revoking keys that were not granted")
	}
	delete(f.grants, app)
	delete(f.keys, app)
	f.revoked = append(f.revoked, app)
	return nil
}

func (f *fakeIdentities) granted(app string) []grant.Bucket {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grants[app]
}

// Deploying grants the application a store identity limited to its
// buckets, which its instances are started with; a redeploy keeps the
// keys and follows the buckets; removing the application revokes it.
func TestStoreIdentity(t *testing.T) {
	ids := newFakeIdentities()
	c, fa, _ := setupWith(t, Config{Identities: ids})
	ctx := context.Background()
	v1 := "name: app\nbuckets: {photos: read-write}\nfunctions: {f: {handler: m.h}}\n"
	if _, err := c.Deploy(ctx, pkg(t, v1)); err != nil {
		t.Fatal(err)
	}
	if got := ids.granted("app"); !slices.Equal(got, []grant.Bucket{{Name: "photos", Access: grant.ReadWrite}}) {
		t.Fatalf("granted %v", got)
	}
	keys := c.apps["app"].rec.Store
	if keys.AccessKey == "" {
		t.Fatal("no store identity recorded")
	}
	if _, err := c.Invoke(ctx, "app", "f", nil, "test"); err != nil {
		t.Fatal(err)
	}
	fa.mu.Lock()
	started := fa.lastStore
	fa.mu.Unlock()
	if started != keys {
		t.Errorf("instance started with store keys %+v, want the application's %+v", started, keys)
	}

	v2 := "name: app\nbuckets: {photos: read-only, models: read-only}\nfunctions: {f: {handler: m.h}}\n"
	if _, err := c.Deploy(ctx, pkg(t, v2)); err != nil {
		t.Fatal(err)
	}
	if got := ids.granted("app"); len(got) != 2 || got[0].Access != grant.ReadOnly {
		t.Errorf("after the redeploy: granted %v", got)
	}
	if c.apps["app"].rec.Store != keys {
		t.Error("the redeploy changed the application's store keys")
	}

	bad := "name: app\nbuckets: {data: read-only}\nfunctions: {f: {handler: m.h}}\n"
	c2, _, _ := setupWith(t, Config{SystemBucket: "data"})
	if _, err := c2.Deploy(ctx, pkg(t, bad)); !errors.Is(err, appspec.ErrInvalid) {
		t.Errorf("deploying with the platform's bucket: %v", err)
	}

	if err := c.Remove(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids.revoked, []string{"app"}) {
		t.Errorf("revoked %v", ids.revoked)
	}
}

func TestFileIdentities(t *testing.T) {
	p := filepath.Join(t.TempDir(), "ids.yaml")
	if err := os.WriteFile(p, []byte("myapp: {access_key: AK1, secret_key: SK1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := FileIdentities{Path: p}
	k, err := f.Grant(context.Background(), "myapp", nil, api.StoreKeys{})
	if err != nil || k != (api.StoreKeys{AccessKey: "AK1", SecretKey: "SK1"}) {
		t.Fatalf("Grant = %+v, %v", k, err)
	}
	if _, err := f.Grant(context.Background(), "other", nil, api.StoreKeys{}); !errors.Is(err, ErrNoIdentity) {
		t.Fatalf("an application without keys: %v", err)
	}
	if err := os.WriteFile(p, []byte("myapp: {access_key: AK1, secret: SK1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Grant(context.Background(), "myapp", nil, api.StoreKeys{}); err == nil {
		t.Fatal("a misspelt field was accepted")
	}
}
