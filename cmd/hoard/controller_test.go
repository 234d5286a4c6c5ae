package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/etcdauth"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/rig"
)

// TestControllerPreparesEtcdAuth: --etcd-enable-auth turns a fresh etcd's
// authentication on with root's password from the credentials file and
// --etcd-agents-credentials makes the agents' shared user (as the Helm
// chart runs the controller); a second start is a no-op; bad files are
// refused before etcd is touched.
func TestControllerPreparesEtcdAuth(t *testing.T) {
	etcd, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	eps := etcd.Endpoints()
	dir := t.TempDir()
	root := etcdauth.Credentials{Username: etcdauth.Root, Password: etcdauth.NewPassword()}
	agents := etcdauth.Credentials{Username: "hoard-agents", Password: etcdauth.NewPassword()}
	agentsFile := filepath.Join(dir, "agents.json")
	if err := etcdauth.WriteFile(agentsFile, agents); err != nil {
		t.Fatal(err)
	}
	loose := filepath.Join(dir, "loose.json")
	if err := os.WriteFile(loose, []byte(`{"username":"hoard-agents","password":"x"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	rootAgents := filepath.Join(dir, "root-agents.json")
	if err := etcdauth.WriteFile(rootAgents, root); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var tf tlsFlags
	cfg := rig.Config{EtcdEndpoints: eps, EtcdCredentials: root}

	// Refused, and etcd left as it was (authentication off).
	for _, c := range []struct {
		name string
		cfg  rig.Config
		file string
	}{
		{"agents' file readable by its group", cfg, loose},
		{"agents' user root", cfg, rootAgents},
		{"missing agents' file", cfg, filepath.Join(dir, "none.json")},
		{"not signed in as root", rig.Config{EtcdEndpoints: eps, EtcdCredentials: agents}, agentsFile},
	} {
		err := prepareEtcdAuth(ctx, c.cfg, &tf, true, c.file)
		if err == nil || !errors.Is(err, errUsage) {
			t.Errorf("%s: %v, want a usage error", c.name, err)
		}
	}
	anon, err := etcdauth.Client(eps, etcdauth.Credentials{})
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if st, err := anon.AuthStatus(ctx); err != nil || st.Enabled {
		t.Fatalf("after refused starts, authentication is %v (%v); want off", st, err)
	}

	for i := range 2 {
		if err := prepareEtcdAuth(ctx, cfg, &tf, true, agentsFile); err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
	}
	if _, err := anon.Get(ctx, api.EtcdPrefix); !errors.Is(err, rpctypes.ErrUserEmpty) && !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("anonymous read after the start: %v, want refused", err)
	}
	cli, err := etcdauth.Client(eps, agents)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, api.EtcdPrefix+"agent-n1", `{}`); err != nil {
		t.Errorf("an agent registers with the shared user: %v", err)
	}
	if _, err := cli.Get(ctx, "/hoard/platform/apps/", clientv3.WithPrefix()); !errors.Is(err, rpctypes.ErrPermissionDenied) {
		t.Errorf("the agents' user reads application records: %v", err)
	}
	// Another root password is refused: etcd keeps the first.
	other := rig.Config{EtcdEndpoints: eps, EtcdCredentials: etcdauth.Credentials{Username: etcdauth.Root, Password: "other"}}
	if err := prepareEtcdAuth(ctx, other, &tf, true, ""); err == nil {
		t.Error("a start with another root password succeeded")
	}
}

// TestControllerStoreEventsToken: a short --store-events-token is a
// usage error, found before anything is started.
func TestControllerStoreEventsToken(t *testing.T) {
	args := []string{"--etcd-endpoints", "127.0.0.1:1", "--store-endpoint", "http://127.0.0.1:1", "--store-identities", "minio",
		"--token", "admin-token-0123456789", "--agent-token", "agent-token-0123456789", "--store-events-token", "short"}
	err := runController(t.Context(), args, io.Discard, io.Discard)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "store-events-token") {
		t.Fatalf("a short events token: %v, want a usage error naming it", err)
	}
}
