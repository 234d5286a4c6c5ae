// Package sim replays traces of invocations and object accesses through
// hoard's own policy code, with a simulated clock: the cache's admission
// and eviction (package cache, holding entries that charge their size but
// keep no bytes), the consistent-hash ring that places objects on an
// application's instances (package ring), and the hybrid-histogram
// keep-alive (package keepalive), pre-warm selection (package prewarm),
// the scaling policies (package scaling), memory prediction (package
// predict) and erasure-coded placement (package erasure). It starts no
// process, opens no socket and reads no file: events come from a Source,
// and a Report comes out.
//
// One pass over the events feeds every configuration under study at once:
// each (eviction policy, cache size) pair gets its own caches, each
// keep-alive policy its own application states, so a trace is read once
// however many configurations are compared.
//
// The model, where hoard's behaviour is more than its policies:
//
//   - Each application has Instances instances, each with a cache of the
//     configured size; an object's owner is its ring owner among them. An
//     access is served by the instance its invocation hashes to (accesses
//     without an invocation take the instances in turn).
//   - A read is a local hit (LH) when the reading instance holds the
//     object's version, a remote hit (RH) when its owner does, else a miss
//     fetched from the store: local (LM) when the reader is the owner,
//     remote (RM) otherwise. A miss fills the owner's cache and the
//     reader's (a copy it does not own), each if the cache admits it; an
//     object the cache does not admit (larger than its MaxObjectSize) is a
//     pass-through read (PT), counted as a miss. A ranged read transfers
//     its range; its miss fetches the whole object.
//   - A write goes to the store and replaces the object in its owner's
//     cache; other instances drop their copies.
//   - An invocation keeps its application's instance busy for its
//     duration; after the last one ends, the keep-alive policy decides
//     when the instance is unloaded (and, for the histogram, reloaded
//     ahead of the next one). An invocation that finds it unloaded is a
//     cold start; loaded time with nothing running is wasted memory-time.
//   - With Config.Lifecycle a cache lives as long as its instance, and with
//     Config.PreWarm a reloaded instance's cache is filled with prewarm's
//     selection from the access records of its earlier lives.
//   - With Config.Predict each invocation with a measured peak is sized
//     by its function's memory model (package predict, trained and
//     asked as the controller does); a peak above the limit borrows from
//     the application's slack pool or, when that is short, is killed and
//     run again at the booked size, as the agent does.
//   - With Config.Erasure objects from its threshold up are placed as
//     k+r shards on the application's ring (package erasure's Place), and
//     instances depart at a given rate; each departed holder's shards are
//     rebuilt after the lease and the rebuild delay at the rebuild rate,
//     and an object is lost when more than r of its shards are missing at
//     once, to compare with erasure.LossProbability.
//   - With Config.VoteInterval invocations run on the instances
//     (Config.Concurrency each, queued when none is free) and every round
//     the compute (scaling.ComputeVote) and cache-size (scaling.CacheVote)
//     policies vote as the controller's; a miss of a large object is
//     planned by the bandwidth policy (scaling.PlanBandwidth). With
//     Config.Scale the votes go through scaling.Combine, and instances
//     (with their caches and ring shares) are added or removed.
package sim

import (
	"errors"
	"io"
	"time"

	"github.com/hoard-io/hoard/internal/predict"
)

// Kind is what an Event records.
type Kind uint8

// The kinds of Event.
const (
	// Read is a GET of an object (or of a byte range of it).
	Read Kind = iota + 1
	// Write is a PUT of a whole object.
	Write
	// Invoke is the start of one invocation of an application.
	Invoke
)

func (k Kind) String() string {
	switch k {
	case Read:
		return "read"
	case Write:
		return "write"
	case Invoke:
		return "invoke"
	}
	return "unknown"
}

// Event is one step of a trace.
type Event struct {
	Time time.Time
	Kind Kind
	// App is the application that reads, writes or is invoked.
	App string
	// Invocation identifies the invocation that made an access (0:
	// unknown); it picks the instance that serves it.
	Invocation uint64

	// Of a Read or Write: the object, its size (the whole object's, for
	// a ranged read) and its version (empty: the version does not
	// change). Length > 0 makes a Read a ranged read of [Offset,
	// Offset+Length).
	Bucket, Key    string
	Size           int64
	Version        string
	Offset, Length int64

	// Of an Invoke: the function invoked ("": the application's only
	// one, as far as the trace tells), how long it runs and the memory
	// its instance holds.
	Function string
	Duration time.Duration
	MemoryMB int
	// Of an Invoke, for memory prediction (Config.Predict): the peak
	// memory it used, in bytes (0: unknown, not replayed), and the
	// features the controller would see (the event's arguments, the
	// input object's size as "input.size").
	Peak     int64
	Features predict.Features
}

// Source yields a trace's events in time order. Next returns io.EOF after
// the last one; any other error stops the replay.
type Source interface {
	Next() (Event, error)
}

// ErrOutOfOrder is returned when an event is earlier than the one before.
var ErrOutOfOrder = errors.New("sim: events out of time order")

// SliceSource is a Source over events held in memory, for tests and
// small traces.
type SliceSource struct {
	Events []Event
	i      int
}

// Next implements Source.
func (s *SliceSource) Next() (Event, error) {
	if s.i >= len(s.Events) {
		return Event{}, io.EOF
	}
	s.i++
	return s.Events[s.i-1], nil
}
