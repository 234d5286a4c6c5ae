// Package membership says which cachelets make up each application's ring.
//
// Every cachelet joins its application when it starts and leaves when it
// stops; every cachelet watches its application and rebuilds its consistent-
// hash ring from each snapshot it receives (DESIGN.md §1, Faa$T §3.1). The
// source of truth is one store with leases and revisioned watches — etcd in
// production (package membership/etcd), an in-process map in unit tests
// (package membership/memory) — so that all members of an application agree
// on one ordered history of membership, and a member that dies without
// leaving disappears once its lease runs out.
//
// Both backends pass the same conformance suite, membershiptest.Run.
package membership

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode"
)

// DefaultTTL is the lease time to live of a member: how long a member that
// stopped renewing its lease (crashed, frozen, partitioned) stays in the
// snapshot. Shorter moves keys away from a dead cachelet sooner; longer rides
// out GC pauses and slow networks. Faa$T's instances live minutes or more, so
// seconds of staleness cost little.
const DefaultTTL = 5 * time.Second

// MaxNameLen is the longest App or ID accepted, in bytes.
const MaxNameLen = 253

// Errors returned by Registry and Session methods. Backends wrap them with
// context; test with errors.Is.
var (
	// ErrDuplicateID is returned by Join when a member with the same App and
	// ID is live, including one that crashed and whose lease has not yet
	// expired.
	ErrDuplicateID = errors.New("membership: member id already live")
	// ErrClosed is returned by Join and Watch once the Registry is closed.
	ErrClosed = errors.New("membership: registry closed")
	// ErrInvalid is returned for a Member or app name that fails Validate.
	ErrInvalid = errors.New("membership: invalid name")
)

// Member is one cachelet of an application.
type Member struct {
	// ID names the member, unique among the live members of App.
	ID string `json:"id"`
	// App is the application whose ring the member belongs to.
	App string `json:"app"`
	// PeerAddr is the host:port of the cachelet's peer protocol.
	PeerAddr string `json:"peer_addr"`
	// S3Addr is the host:port of the cachelet's S3 front.
	S3Addr string `json:"s3_addr"`
	// Meta carries anything else peers should know (zone, capacity, ...).
	Meta map[string]string `json:"meta,omitempty"`
}

// Validate checks that m's App and ID are usable names (see ValidateName).
func (m Member) Validate() error {
	if err := ValidateName(m.App); err != nil {
		return fmt.Errorf("app: %w", err)
	}
	if err := ValidateName(m.ID); err != nil {
		return fmt.Errorf("id: %w", err)
	}
	return nil
}

// Clone returns a copy of m that shares no memory with it.
func (m Member) Clone() Member {
	m.Meta = maps.Clone(m.Meta)
	return m
}

// ValidateName checks an App or ID: non-empty, at most MaxNameLen bytes, no
// '/' (names become etcd key segments, and a '/' would let one app's prefix
// cover another's) and no control or space characters. The error wraps
// ErrInvalid.
func ValidateName(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", ErrInvalid)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxNameLen)
	}
	for _, r := range s {
		if r == '/' || unicode.IsControl(r) || unicode.IsSpace(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q has a forbidden character %q", ErrInvalid, s, r)
		}
	}
	return nil
}

// Snapshot is the full membership of one application at one revision.
type Snapshot struct {
	App string
	// Revision orders snapshots of the same registry: a later state has a
	// larger revision. Revisions are not consecutive; with etcd they are the
	// store revision of the last change included.
	Revision int64
	// Members are sorted by ID.
	Members []Member
}

// NewSnapshot returns a Snapshot of members sorted by ID. It takes ownership
// of the slice.
func NewSnapshot(app string, rev int64, members []Member) Snapshot {
	slices.SortFunc(members, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
	return Snapshot{App: app, Revision: rev, Members: members}
}

// IDs returns the IDs of s's members, in order.
func (s Snapshot) IDs() []string {
	ids := make([]string, len(s.Members))
	for i, m := range s.Members {
		ids[i] = m.ID
	}
	return ids
}

// Registry records which members are live in each application.
//
// All methods are safe for concurrent use.
type Registry interface {
	// Join registers m as a live member of m.App under a lease and keeps the
	// lease alive until the returned Session is closed or lost. Join returns
	// once m is visible to watchers. Errors: ErrInvalid, ErrDuplicateID,
	// ErrClosed, ctx's error, or the backend's error (e.g. etcd unreachable).
	// A process that dies without closing its Session stays a member until
	// the lease's TTL runs out, and its ID cannot be reused until then.
	Join(ctx context.Context, m Member) (Session, error)

	// Watch returns a channel that delivers app's current Snapshot at once
	// (empty Members when nobody has joined), then a new full Snapshot after
	// every change: join, leave, expiry. Revisions strictly increase. When
	// the receiver is slower than the changes, intermediate snapshots are
	// skipped but never the latest: once changes stop, the last snapshot
	// received is the current state. Each Snapshot is the receiver's to keep
	// and modify. The channel is closed when ctx ends or the Registry is
	// closed; a backend error while watching (a lost connection) is retried
	// inside, not reported, and the channel stays open meanwhile. Errors,
	// at call time only: ErrInvalid, ErrClosed, ctx's error, or the
	// backend's error for the first read of the app.
	Watch(ctx context.Context, app string) (<-chan Snapshot, error)
}

// Session is one member's stay in its application. Its methods are safe for
// concurrent use.
type Session interface {
	// Done is closed when the session ends: its lease was lost (expired
	// because the store was unreachable for longer than the TTL, or revoked
	// from outside), Close was called, or the Registry was closed. A
	// cachelet whose session is done must stop acting as the owner of any
	// key: the other members have already taken its keys over.
	Done() <-chan struct{}

	// Close leaves the application: the member is removed at once rather
	// than after the TTL, and Done is closed. Close is idempotent: later or
	// concurrent calls wait for the first and return its result. A lease
	// that is already lost is not an error. On an error (ctx ended, store
	// unreachable) the member still disappears when its lease expires.
	Close(ctx context.Context) error
}
