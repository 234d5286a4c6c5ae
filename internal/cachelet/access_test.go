package cachelet

import (
	"context"
	"testing"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/media/mediatest"
)

func TestAccessMetadata(t *testing.T) {
	e := newEnv(t, nil)
	model := object("model", 1, 5000)
	e.storePut("model", model)
	e.mustRead("model", model, LocalMiss)
	e.settle()
	e.mustRead("model", model, LocalHit)
	e.mustRead("model", model, LocalHit)
	out := object("out", 1, 300)
	e.cput("out", out)

	got := map[string]struct{ lh, lm, out, size int64 }{}
	for _, o := range e.c.AccessMetadata() {
		got[o.Key] = struct{ lh, lm, out, size int64 }{o.LH, o.LM, o.Out, o.Size}
		if o.Key == "model" && (o.ETag == "" || o.Last.IsZero()) {
			t.Errorf("model: %+v", o)
		}
	}
	if m := got["model"]; m.lh != 2 || m.lm != 1 || m.size != 5000 {
		t.Errorf("model recorded as %+v; want 2 local hits, 1 local miss, 5000 bytes", m)
	}
	if o := got["out"]; o.out != 1 || o.size != 300 {
		t.Errorf("out recorded as %+v; want one output of 300 bytes", o)
	}
}

func TestPrewarm(t *testing.T) {
	e := newEnv(t, nil)
	a, b := object("a", 1, 4000), object("b", 1, 7000)
	e.storePut("a", a)
	e.storePut("b", b)
	e.mustRead("b", b, LocalMiss)
	e.settle()
	before := e.st.GetCounts()

	res, err := e.c.Prewarm(context.Background(), []cache.Key{{Bucket: testBucket, Object: "a"}, {Bucket: testBucket, Object: "b"}, {Bucket: testBucket, Object: "missing"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Owned != 3 || res.Fetched != 1 || res.Cached != 1 || res.Failed != 1 || res.Bytes != 4000 {
		t.Errorf("Prewarm = %+v; want a fetched, b already cached, missing failed", res)
	}
	if got := e.st.GetCounts(); got.Total-before.Total != 2 { // a and the missing key
		t.Errorf("store GETs during pre-warm: %d; want 2", got.Total-before.Total)
	}
	// Pre-warm fetches are not reads; the first read is a local hit,
	// counted once as a pre-warm hit.
	if n := e.reads(LocalMiss); n != 1 {
		t.Errorf("local misses %v after pre-warm; want only b's", n)
	}
	e.mustRead("a", a, LocalHit)
	e.mustRead("a", a, LocalHit)
	if n := toFloat64(e.c.m.prewarmHits); n != 1 {
		t.Errorf("pre-warm hits %v; want 1", n)
	}
	// A canceled pre-warm stops.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.c.Prewarm(ctx, []cache.Key{{Bucket: testBucket, Object: "a"}}); err == nil {
		t.Error("a canceled pre-warm reported no error")
	}
}

// TestWrittenMedia: a write through the cachelet, under every write
// target, keeps the media features of its first bytes with the version
// written; another version, written here or behind the cachelet, has
// none of them.
func TestWrittenMedia(t *testing.T) {
	png := mediatest.PNG(320, 200)
	mp4 := mediatest.MP4("isom", 1000, 4500, 640, 360, 100<<10)
	for _, target := range []WriteTarget{WriteStore, WriteOwner, WriteLocal} {
		t.Run(string(target), func(t *testing.T) {
			e := newEnv(t, func(cfg *Config) { cfg.WriteTarget = target })
			res := e.cput("img", png)
			if f, ok := e.c.Media(testBucket, "img", res.ETag); !ok || f != (media.Features{Format: "png", Width: 320, Height: 200}) {
				t.Errorf("png: %+v %v", f, ok)
			}
			if _, ok := e.c.Media(testBucket, "img", "other"); ok {
				t.Error("features for another ETag")
			}
			vres := e.cput("video", mp4)
			if f, ok := e.c.Media(testBucket, "video", vres.ETag); !ok || f.DurationS != 4.5 || f.Pixels() != 640*360 {
				t.Errorf("mp4: %+v %v", f, ok)
			}
			var found bool
			for _, o := range e.c.AccessMetadata() {
				if o.Key == "video" {
					found = o.Media != nil && o.Media.Format == "mp4" && o.ETag == vres.ETag
				}
			}
			if !found {
				t.Error("the access metadata has no media for the video")
			}
			// Rewritten with something else: no features.
			res = e.cput("img", object("img", 2, 1000))
			if f, ok := e.c.Media(testBucket, "img", res.ETag); ok {
				t.Errorf("features %+v of a rewrite that is no image", f)
			}
			// Rewritten behind the cachelet and read: the old version's
			// features go. The cachelet's queued writes (owner, local)
			// reach the store first, or the video written through it
			// would land after the outside write and be the newest.
			e.settle()
			if err := e.c.Drain(t.Context()); err != nil {
				t.Fatal(err)
			}
			other := e.storePut("video", object("video", 3, 2000))
			e.c.Invalidate(testBucket, "video")
			if _, _, err := e.read("video", nil); err != nil {
				t.Fatal(err)
			}
			for _, o := range e.c.AccessMetadata() {
				if o.Key == "video" && (o.Media != nil || o.ETag != other.ETag) {
					t.Errorf("after an outside write: %+v", o)
				}
			}
		})
	}
}
