// Package memory is an in-process membership.Registry for unit tests of the
// code that consumes membership (the cachelet, the ring), and for a process
// that is the only member of its applications.
//
// Leases are simulated: a member stays until its session is closed, expired
// with Expire, or crashed with Crash and then left alone for the TTL on the
// injected clock.Clock. Use a clock.Fake to expire leases without sleeping.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/membership"
)

// Config configures a Registry. The zero value selects every default.
type Config struct {
	// TTL is how long a crashed member stays before its lease expires.
	// Default membership.DefaultTTL.
	TTL time.Duration
	// Clock schedules lease expiry. Default: the real clock.
	Clock clock.Clock
}

// Validate reports whether c can be used.
func (c Config) Validate() error {
	if c.TTL < 0 {
		return errors.New("memory: TTL must not be negative")
	}
	return nil
}

// Registry is an in-process membership.Registry. Its methods are safe for
// concurrent use.
type Registry struct {
	ttl   time.Duration
	clock clock.Clock

	mu       sync.Mutex
	closed   bool
	rev      int64
	apps     map[string]*app
	sessions map[*session]struct{}

	done chan struct{} // closed by Close; ends every watch
	wg   sync.WaitGroup
}

// app is one application's members and watchers.
type app struct {
	rev      int64 // revision of the last change; 0 if none yet
	members  map[string]*session
	watchers map[chan struct{}]struct{} // each watcher's wake-up, buffered 1
}

var _ membership.Registry = (*Registry)(nil)

// New returns an empty Registry. Close it to end its watches.
func New(c Config) (*Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.TTL == 0 {
		c.TTL = membership.DefaultTTL
	}
	c.Clock = clock.Or(c.Clock)
	return &Registry{
		ttl:      c.TTL,
		clock:    c.Clock,
		apps:     make(map[string]*app),
		sessions: make(map[*session]struct{}),
		done:     make(chan struct{}),
	}, nil
}

// TTL returns the lease time to live of the registry's members.
func (r *Registry) TTL() time.Duration { return r.ttl }

// Join implements membership.Registry.
func (r *Registry) Join(ctx context.Context, m membership.Member) (membership.Session, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("memory: join: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: join: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, fmt.Errorf("memory: join: %w", membership.ErrClosed)
	}
	a := r.app(m.App)
	if _, ok := a.members[m.ID]; ok {
		return nil, fmt.Errorf("memory: join %s/%s: %w", m.App, m.ID, membership.ErrDuplicateID)
	}
	s := &session{r: r, m: m.Clone(), done: make(chan struct{})}
	a.members[m.ID] = s
	r.sessions[s] = struct{}{}
	r.changedLocked(a)
	return s, nil
}

// Watch implements membership.Registry. It never fails for backend reasons.
func (r *Registry) Watch(ctx context.Context, appName string) (<-chan membership.Snapshot, error) {
	if err := membership.ValidateName(appName); err != nil {
		return nil, fmt.Errorf("memory: watch: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: watch: %w", err)
	}
	wake := make(chan struct{}, 1)
	wake <- struct{}{} // deliver the current state first
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("memory: watch: %w", membership.ErrClosed)
	}
	r.app(appName).watchers[wake] = struct{}{}
	r.wg.Add(1)
	r.mu.Unlock()

	out := make(chan membership.Snapshot)
	go func() {
		defer r.wg.Done()
		defer close(out)
		defer func() {
			r.mu.Lock()
			delete(r.apps[appName].watchers, wake)
			r.mu.Unlock()
		}()
		var (
			pending membership.Snapshot
			send    chan<- membership.Snapshot // nil while nothing is pending
			last    int64                      = -1
		)
		for {
			select {
			case <-ctx.Done():
				return
			case <-r.done:
				return
			case <-wake:
				if s, ok := r.snapshot(appName, last); ok {
					pending, send, last = s, out, s.Revision
				}
			case send <- pending:
				send = nil
			}
		}
	}()
	return out, nil
}

// Close ends every session (as clean leaves) and every watch, and waits for
// the watch goroutines. It is idempotent. Join and Watch then fail with
// membership.ErrClosed.
func (r *Registry) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for s := range r.sessions {
		r.removeLocked(s)
	}
	close(r.done)
	r.mu.Unlock()
	r.wg.Wait()
	return nil
}

// Crash makes s behave as if its process died: its lease is no longer
// renewed, so the member disappears after the TTL on the registry's Clock.
// It lets tests of lease expiry run without a real process to kill. s must
// come from r.Join; Crash of an ended session does nothing.
func (r *Registry) Crash(s membership.Session) {
	ms := s.(*session)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ms.ended || ms.crashed {
		return
	}
	ms.crashed = true
	ms.stopExpiry = r.clock.AfterFunc(r.ttl, func() { r.Expire(ms) })
}

// Expire ends s's lease now, as when the store revokes it or loses contact
// with the member for longer than the TTL: the member is removed and s.Done
// is closed. s must come from r.Join; Expire of an ended session does
// nothing.
func (r *Registry) Expire(s membership.Session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removeLocked(s.(*session))
}

// app returns the named app, creating it. r.mu must be held.
func (r *Registry) app(name string) *app {
	a := r.apps[name]
	if a == nil {
		a = &app{members: make(map[string]*session), watchers: make(map[chan struct{}]struct{})}
		r.apps[name] = a
	}
	return a
}

// changedLocked records a change of a's membership and wakes its watchers.
// r.mu must be held.
func (r *Registry) changedLocked(a *app) {
	r.rev++
	a.rev = r.rev
	for wake := range a.watchers {
		select {
		case wake <- struct{}{}:
		default: // already awake: it will read the newest state
		}
	}
}

// removeLocked ends s: removes its member if still there and closes Done.
// r.mu must be held.
func (r *Registry) removeLocked(s *session) {
	if s.ended {
		return
	}
	s.ended = true
	if s.stopExpiry != nil {
		s.stopExpiry()
	}
	delete(r.sessions, s)
	a := r.apps[s.m.App]
	if a.members[s.m.ID] == s {
		delete(a.members, s.m.ID)
		r.changedLocked(a)
	}
	close(s.done)
}

// snapshot returns the current snapshot of an app if it changed after
// revision after.
func (r *Registry) snapshot(name string, after int64) (membership.Snapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := r.app(name)
	if a.rev <= after {
		return membership.Snapshot{}, false
	}
	members := make([]membership.Member, 0, len(a.members))
	for _, s := range a.members {
		members = append(members, s.m.Clone())
	}
	return membership.NewSnapshot(name, a.rev, members), true
}

// session is a membership.Session of a Registry. Its fields other than r, m
// and done are guarded by r.mu.
type session struct {
	r    *Registry
	m    membership.Member
	done chan struct{}

	ended      bool
	crashed    bool
	stopExpiry func() bool
}

func (s *session) Done() <-chan struct{} { return s.done }

// Close implements membership.Session. It never fails.
func (s *session) Close(ctx context.Context) error {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	s.r.removeLocked(s)
	return nil
}
