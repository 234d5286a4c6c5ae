// Package etcd is the membership.Registry over etcd: each member is a key
// bound to a lease, and watchers rebuild snapshots from etcd's revisioned
// watch. The server is either an external etcd cluster or the one embedded
// by internal/etcdembed on a single machine.
//
// Layout: Prefix + "/apps/<app>/members/<id>" holds the member as JSON,
// attached to a lease with the member's TTL. Join creates the key in a
// transaction that fails if it exists, so a live ID is never taken twice.
package etcd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/etcdembed/zapslog"
	"github.com/hoard-io/hoard/internal/membership"
)

// Defaults of Config.
const (
	// DefaultPrefix roots every hoard key, so hoard can share an etcd
	// cluster with other users.
	DefaultPrefix = "/hoard"
	// DefaultDialTimeout bounds connecting to etcd when the Registry makes
	// its own client.
	DefaultDialTimeout = 5 * time.Second
	// DefaultRevokeTimeout bounds revoking the leases of sessions still open
	// when the Registry is closed.
	DefaultRevokeTimeout = 2 * time.Second
)

// Config configures a Registry.
type Config struct {
	// Endpoints are the etcd client URLs. Required unless Client is set.
	Endpoints []string
	// Client, if set, is used instead of dialing Endpoints; the Registry
	// does not close it.
	Client *clientv3.Client
	// Username and Password sign the Registry's own client in, where etcd
	// has authentication on (package etcdauth: an instance's user may read
	// its application's ring and write its own member key alone). Empty:
	// no user.
	Username, Password string
	// TLS, when set, is the client's TLS to https endpoints: etcd's CA
	// and the cachelet's certificate (pki.ClientConfig). Used when the
	// Registry makes its own client. Default nil: plain HTTP.
	TLS *tls.Config
	// Prefix is prepended to every key. Default DefaultPrefix.
	Prefix string
	// TTL is the members' lease time to live, rounded up to whole seconds
	// (etcd's unit). etcd raises TTLs below its minimum (about 1.5 election
	// timeouts: 2 s with default settings) to that minimum. Default
	// membership.DefaultTTL.
	TTL time.Duration
	// DialTimeout is used when the Registry makes its own client. Default
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives reconnects and re-lists at Info, malformed keys at
	// Warn, and the client library's warnings. Default: discard.
	Logger *slog.Logger
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	if c.Client == nil && len(c.Endpoints) == 0 {
		return errors.New("etcd membership: Endpoints or Client is required")
	}
	if c.TTL < 0 || c.DialTimeout < 0 {
		return errors.New("etcd membership: TTL and DialTimeout must not be negative")
	}
	if c.Prefix != "" && !strings.HasPrefix(c.Prefix, "/") {
		return fmt.Errorf("etcd membership: Prefix %q must start with '/'", c.Prefix)
	}
	return nil
}

// Registry is a membership.Registry over etcd. Its methods are safe for
// concurrent use.
type Registry struct {
	c         *clientv3.Client
	ownClient bool
	prefix    string
	ttl       int64 // seconds
	log       *slog.Logger

	// ctx is canceled by Close; it ends keep-alives and watches.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	sessions map[*session]struct{}
}

var _ membership.Registry = (*Registry)(nil)

// New returns a Registry. It does not contact etcd (the first Join or Watch
// does). Close it to leave and stop watching.
func New(c Config) (*Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = membership.DefaultTTL
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{
		c:        c.Client,
		prefix:   strings.TrimSuffix(c.Prefix, "/"),
		ttl:      int64(math.Ceil(c.TTL.Seconds())),
		log:      c.Logger,
		sessions: make(map[*session]struct{}),
	}
	if r.c == nil {
		cl, err := clientv3.New(clientv3.Config{
			Endpoints:   c.Endpoints,
			DialTimeout: c.DialTimeout,
			Username:    c.Username,
			Password:    c.Password,
			TLS:         c.TLS,
			Logger:      zapslog.New(c.Logger, slog.LevelWarn),
		})
		if err != nil {
			return nil, fmt.Errorf("etcd membership: %w", err)
		}
		r.c, r.ownClient = cl, true
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// TTL returns the lease time to live asked of etcd for each member.
func (r *Registry) TTL() time.Duration { return time.Duration(r.ttl) * time.Second }

// appPrefix is the key prefix of an app's members, ending in '/' so that app
// "x" does not cover app "x1".
func (r *Registry) appPrefix(app string) string {
	return RingPrefix(r.prefix, app)
}

// RingPrefix is the key prefix of app's members under prefix (Config.Prefix;
// empty: DefaultPrefix): what a member must be able to read.
func RingPrefix(prefix, app string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return strings.TrimSuffix(prefix, "/") + "/apps/" + app + "/members/"
}

// MemberKey is member id's key in app's ring under prefix: what the member
// must be able to write, and all it must be able to write.
func MemberKey(prefix, app, id string) string {
	return RingPrefix(prefix, app) + id
}

// Join implements membership.Registry. Besides the sentinel errors, it
// returns etcd's errors (wrapped) when etcd cannot be reached before ctx
// ends.
func (r *Registry) Join(ctx context.Context, m membership.Member) (membership.Session, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("etcd membership: join: %w", err)
	}
	if r.isClosed() {
		return nil, fmt.Errorf("etcd membership: join: %w", membership.ErrClosed)
	}
	val, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("etcd membership: join: %w", err)
	}
	key := r.appPrefix(m.App) + m.ID

	lease, err := r.c.Grant(ctx, r.ttl)
	if err != nil {
		return nil, fmt.Errorf("etcd membership: join %s/%s: grant lease: %w", m.App, m.ID, err)
	}
	resp, err := r.c.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val), clientv3.WithLease(lease.ID))).
		Commit()
	if err == nil && !resp.Succeeded {
		err = membership.ErrDuplicateID
	}
	if err != nil {
		r.revoke(lease.ID)
		return nil, fmt.Errorf("etcd membership: join %s/%s: %w", m.App, m.ID, err)
	}

	kctx, kcancel := context.WithCancel(r.ctx)
	ka, err := r.c.KeepAlive(kctx, lease.ID)
	if err != nil {
		kcancel()
		r.revoke(lease.ID)
		return nil, fmt.Errorf("etcd membership: join %s/%s: keep lease alive: %w", m.App, m.ID, err)
	}
	s := &session{
		r:      r,
		key:    key,
		lease:  lease.ID,
		stopKA: kcancel,
		done:   make(chan struct{}),
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		kcancel()
		r.revoke(lease.ID)
		return nil, fmt.Errorf("etcd membership: join: %w", membership.ErrClosed)
	}
	r.sessions[s] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()
	go s.keepAlive(ka)
	return s, nil
}

// revoke revokes a lease that Join will not hand out, so its key (if any)
// goes now rather than after the TTL.
func (r *Registry) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(r.ctx, DefaultRevokeTimeout)
	defer cancel()
	if _, err := r.c.Revoke(ctx, id); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		r.log.Info("etcd membership: revoke lease", "lease", int64(id), "err", err)
	}
}

func (r *Registry) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Close leaves with every open session (revoking its lease, bounded by
// DefaultRevokeTimeout), ends every watch, waits for the goroutines, and
// closes the client if the Registry made it. It is idempotent. Join and
// Watch then fail with membership.ErrClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	sessions := make([]*session, 0, len(r.sessions))
	for s := range r.sessions {
		sessions = append(sessions, s)
	}
	r.mu.Unlock()

	var errs []error
	for _, s := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), DefaultRevokeTimeout)
		errs = append(errs, s.Close(ctx))
		cancel()
	}
	r.cancel()
	r.wg.Wait()
	if r.ownClient {
		errs = append(errs, r.c.Close())
	}
	return errors.Join(errs...)
}

// session is a membership.Session: a key under a lease that a goroutine
// keeps alive.
type session struct {
	r      *Registry
	key    string
	lease  clientv3.LeaseID
	stopKA context.CancelFunc
	done   chan struct{} // closed when keepAlive exits

	closeOnce sync.Once
	closeErr  error
}

// keepAlive drains the client's keep-alive responses until the channel
// closes: the lease expired or was revoked, etcd was unreachable past the
// TTL, or stopKA was called. Then the session is over.
func (s *session) keepAlive(ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer s.r.wg.Done()
	for range ka {
	}
	close(s.done)
}

func (s *session) Done() <-chan struct{} { return s.done }

// Close implements membership.Session: it stops the keep-alive and revokes
// the lease, which deletes the member's key. A session whose Done was
// already closed has no lease left to revoke: Close then only tidies up.
// Errors are etcd's, wrapped.
func (s *session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		lost := isClosed(s.done)
		s.stopKA()
		if !lost {
			_, err := s.r.c.Revoke(ctx, s.lease)
			if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				s.closeErr = fmt.Errorf("etcd membership: leave %s: %w", s.key, err)
			}
		}
		<-s.done
		s.r.mu.Lock()
		delete(s.r.sessions, s)
		s.r.mu.Unlock()
	})
	return s.closeErr
}

// abandon stops renewing the lease without revoking it, as a process that
// dies does. For tests.
func (s *session) abandon() { s.stopKA() }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
