//go:build integration

package etcdauth

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/membership"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
)

// start runs an embedded etcd with authentication on and returns its
// endpoints, a root client and an Admin.
func start(t *testing.T) ([]string, *clientv3.Client, *Admin) {
	t.Helper()
	s, err := etcdembed.Start(t.Context(), etcdembed.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	pw := NewPassword()
	if err := Enable(t.Context(), s.Endpoints(), pw); err != nil {
		t.Fatal(err)
	}
	root, err := Client(s.Endpoints(), Credentials{Username: Root, Password: pw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	// Enable again, as `hoard up` does at every start: a no-op with the
	// right password, an error with another.
	if err := Enable(t.Context(), s.Endpoints(), pw); err != nil {
		t.Fatalf("enable again: %v", err)
	}
	if err := Enable(t.Context(), s.Endpoints(), "wrong"); err == nil {
		t.Fatal("enable with a wrong root password succeeded")
	}
	return s.Endpoints(), root, NewAdmin(root, "")
}

func dial(t *testing.T, eps []string, c Credentials) *clientv3.Client {
	t.Helper()
	cli, err := Client(eps, c)
	if err != nil {
		t.Fatalf("sign in as %q: %v", c.Username, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func denied(err error) bool {
	return errors.Is(err, rpctypes.ErrPermissionDenied) || errors.Is(err, rpctypes.ErrUserEmpty) ||
		errors.Is(err, rpctypes.ErrAuthFailed) || errors.Is(err, rpctypes.ErrInvalidAuthToken)
}

// TestInstanceUser is the attack table of ADR 15 against a real etcd: an
// instance's credentials maintain its own member entry and read its ring,
// and nothing else: not the controller's application records (their
// secrets), not another member's entry, not another application's ring,
// not another member's lease. Without credentials nothing at all.
func TestInstanceUser(t *testing.T) {
	eps, root, admin := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	secret := `{"name":"a","credentials":{"secret_key":"s3cr3t","peer_secret":"p33r"}}`
	if _, err := root.Put(ctx, "/hoard/platform/apps/a", secret); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	credA, err := admin.AddInstance(ctx, "a", "a-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("an instance's user made in %v", time.Since(t0))
	credB, err := admin.AddInstance(ctx, "b", "b-1")
	if err != nil {
		t.Fatal(err)
	}

	// Each instance joins its ring through the membership client.
	regA, err := etcdmembership.New(etcdmembership.Config{Endpoints: eps, Username: credA.Username, Password: credA.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer regA.Close()
	regB, err := etcdmembership.New(etcdmembership.Config{Endpoints: eps, Username: credB.Username, Password: credB.Password})
	if err != nil {
		t.Fatal(err)
	}
	defer regB.Close()
	sessA, err := regA.Join(ctx, membership.Member{App: "a", ID: "a-1", PeerAddr: "127.0.0.1:1", S3Addr: "127.0.0.1:2"})
	if err != nil {
		t.Fatalf("a-1 joins its ring: %v", err)
	}
	if _, err := regB.Join(ctx, membership.Member{App: "b", ID: "b-1", PeerAddr: "127.0.0.1:3", S3Addr: "127.0.0.1:4"}); err != nil {
		t.Fatalf("b-1 joins its ring: %v", err)
	}
	snaps, err := regA.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if s := <-snaps; len(s.Members) != 1 || s.Members[0].ID != "a-1" {
		t.Fatalf("a-1 watches its ring: %+v", s)
	}

	cliA := dial(t, eps, credA)
	bKey := etcdmembership.MemberKey("", "b", "b-1")
	bLease, err := root.Get(ctx, bKey)
	if err != nil || len(bLease.Kvs) != 1 {
		t.Fatalf("b-1's entry: %v", err)
	}
	anon := dial(t, eps, Credentials{})
	rogue := `{"id":"a-2","peer_addr":"10.0.0.66:1","s3_addr":"10.0.0.66:2"}`
	for _, tc := range []struct {
		name string
		op   func() error
		ok   bool
	}{
		{"read the application records (secrets)", func() error { _, err := cliA.Get(ctx, "/hoard/platform/apps/", clientv3.WithPrefix()); return err }, false},
		{"read its own application's record", func() error { _, err := cliA.Get(ctx, "/hoard/platform/apps/a"); return err }, false},
		{"read the agents", func() error { _, err := cliA.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix()); return err }, false},
		{"plant a rogue member in its own ring", func() error {
			_, err := cliA.Put(ctx, etcdmembership.MemberKey("", "a", "a-2"), rogue)
			return err
		}, false},
		{"plant a rogue member in another ring", func() error {
			_, err := cliA.Put(ctx, etcdmembership.MemberKey("", "b", "a-1"), rogue)
			return err
		}, false},
		{"overwrite another member", func() error { _, err := cliA.Put(ctx, bKey, rogue); return err }, false},
		{"delete another member", func() error { _, err := cliA.Delete(ctx, bKey); return err }, false},
		{"delete its ring", func() error {
			_, err := cliA.Delete(ctx, etcdmembership.RingPrefix("", "a"), clientv3.WithPrefix())
			return err
		}, false},
		{"revoke another member's lease", func() error {
			_, err := cliA.Revoke(ctx, clientv3.LeaseID(bLease.Kvs[0].Lease))
			return err
		}, false},
		{"read another ring", func() error {
			_, err := cliA.Get(ctx, etcdmembership.RingPrefix("", "b"), clientv3.WithPrefix())
			return err
		}, false},
		{"read everything", func() error { _, err := cliA.Get(ctx, "", clientv3.WithFromKey()); return err }, false},
		{"add a user", func() error { _, err := cliA.UserAdd(ctx, "x", "y"); return err }, false},
		{"read its ring", func() error {
			_, err := cliA.Get(ctx, etcdmembership.RingPrefix("", "a"), clientv3.WithPrefix())
			return err
		}, true},
		{"rewrite its own entry", func() error {
			_, err := cliA.Put(ctx, etcdmembership.MemberKey("", "a", "a-1"), `{"id":"a-1","peer_addr":"127.0.0.1:1","s3_addr":"127.0.0.1:2"}`)
			return err
		}, true},
		{"anonymous read", func() error { _, err := anon.Get(ctx, "/hoard/platform/apps/a"); return err }, false},
		{"anonymous write", func() error {
			_, err := anon.Put(ctx, etcdmembership.MemberKey("", "a", "a-2"), rogue)
			return err
		}, false},
	} {
		err := tc.op()
		if tc.ok && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if !tc.ok && !denied(err) {
			t.Errorf("%s: %v, want permission denied", tc.name, err)
		}
	}
	if resp, _ := root.Get(ctx, etcdmembership.RingPrefix("", "a"), clientv3.WithPrefix()); len(resp.Kvs) != 1 {
		t.Errorf("ring a holds %d entries, want a-1's alone", len(resp.Kvs))
	}

	// Its own entry: leaving revokes its lease.
	if err := sessA.Close(ctx); err != nil {
		t.Errorf("a-1 leaves: %v", err)
	}
	// Removed, its user signs in no more.
	if err := admin.RemoveInstance(ctx, "a-1"); err != nil {
		t.Fatal(err)
	}
	if err := admin.RemoveInstance(ctx, "a-1"); err != nil {
		t.Errorf("removing twice: %v", err)
	}
	if cli, err := Client(eps, credA); err == nil {
		_, err = cli.Get(ctx, etcdmembership.RingPrefix("", "a"), clientv3.WithPrefix())
		cli.Close()
		if !denied(err) {
			t.Errorf("a removed instance's user: %v", err)
		}
	}
	ids, err := admin.Instances(ctx)
	if err != nil || len(ids) != 1 || ids[0] != "b-1" {
		t.Errorf("instances with users: %v, %v", ids, err)
	}
}

// TestAgentUser: an agent keeps its registration and touches nothing
// else.
func TestAgentUser(t *testing.T) {
	eps, root, admin := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := root.Put(ctx, "/hoard/platform/apps/a", "secret"); err != nil {
		t.Fatal(err)
	}
	c, err := admin.AddAgent(ctx, "node-0")
	if err != nil {
		t.Fatal(err)
	}
	cli := dial(t, eps, c)
	lease, err := cli.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, api.EtcdPrefix+"node-0", `{"id":"node-0"}`, clientv3.WithLease(lease.ID)); err != nil {
		t.Errorf("register: %v", err)
	}
	if _, err := cli.Put(ctx, api.EtcdPrefix+"node-1", `{"id":"node-1"}`); !denied(err) {
		t.Errorf("register as another agent: %v", err)
	}
	if _, err := cli.Get(ctx, "/hoard/platform/apps/a"); !denied(err) {
		t.Errorf("read an application's record: %v", err)
	}
	if _, err := cli.Put(ctx, etcdmembership.MemberKey("", "a", "x"), "{}"); !denied(err) {
		t.Errorf("plant a member: %v", err)
	}
	// It reads the other agents' registrations and the function trees
	// (to reattach where its tree says), and writes neither.
	if _, err := root.Put(ctx, api.EtcdTrees+"a", `{}`); err != nil {
		t.Fatal(err)
	}
	if r, err := cli.Get(ctx, api.EtcdTrees+"a"); err != nil || len(r.Kvs) != 1 {
		t.Errorf("read a function tree: %v", err)
	}
	if _, err := cli.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix()); err != nil {
		t.Errorf("read the registrations: %v", err)
	}
	if _, err := cli.Put(ctx, api.EtcdTrees+"a", `{"rev":"x"}`); !denied(err) {
		t.Errorf("write a function tree: %v", err)
	}
	if _, err := cli.Delete(ctx, api.EtcdPrefix+"node-1"); !denied(err) {
		t.Errorf("delete another agent's registration: %v", err)
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Errorf("leave: %v", err)
	}
}

// TestAgentsUser: the user agents share on Kubernetes, whose IDs are not
// known beforehand, registers any agent and reads what agents read, and
// touches nothing else; its password is the operator's, changed by
// calling AddAgents again; root's and the Admin's own names are refused.
func TestAgentsUser(t *testing.T) {
	eps, root, admin := start(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := root.Put(ctx, "/hoard/platform/apps/a", "secret"); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Put(ctx, api.EtcdTrees+"a", `{}`); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{Root, "hoard-agent:x", "hoard-instance:y", ""} {
		if err := admin.AddAgents(ctx, Credentials{Username: name, Password: "p"}); err == nil {
			t.Errorf("AddAgents as %q succeeded", name)
		}
	}
	if err := admin.AddAgents(ctx, Credentials{Username: "hoard-agents", Password: "first"}); err != nil {
		t.Fatal(err)
	}
	c := Credentials{Username: "hoard-agents", Password: NewPassword()}
	if err := admin.AddAgents(ctx, c); err != nil {
		t.Fatalf("again, with a new password: %v", err)
	}
	if cli, err := Client(eps, Credentials{Username: "hoard-agents", Password: "first"}); err == nil {
		_, err = cli.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix())
		cli.Close()
		if !denied(err) {
			t.Errorf("the old password: %v", err)
		}
	}
	cli := dial(t, eps, c)
	lease, err := cli.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"agent-node-a", "agent-node-b"} {
		if _, err := cli.Put(ctx, api.EtcdPrefix+id, `{"id":"`+id+`"}`, clientv3.WithLease(lease.ID)); err != nil {
			t.Errorf("register %s: %v", id, err)
		}
	}
	if r, err := cli.Get(ctx, api.EtcdPrefix, clientv3.WithPrefix()); err != nil || len(r.Kvs) != 2 {
		t.Errorf("read the registrations: %v", err)
	}
	if r, err := cli.Get(ctx, api.EtcdTrees+"a"); err != nil || len(r.Kvs) != 1 {
		t.Errorf("read a function tree: %v", err)
	}
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"read an application's record", func() error { _, err := cli.Get(ctx, "/hoard/platform/apps/a"); return err }},
		{"write a function tree", func() error { _, err := cli.Put(ctx, api.EtcdTrees+"a", `{"rev":"x"}`); return err }},
		{"plant a ring member", func() error { _, err := cli.Put(ctx, etcdmembership.MemberKey("", "a", "x"), "{}"); return err }},
		{"read everything", func() error { _, err := cli.Get(ctx, "", clientv3.WithFromKey()); return err }},
		{"add a user", func() error { _, err := cli.UserAdd(ctx, "x", "y"); return err }},
		{"grant itself root", func() error { _, err := cli.UserGrantRole(ctx, c.Username, Root); return err }},
	} {
		if err := tc.op(); !denied(err) {
			t.Errorf("%s: %v, want permission denied", tc.name, err)
		}
	}
	if _, err := cli.Revoke(ctx, lease.ID); err != nil {
		t.Errorf("leave: %v", err)
	}
}
