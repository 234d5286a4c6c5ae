package controller

import (
	"encoding/json"
	"fmt"

	"github.com/hoard-io/hoard/internal/ring"
)

// Routing to the data (OFC §6.5): among the idle warm instances of an
// application, an invocation whose event names an input object goes to
// the instance whose cachelet owns that object on the application's ring
// (it holds it once read: every read of it through hoard is served or
// filled there), else to an idle instance on the same node as that
// cachelet (a local peer), else to the most recently used one. The reason
// is the invocation's Route and, when the data decided, one of the
// application's events.

// The routes, as Invocation.Route and the metric's reason.
const (
	routeReader    = "reader"     // the idle instance read the input last: its cachelet holds a copy
	routeOwner     = "owner"      // the idle instance owns the input
	routeOwnerNode = "owner-node" // an idle instance on the owner's node
	routeWarm      = "warm"       // the most recently used idle instance
	routeStarted   = "started"    // none idle: one started
	// routeStartedOwnerNode: none idle; one started on the node of the
	// cachelet that owns the input.
	routeStartedOwnerNode = "started-owner-node"
	routeQueued           = "queued" // none idle, none may start: the first to be released
)

// inputObject is the object an event names as its input: top-level
// "bucket" and "key" strings, or an S3 event's first record. ok is false
// when it names none.
func inputObject(event json.RawMessage) (bucket, key string, ok bool) {
	if len(event) > maxEventFeatureBytes {
		return "", "", false
	}
	var ev struct {
		Bucket  any `json:"bucket"`
		Key     any `json:"key"`
		Records []struct {
			S3 struct {
				Bucket struct {
					Name string `json:"name"`
				} `json:"bucket"`
				Object struct {
					Key string `json:"key"`
				} `json:"object"`
			} `json:"s3"`
		} `json:"Records"`
	}
	if json.Unmarshal(event, &ev) != nil {
		return "", "", false
	}
	b, bok := ev.Bucket.(string)
	k, kok := ev.Key.(string)
	if bok && kok && b != "" && k != "" {
		return b, k, true
	}
	if len(ev.Records) > 0 {
		r := ev.Records[0].S3
		if r.Bucket.Name != "" && r.Object.Key != "" {
			return r.Bucket.Name, r.Object.Key, true
		}
	}
	return "", "", false
}

// ownerNode is the agent of the instance whose cachelet owns bucket/key,
// and that instance; "" without an input or an owner. The caller holds
// c.mu.
func (a *app) ownerNode(bucket, key string) (agent, owner string) {
	if bucket == "" {
		return "", ""
	}
	ids := make([]string, 0, len(a.instances))
	byID := map[string]*inst{}
	for _, in := range a.instances {
		if in.rev == a.rec.Package.SHA256 && !in.orphan {
			ids = append(ids, in.id)
			byID[in.id] = in
		}
	}
	r, err := ring.New(ring.Config{}, ids)
	if err != nil || r.Len() == 0 {
		return "", ""
	}
	in := byID[r.Owner(bucket, key)]
	return in.agentID, in.id
}

// idleForInput picks an idle instance of the deployed version for an input
// (bucket, key; bucket "" for none) and says why; nil when none is idle.
// The caller holds c.mu.
func (a *app) idleForInput(bucket, key string) (*inst, string, string) {
	mru := a.idle()
	if mru == nil || bucket == "" {
		return mru, routeWarm, ""
	}
	ids := make([]string, 0, len(a.instances))
	byID := map[string]*inst{}
	for _, in := range a.instances {
		if in.rev == a.rec.Package.SHA256 && !in.orphan {
			ids = append(ids, in.id)
			byID[in.id] = in
		}
	}
	r, err := ring.New(ring.Config{}, ids)
	if err != nil || r.Len() < 2 {
		return mru, routeWarm, ""
	}
	// An event says so only where the data changed the choice.
	say := func(in *inst, format string, args ...any) string {
		if in == mru {
			return ""
		}
		return fmt.Sprintf(format, args...)
	}
	// The instance that read the input last holds a copy, whoever owns
	// it (a read split over the ring, or one before the ring changed,
	// leaves the whole object at the reader).
	if in := byID[a.readers.get(bucket, key)]; in != nil && !in.busy {
		return in, routeReader, say(in, "routed to %s, not %s: it read the input %s/%s last", in.id, mru.id, bucket, key)
	}
	owner := byID[r.Owner(bucket, key)]
	if owner == nil {
		return mru, routeWarm, ""
	}
	if !owner.busy {
		return owner, routeOwner, say(owner, "routed to %s, not %s: its cachelet owns the input %s/%s", owner.id, mru.id, bucket, key)
	}
	var best *inst
	for _, in := range a.instances {
		if !in.busy && in.rev == a.rec.Package.SHA256 && in.agentID == owner.agentID && (best == nil || in.lastUsed.After(best.lastUsed)) {
			best = in
		}
	}
	if best != nil {
		return best, routeOwnerNode, say(best, "routed to %s on node %s, where %s, busy, owns the input %s/%s", best.id, best.agentID, owner.id, bucket, key)
	}
	return mru, routeWarm, ""
}

// maxReaders bounds the inputs whose last reader an application
// remembers; the oldest are forgotten first.
const maxReaders = 4096

// lastReaders remembers which instance last read each input object, a
// bounded number of them. Guarded by the controller's mutex.
type lastReaders struct {
	by    map[string]string // bucket/key -> instance id
	order []string          // keys, oldest first (may repeat; by holds the truth)
}

func (l *lastReaders) get(bucket, key string) string { return l.by[bucket+"/"+key] }

func (l *lastReaders) set(bucket, key, id string) {
	if l.by == nil {
		l.by = map[string]string{}
	}
	k := bucket + "/" + key
	if _, ok := l.by[k]; !ok {
		l.order = append(l.order, k)
	}
	l.by[k] = id
	for len(l.by) > maxReaders && len(l.order) > 0 {
		delete(l.by, l.order[0])
		l.order = l.order[1:]
	}
	if len(l.order) > 2*maxReaders { // compact what deletes left behind
		l.order = append([]string(nil), l.order[len(l.order)-len(l.by):]...)
	}
}
