package controller

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/ring"
)

func TestInputObject(t *testing.T) {
	for ev, want := range map[string]string{
		`{"bucket": "b", "key": "k/1"}`: "b/k/1",
		`{"Records": [{"s3": {"bucket": {"name": "in"}, "object": {"key": "a.jpg"}}}]}`: "in/a.jpg",
		`{"bucket": "b"}`:            "",
		`{"bucket": 1, "key": 2}`:    "",
		`[1]`:                        "",
		`{"key": "k", "bucket": ""}`: "",
	} {
		b, k, ok := inputObject(json.RawMessage(ev))
		if got := b + "/" + k; ok != (want != "") || ok && got != want {
			t.Errorf("%s: %q %v, want %q", ev, got, ok, want)
		}
	}
}

// TestIdleForInput: the idle owner of the input first, then an idle
// instance on the owner's node, then the most recently used.
func TestIdleForInput(t *testing.T) {
	now := time.Now()
	a := &app{instances: map[string]*inst{}}
	a.rec.Package.SHA256 = "v1"
	for i, agent := range []string{"n1", "n1", "n2"} {
		id := fmt.Sprintf("i%d", i)
		a.instances[id] = &inst{id: id, agentID: agent, rev: "v1", lastUsed: now.Add(time.Duration(i) * time.Second)}
	}
	r, _ := ring.New(ring.Config{}, []string{"i0", "i1", "i2"})
	// A key owned by i0 (on n1, not the most recently used).
	var key string
	for n := 0; ; n++ {
		key = fmt.Sprintf("k%d", n)
		if r.Owner("b", key) == "i0" {
			break
		}
	}
	in, route, why := a.idleForInput("b", key)
	if in.id != "i0" || route != routeOwner || why == "" {
		t.Fatalf("owner idle: %s %s %q", in.id, route, why)
	}
	a.instances["i0"].busy = true
	if in, route, _ = a.idleForInput("b", key); in.id != "i1" || route != routeOwnerNode {
		t.Fatalf("owner busy: %s %s", in.id, route)
	}
	a.instances["i1"].busy = true
	if in, route, _ = a.idleForInput("b", key); in.id != "i2" || route != routeWarm {
		t.Fatalf("owner's node busy: %s %s", in.id, route)
	}
	a.instances["i0"].busy, a.instances["i1"].busy = false, false
	if in, route, why = a.idleForInput("", ""); in.id != "i2" || route != routeWarm || why != "" {
		t.Fatalf("no input: %s %s %q", in.id, route, why)
	}
	// An instance of an older version is no owner.
	a.instances["i0"].rev = "v0"
	if in, _, _ = a.idleForInput("b", key); in.id == "i0" {
		t.Fatal("routed to an instance of an older version")
	}
}

// TestIdleForInputLastReader: the idle instance that read the input last
// comes before its owner (it holds the whole object when the read was
// split over the ring, or made before the ring changed); busy, or gone,
// the owner comes next. The memory of readers is bounded.
func TestIdleForInputLastReader(t *testing.T) {
	now := time.Now()
	a := &app{instances: map[string]*inst{}}
	a.rec.Package.SHA256 = "v1"
	for i := range 3 {
		id := fmt.Sprintf("i%d", i)
		a.instances[id] = &inst{id: id, agentID: "n1", rev: "v1", lastUsed: now.Add(time.Duration(i) * time.Second)}
	}
	r, _ := ring.New(ring.Config{}, []string{"i0", "i1", "i2"})
	var key string
	for n := 0; ; n++ {
		key = fmt.Sprintf("k%d", n)
		if r.Owner("b", key) == "i0" {
			break
		}
	}
	a.readers.set("b", key, "i1")
	if in, route, why := a.idleForInput("b", key); in.id != "i1" || route != routeReader || why == "" {
		t.Fatalf("last reader idle: %s %s %q", in.id, route, why)
	}
	a.instances["i1"].busy = true
	if in, route, _ := a.idleForInput("b", key); in.id != "i0" || route != routeOwner {
		t.Fatalf("last reader busy: %s %s", in.id, route)
	}
	a.instances["i1"].busy = false
	delete(a.instances, "i1")
	if in, route, _ := a.idleForInput("b", key); in.id != "i0" || route != routeOwner {
		t.Fatalf("last reader gone: %s %s", in.id, route)
	}
	for n := range 3 * maxReaders {
		a.readers.set("b", fmt.Sprint("x", n), "i2")
	}
	if len(a.readers.by) > maxReaders || len(a.readers.order) > 2*maxReaders || a.readers.get("b", key) != "" {
		t.Fatalf("readers: %d remembered, %d in order, oldest kept: %q", len(a.readers.by), len(a.readers.order), a.readers.get("b", key))
	}
}
