package controller

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/grant"
)

// StoreIdentities gives each application an identity of its own at the
// store, reaching only the buckets its spec grants. Its cachelets sign
// with it; no cachelet ever holds the store's root keys. The controller
// calls Grant and Revoke for one application at a time; calls for
// different applications may run concurrently.
type StoreIdentities interface {
	// Grant makes app's identity, or updates it so that it reaches
	// exactly buckets, and returns its keys. current is the identity app
	// holds already (zero for none); Grant keeps its keys where it can,
	// so that running instances keep working across a redeploy.
	Grant(ctx context.Context, app string, buckets []grant.Bucket, current api.StoreKeys) (api.StoreKeys, error)
	// Revoke removes app's identity (keys, as Grant returned them). An
	// identity already gone is not an error.
	Revoke(ctx context.Context, app string, keys api.StoreKeys) error
}

// ErrNoIdentity is Grant's error when the operator has not provisioned
// an application's store identity (FileIdentities).
var ErrNoIdentity = errors.New("no store identity for the application")

// FileIdentities are identities the operator made at the store, for
// stores whose identities hoard cannot make itself (AWS S3: an IAM user
// or role per application, with grant.Policy's policy). The file, YAML,
// maps each application to its keys:
//
//	myapp: {access_key: AKIA..., secret_key: ...}
//
// It is read at every Grant, so an application can be added without
// restarting the controller; Revoke leaves the store alone.
type FileIdentities struct {
	Path string
}

type fileKeys struct {
	AccessKey string `yaml:"access_key"`
	SecretKey string `yaml:"secret_key"`
}

// Grant returns app's keys from the file; the policy is the operator's.
func (f FileIdentities) Grant(_ context.Context, app string, _ []grant.Bucket, _ api.StoreKeys) (api.StoreKeys, error) {
	data, err := os.ReadFile(f.Path)
	if err != nil {
		return api.StoreKeys{}, fmt.Errorf("store identities: %w", err)
	}
	var m map[string]fileKeys
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		return api.StoreKeys{}, fmt.Errorf("store identities: %s: %w", f.Path, err)
	}
	k, ok := m[app]
	if !ok || k.AccessKey == "" || k.SecretKey == "" {
		return api.StoreKeys{}, fmt.Errorf("%w %q in %s: make one at the store, limited to its buckets, and add its keys there", ErrNoIdentity, app, f.Path)
	}
	return api.StoreKeys(k), nil
}

// Revoke does nothing: the operator made the identity and removes it.
func (FileIdentities) Revoke(context.Context, string, api.StoreKeys) error { return nil }
