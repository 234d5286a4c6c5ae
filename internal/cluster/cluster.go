// Package cluster is one cachelet's view of its application: it joins the
// application's membership, follows every change, and answers which member
// owns each key from a consistent-hash ring rebuilt on each change (DESIGN:
// docs/design/cooperative-cache.md, "Ring and membership").
//
// A Member is the cachelet's Router. Lookups read the current ring through
// an atomic pointer and never block on membership: a change builds a whole
// new ring on the watch goroutine and swaps it in.
//
// A cachelet cut off from membership (its Session is done: the lease was
// lost, or the member is leaving) stops claiming ownership at once, because
// the other members have already taken its keys over. It then serves as a
// non-owner: keys it would own have no owner (Owner returns "", false), so
// the cachelet reads them from the store, and keys of other members still
// go to those members.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hoard-io/hoard/internal/erasure"
	"github.com/hoard-io/hoard/internal/membership"
	"github.com/hoard-io/hoard/internal/ring"
)

// Config configures a Member.
type Config struct {
	// App is the application the member belongs to. Required.
	App string
	// ID names the member, unique among the application's live members.
	// Required.
	ID string
	// PeerAddr is the host:port of the member's peer listener, which the
	// other members send its keys' requests to. Required.
	PeerAddr string
	// S3Addr is the host:port of the member's S3 front (informational:
	// shown to operators). Optional.
	S3Addr string
	// Node names the machine the member runs on, which the other members
	// read to place an object's erasure-coded shards on distinct nodes.
	// Optional.
	Node string
	// Registry is the membership store. Required. The Member does not
	// close it.
	Registry membership.Registry
	// Ring shapes the ring; every member of App must use the same Ring
	// config. Default: ring's defaults.
	Ring ring.Config
	// Logger receives membership changes at Info and a lost session at
	// Warn. Default: discard.
	Logger *slog.Logger
	// OnChange, if set, is called after each new ring is swapped in, with
	// the ring it replaced (nil before the first) and the new one; and once
	// more, with old == new, when the session is lost and the member stops
	// claiming ownership. It runs on the member's watch goroutine, one call
	// at a time, so it must not block long (later changes wait for it) and
	// must not call Close. Owner already answers from new when it runs.
	OnChange func(old, new *ring.Ring)
	// OnChanging, if set, is called on the watch goroutine just before a
	// new ring is swapped in (Owner still answers from the old one), and
	// OnChange always follows it. It lets a cachelet stop trusting its
	// memory before any Owner question can be answered by the new ring.
	OnChanging func()
}

// Validate checks the config and fills in defaults.
func (c *Config) Validate() error {
	m := membership.Member{App: c.App, ID: c.ID}
	if err := m.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if c.PeerAddr == "" {
		return errors.New("cluster: peer address is required")
	}
	if c.Registry == nil {
		return errors.New("cluster: registry is required")
	}
	if err := c.Ring.Validate(); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// sessionBox holds a Session for atomic.Pointer.
type sessionBox struct{ membership.Session }

// Backoff between attempts to rejoin after the session was lost.
const (
	rejoinMinBackoff = 250 * time.Millisecond
	rejoinMaxBackoff = 5 * time.Second
)

// view is one membership snapshot made into a ring. Immutable.
type view struct {
	rev     int64
	ring    *ring.Ring
	members []membership.Member // sorted by ID
	addrs   map[string]string   // ID -> PeerAddr
}

// Member is a live member of an application. Its methods are safe for
// concurrent use.
type Member struct {
	cfg  Config
	log  *slog.Logger
	sess atomic.Pointer[sessionBox] // the current session; replaced on rejoin
	view atomic.Pointer[view]

	stop      context.CancelFunc // ends the watch
	done      chan struct{}      // closed when the watch goroutine returns
	closeOnce sync.Once
	closeErr  error
}

// Join joins cfg.App as cfg.ID and returns once the member holds a ring
// that includes itself, so Owner answers at once. ctx bounds joining only;
// the member then follows membership until Close. Errors: an invalid
// Config, and the Registry's Join and Watch errors (membership.ErrDuplicateID,
// membership.ErrClosed, ctx's error, the backend's).
func Join(ctx context.Context, cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sess, err := cfg.Registry.Join(ctx, membership.Member{
		ID: cfg.ID, App: cfg.App, PeerAddr: cfg.PeerAddr, S3Addr: cfg.S3Addr, Meta: nodeMeta(cfg.Node),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: join %s/%s: %w", cfg.App, cfg.ID, err)
	}
	m := &Member{
		cfg:  cfg,
		log:  cfg.Logger.With("app", cfg.App, "member", cfg.ID),
		done: make(chan struct{}),
	}
	m.sess.Store(&sessionBox{sess})
	// The watch outlives ctx, which bounds start-up only.
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	m.stop = stop
	snaps, err := cfg.Registry.Watch(wctx, cfg.App)
	if err != nil {
		stop()
		_ = sess.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("cluster: watch %s: %w", cfg.App, err)
	}
	// Join returned once this member was visible, so the first snapshot
	// includes it.
	select {
	case s, ok := <-snaps:
		if !ok {
			stop()
			_ = sess.Close(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("cluster: watch %s: %w", cfg.App, membership.ErrClosed)
		}
		m.apply(s)
	case <-ctx.Done():
		stop()
		_ = sess.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("cluster: join %s/%s: %w", cfg.App, cfg.ID, ctx.Err())
	}
	go m.watch(wctx, snaps)
	return m, nil
}

// watch applies snapshots until the watch ends. When the session is lost
// it serves as a non-owner and tries to rejoin, with capped exponential
// backoff (the old lease may still hold the ID until it expires).
func (m *Member) watch(ctx context.Context, snaps <-chan membership.Snapshot) {
	defer close(m.done)
	lost := m.session().Done()
	var retry <-chan time.Time
	backoff := rejoinMinBackoff
	for {
		select {
		case s, ok := <-snaps:
			if !ok {
				return
			}
			m.apply(s)
		case <-lost:
			lost = nil
			if ctx.Err() != nil {
				return // Close: leaving on purpose
			}
			m.log.Warn("membership session lost: serving as a non-owner, the store is the fallback; rejoining")
			m.changed()
			retry = time.After(backoff)
		case <-retry:
			retry = nil
			if sess, err := m.rejoin(ctx); err != nil {
				backoff = min(2*backoff, rejoinMaxBackoff)
				m.log.Debug("rejoin failed", "err", err, "next_in", backoff)
				retry = time.After(backoff)
			} else {
				backoff = rejoinMinBackoff
				m.sess.Store(&sessionBox{sess})
				lost = sess.Done()
				m.log.Info("rejoined the application")
				m.changed()
			}
		case <-ctx.Done():
			return
		}
	}
}

// rejoin registers the member again under a new session.
func (m *Member) rejoin(ctx context.Context) (membership.Session, error) {
	jctx, cancel := context.WithTimeout(ctx, rejoinMaxBackoff)
	defer cancel()
	return m.cfg.Registry.Join(jctx, membership.Member{
		ID: m.cfg.ID, App: m.cfg.App, PeerAddr: m.cfg.PeerAddr, S3Addr: m.cfg.S3Addr, Meta: nodeMeta(m.cfg.Node),
	})
}

// changed reports an ownership change that the ring does not show (the
// session was lost or regained).
func (m *Member) changed() {
	if m.cfg.OnChange != nil {
		r := m.Ring()
		m.cfg.OnChange(r, r)
	}
}

func (m *Member) session() membership.Session { return m.sess.Load().Session }

// apply swaps in the ring of snapshot s, unless s has the same members
// (IDs and peer addresses) as the current view.
func (m *Member) apply(s membership.Snapshot) {
	old := m.view.Load()
	if old != nil && slices.EqualFunc(old.members, s.Members, func(a, b membership.Member) bool {
		return a.ID == b.ID && a.PeerAddr == b.PeerAddr
	}) {
		return
	}
	r, err := ring.New(m.cfg.Ring, s.IDs())
	if err != nil {
		// Snapshots hold distinct, non-empty IDs; this is a backend bug.
		m.log.Error("membership snapshot rejected", "revision", s.Revision, "err", err)
		return
	}
	v := &view{rev: s.Revision, ring: r, members: s.Members, addrs: make(map[string]string, len(s.Members))}
	for _, mem := range s.Members {
		v.addrs[mem.ID] = mem.PeerAddr
	}
	if m.cfg.OnChanging != nil {
		m.cfg.OnChanging()
	}
	m.view.Store(v)
	m.log.Info("membership changed", "revision", s.Revision, "members", s.IDs())
	if m.cfg.OnChange != nil {
		var oldRing *ring.Ring
		if old != nil {
			oldRing = old.ring
		}
		m.cfg.OnChange(oldRing, r)
	}
}

// Owner implements the cachelet's Router: the peer address of the member
// owning bucket/key, and whether that member is this one. It does no I/O
// and takes no lock. While the session is done (lost or closed), keys this
// member would own have no owner: it returns "", false.
func (m *Member) Owner(bucket, key string) (addr string, self bool) {
	v := m.view.Load()
	id := v.ring.Owner(bucket, key)
	if id == "" {
		return "", false
	}
	if id == m.cfg.ID {
		if m.Lost() {
			return "", false
		}
		return v.addrs[id], true
	}
	return v.addrs[id], false
}

// Lost reports whether the member's session is done: its lease was lost
// (until the member rejoins) or the member left. A lost member claims no
// keys.
func (m *Member) Lost() bool {
	select {
	case <-m.session().Done():
		return true
	default:
		return false
	}
}

// PeerAddrs returns the peer addresses of the other current members
// (cachelet.PeerLister).
func (m *Member) PeerAddrs() []string {
	v := m.view.Load()
	out := make([]string, 0, len(v.members))
	for _, mem := range v.members {
		if mem.ID != m.cfg.ID {
			out = append(out, mem.PeerAddr)
		}
	}
	return out
}

// MetaNode is the member metadata key naming its node.
const MetaNode = "node"

func nodeMeta(node string) map[string]string {
	if node == "" {
		return nil
	}
	return map[string]string{MetaNode: node}
}

// Place implements the cachelet's ShardPlacer: the peer addresses of the
// n members holding shards 0..n-1 of bucket/key (erasure.Place: distinct
// members, distinct nodes first where members name theirs), nil when the
// application has fewer than n members or this member claims nothing.
func (m *Member) Place(bucket, key string, n int) []string {
	if m.Lost() {
		return nil
	}
	v := m.view.Load()
	nodes := make(map[string]string, len(v.members))
	for _, mem := range v.members {
		nodes[mem.ID] = mem.Meta[MetaNode]
	}
	ids := erasure.Place(v.ring, func(id string) string { return nodes[id] }, bucket, key, n)
	if ids == nil {
		return nil
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = v.addrs[id]
	}
	return out
}

// BackupHolder implements the cachelet's backup placement: the peer
// address of the member that keeps backups of the shards of the member at
// peer address origin, "" when there is none. It is the first owner on
// the ring of origin's own key that is not origin, so once origin leaves
// the ring still names the same member (its arc passes to the next owner).
func (m *Member) BackupHolder(origin string) string {
	if m.Lost() {
		return ""
	}
	v := m.view.Load()
	for _, id := range v.ring.Owners("hoard-backup", origin, 2) {
		if addr := v.addrs[id]; addr != origin && addr != "" {
			return addr
		}
	}
	return ""
}

// DurableBackups implements the cachelet's choice of the member that
// keeps the second copy of a durable write of bucket/key this member
// owns (`durable_writes: replicated`, ADR 0030): the peer addresses of
// the other members in the key's ring order after this one, those on
// another node (by the membership records' node names) first, and how
// many of them lead the list (the rest are on this member's node, or no
// node names were given). Nil while this member claims nothing or is
// alone. The first is the key's next owner when this member leaves, on
// one node.
func (m *Member) DurableBackups(bucket, key string) (addrs []string, otherNodes int) {
	if m.Lost() {
		return nil, 0
	}
	return m.view.Load().backups(m.cfg.ID, bucket, key)
}

// BackupsOf is DurableBackups as the member at peer address owner picks
// them for bucket/key in this member's view (this member among them,
// where it is one): the members a reader that cannot reach the key's
// owner asks for the owner's writes not yet in the store. Nil when owner
// is not a member in this view.
func (m *Member) BackupsOf(owner, bucket, key string) []string {
	v := m.view.Load()
	for id, addr := range v.addrs {
		if addr == owner {
			addrs, _ := v.backups(id, bucket, key)
			return addrs
		}
	}
	return nil
}

// backups is DurableBackups of the member with ID owner in view v.
func (v *view) backups(owner, bucket, key string) (addrs []string, otherNodes int) {
	if len(v.members) < 2 {
		return nil, 0
	}
	nodes := make(map[string]string, len(v.members))
	for _, mem := range v.members {
		nodes[mem.ID] = mem.Meta[MetaNode]
	}
	own := nodes[owner]
	var same []string
	for _, id := range v.ring.Owners(bucket, key, len(v.members)) {
		addr := v.addrs[id]
		switch {
		case id == owner || addr == "":
		case own != "" && nodes[id] != "" && nodes[id] != own:
			addrs = append(addrs, addr)
		default:
			same = append(same, addr)
		}
	}
	otherNodes = len(addrs)
	return append(addrs, same...), otherNodes
}

// Present reports whether a member with ID id is in the current
// membership.
func (m *Member) Present(id string) bool {
	v := m.view.Load()
	_, ok := v.addrs[id]
	return ok
}

// PeerAddr is the peer address this member advertises.
func (m *Member) PeerAddr() string { return m.cfg.PeerAddr }

// ID is the member's ID.
func (m *Member) ID() string { return m.cfg.ID }

// Ring returns the current ring. It is immutable and stays valid after
// later changes.
func (m *Member) Ring() *ring.Ring { return m.view.Load().ring }

// Revision is the membership revision of the current ring.
func (m *Member) Revision() int64 { return m.view.Load().rev }

// Members returns the current members, sorted by ID. The slice is the
// caller's.
func (m *Member) Members() []membership.Member {
	v := m.view.Load()
	out := make([]membership.Member, len(v.members))
	for i, mem := range v.members {
		out[i] = mem.Clone()
	}
	return out
}

// Close leaves the application: the session is closed (the member is
// removed at once, so the others stop routing to it), the watch stops, and
// Close waits for the watch goroutine (and so for a running OnChange).
// Idempotent: later calls wait for the first and return its result. On an
// error (ctx ended, store unreachable) the member still disappears when its
// lease expires.
func (m *Member) Close(ctx context.Context) error {
	m.closeOnce.Do(func() {
		m.stop()
		<-m.done // no rejoin can race with leaving
		err := m.session().Close(ctx)
		if err != nil {
			m.closeErr = fmt.Errorf("cluster: leave %s/%s: %w", m.cfg.App, m.cfg.ID, err)
		}
		m.log.Info("left the application")
	})
	return m.closeErr
}
