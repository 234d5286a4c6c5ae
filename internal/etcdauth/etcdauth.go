// Package etcdauth turns on etcd's authentication for hoard and keeps its
// users and roles (ADR 15): root is the controller's (and `hoard up`'s),
// each node agent has a user that may keep only its own registration,
// and each instance a user that may read its application's ring and
// write only its own member key. Application records (their secrets
// among them) stay under /hoard/platform/, which no role but root reads.
//
// The users' passwords are random (32 bytes from crypto/rand) and travel
// in files of mode 0600 (WriteFile, ReadFile), never on a command line
// or in an environment.
package etcdauth

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/hoard-io/hoard/internal/api"
	etcdmembership "github.com/hoard-io/hoard/internal/membership/etcd"
)

// Root is etcd's root user (etcd needs one named so to enable auth).
const Root = "root"

// Users' and roles' names.
const (
	agentPrefix    = "hoard-agent:"    // + agent ID: user and role
	instancePrefix = "hoard-instance:" // + instance ID: user and role
	ringPrefix     = "hoard-ring:"     // + application: role (read the ring)
)

// ErrInsecureFile is returned by ReadFile for a credentials file others
// may read or write.
var ErrInsecureFile = errors.New("etcdauth: credentials file readable or writable by others")

// Credentials are an etcd user's name and password, as the agent's
// start request carries them.
type Credentials = api.EtcdCredentials

// NewPassword is 32 random bytes, hex.
func NewPassword() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// WriteFile writes c to path with mode 0600 (through a temporary file in
// the same directory, renamed).
func WriteFile(path string, c Credentials) error {
	data, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".etcd-credentials-*") // mode 0600
	if err != nil {
		return fmt.Errorf("etcdauth: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("etcdauth: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("etcdauth: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("etcdauth: %w", err)
	}
	return nil
}

// ReadFile reads credentials WriteFile wrote; a file whose mode lets
// others in is refused (ErrInsecureFile).
func ReadFile(path string) (Credentials, error) {
	f, err := os.Open(path)
	if err != nil {
		return Credentials{}, fmt.Errorf("etcdauth: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Credentials{}, fmt.Errorf("etcdauth: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Credentials{}, fmt.Errorf("%w: %s is %v", ErrInsecureFile, path, st.Mode().Perm())
	}
	var c Credentials
	if err := json.NewDecoder(f).Decode(&c); err != nil {
		return Credentials{}, fmt.Errorf("etcdauth: %s: %w", path, err)
	}
	if c.Username == "" || c.Password == "" {
		return Credentials{}, fmt.Errorf("etcdauth: %s: username and password are required", path)
	}
	return c, nil
}

// Client dials endpoints as c (no user when c is zero).
func Client(endpoints []string, c Credentials) (*clientv3.Client, error) {
	return ClientTLS(endpoints, c, nil)
}

// ClientTLS is Client over TLS where tc is set (https endpoints): tc
// trusts etcd's CA and presents the caller's certificate, which an etcd
// with client certificate authentication requires before the user's
// password is even asked.
func ClientTLS(endpoints []string, c Credentials, tc *tls.Config) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		Username: c.Username, Password: c.Password, TLS: tc})
}

// Enable turns authentication on in the etcd at endpoints, with root
// holding rootPassword, unless it is on already; either way it then
// checks that rootPassword is root's. It is what `hoard up` does at
// every start: etcd keeps its users in its data directory.
func Enable(ctx context.Context, endpoints []string, rootPassword string) error {
	return EnableTLS(ctx, endpoints, nil, rootPassword)
}

// EnableTLS is Enable over TLS where tc is set (ClientTLS).
func EnableTLS(ctx context.Context, endpoints []string, tc *tls.Config, rootPassword string) error {
	if rootPassword == "" {
		return errors.New("etcdauth: a root password is required")
	}
	cli, err := ClientTLS(endpoints, Credentials{}, tc)
	if err != nil {
		return fmt.Errorf("etcdauth: %w", err)
	}
	defer cli.Close()
	st, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcdauth: auth status: %w", err)
	}
	if !st.Enabled {
		if _, err := cli.UserAdd(ctx, Root, rootPassword); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
			_, err = cli.UserChangePassword(ctx, Root, rootPassword)
			if err != nil {
				return fmt.Errorf("etcdauth: root: %w", err)
			}
		} else if err != nil {
			return fmt.Errorf("etcdauth: adding root: %w", err)
		}
		if _, err := cli.UserGrantRole(ctx, Root, Root); err != nil {
			return fmt.Errorf("etcdauth: granting root: %w", err)
		}
		if _, err := cli.AuthEnable(ctx); err != nil {
			return fmt.Errorf("etcdauth: enabling auth: %w", err)
		}
	}
	root, err := ClientTLS(endpoints, Credentials{Username: Root, Password: rootPassword}, tc)
	if err != nil {
		return fmt.Errorf("etcdauth: signing in as root: %w", err)
	}
	defer root.Close()
	if _, err := root.AuthStatus(ctx); err != nil {
		return fmt.Errorf("etcdauth: signing in as root: %w", err)
	}
	return nil
}

// Admin keeps the users of agents and instances. It holds a client
// signed in as root. Its methods are safe for concurrent use.
type Admin struct {
	cli *clientv3.Client
	// prefix roots the membership keys (etcdmembership.Config.Prefix).
	prefix string
}

// NewAdmin returns an Admin over cli, which must be signed in as root;
// the Admin does not close it. prefix is the membership's key prefix;
// empty: etcdmembership.DefaultPrefix.
func NewAdmin(cli *clientv3.Client, prefix string) *Admin {
	if prefix == "" {
		prefix = etcdmembership.DefaultPrefix
	}
	return &Admin{cli: cli, prefix: prefix}
}

// AddAgent makes (or renews, with a new password) the user of agent id,
// which may write its registration key alone, and read the agents'
// registrations and the function trees (to reattach where its
// application's tree says when its parent there fails).
func (a *Admin) AddAgent(ctx context.Context, id string) (Credentials, error) {
	key := api.EtcdPrefix + id
	name := agentPrefix + id
	if err := a.role(ctx, name, key, "", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return Credentials{}, err
	}
	for _, p := range []string{api.EtcdPrefix, api.EtcdTrees} {
		if err := a.role(ctx, name, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(clientv3.PermRead)); err != nil {
			return Credentials{}, err
		}
	}
	return a.user(ctx, name, []string{name})
}

// AgentsRole is the role of the one user every node agent shares where
// agents' IDs are not known before they start (a Kubernetes DaemonSet:
// AddAgents).
const AgentsRole = "hoard-agents"

// ErrReservedUser is returned by AddAgents for a user name that is
// root's or one of the names the Admin gives agents and instances.
var ErrReservedUser = errors.New("etcdauth: reserved user name")

// AddAgents makes (or updates) the user every node agent shares, named
// and with the password of c (the operator's, from a file): it may write
// any agent's registration key and read the registrations and the
// function trees, and nothing else (not the application records). Where
// each agent has an ID known beforehand (`hoard up --nodes`), AddAgent's
// user of its own is narrower: the shared user may also rewrite another
// agent's registration.
func (a *Admin) AddAgents(ctx context.Context, c Credentials) error {
	if c.Username == "" || c.Password == "" {
		return errors.New("etcdauth: the agents' user needs a name and a password")
	}
	if c.Username == Root || strings.HasPrefix(c.Username, agentPrefix) || strings.HasPrefix(c.Username, instancePrefix) {
		return fmt.Errorf("%w: %q", ErrReservedUser, c.Username)
	}
	if err := a.role(ctx, AgentsRole, api.EtcdPrefix, clientv3.GetPrefixRangeEnd(api.EtcdPrefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return err
	}
	if err := a.role(ctx, AgentsRole, api.EtcdTrees, clientv3.GetPrefixRangeEnd(api.EtcdTrees), clientv3.PermissionType(clientv3.PermRead)); err != nil {
		return err
	}
	if _, err := a.cli.UserAdd(ctx, c.Username, c.Password); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		if _, err := a.cli.UserChangePassword(ctx, c.Username, c.Password); err != nil {
			return fmt.Errorf("etcdauth: user %s: %w", c.Username, err)
		}
	} else if err != nil {
		return fmt.Errorf("etcdauth: adding user %s: %w", c.Username, err)
	}
	if _, err := a.cli.UserGrantRole(ctx, c.Username, AgentsRole); err != nil {
		return fmt.Errorf("etcdauth: granting %s to %s: %w", AgentsRole, c.Username, err)
	}
	return nil
}

// AddInstance makes the user of instance id of app: it may read app's
// ring (the membership prefix) and read and write its own member key.
// The caller removes it (RemoveInstance) when the instance is gone.
func (a *Admin) AddInstance(ctx context.Context, app, id string) (Credentials, error) {
	ring := etcdmembership.RingPrefix(a.prefix, app)
	if err := a.role(ctx, ringPrefix+app, ring, clientv3.GetPrefixRangeEnd(ring), clientv3.PermissionType(clientv3.PermRead)); err != nil {
		return Credentials{}, err
	}
	name := instancePrefix + id
	if err := a.role(ctx, name, etcdmembership.MemberKey(a.prefix, app, id), "", clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return Credentials{}, err
	}
	return a.user(ctx, name, []string{ringPrefix + app, name})
}

// RemoveInstance removes instance id's user and role; an instance without
// them is no error.
func (a *Admin) RemoveInstance(ctx context.Context, id string) error {
	name := instancePrefix + id
	if _, err := a.cli.UserDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("etcdauth: removing user %s: %w", name, err)
	}
	if _, err := a.cli.RoleDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("etcdauth: removing role %s: %w", name, err)
	}
	return nil
}

// Instances lists the instances that have users.
func (a *Admin) Instances(ctx context.Context) ([]string, error) {
	resp, err := a.cli.UserList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcdauth: listing users: %w", err)
	}
	var ids []string
	for _, u := range resp.Users {
		if id, ok := strings.CutPrefix(u, instancePrefix); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// user makes user name with a fresh password (or gives an existing one a
// fresh password) and grants it roles.
func (a *Admin) user(ctx context.Context, name string, roles []string) (Credentials, error) {
	c := Credentials{Username: name, Password: NewPassword()}
	if _, err := a.cli.UserAdd(ctx, name, c.Password); errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		if _, err := a.cli.UserChangePassword(ctx, name, c.Password); err != nil {
			return Credentials{}, fmt.Errorf("etcdauth: user %s: %w", name, err)
		}
	} else if err != nil {
		return Credentials{}, fmt.Errorf("etcdauth: adding user %s: %w", name, err)
	}
	for _, r := range roles {
		if _, err := a.cli.UserGrantRole(ctx, name, r); err != nil {
			return Credentials{}, fmt.Errorf("etcdauth: granting %s to %s: %w", r, name, err)
		}
	}
	return c, nil
}

// role makes role name (when missing) and grants it perm on [key,
// rangeEnd) (key alone when rangeEnd is empty).
func (a *Admin) role(ctx context.Context, name, key, rangeEnd string, perm clientv3.PermissionType) error {
	if _, err := a.cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcdauth: adding role %s: %w", name, err)
	}
	if _, err := a.cli.RoleGrantPermission(ctx, name, key, rangeEnd, perm); err != nil {
		return fmt.Errorf("etcdauth: granting %s on %s: %w", name, key, err)
	}
	return nil
}
