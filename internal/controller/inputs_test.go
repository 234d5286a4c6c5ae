package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/clock"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/store"
)

// cacheletEvent is a cachelet's write event for data/key at etag.
func cacheletEvent(app, key, etag string, size int64, m *media.Features) *S3Event {
	rec := fmt.Sprintf(`{"eventSource": "hoard:cachelet", "eventName": "ObjectCreated:Put",
		"s3": {"bucket": {"name": "data"}, "object": {"key": %q, "size": %d, "eTag": %q}}}`, key, size, etag)
	return &S3Event{Records: []json.RawMessage{json.RawMessage(rec)}, Hoard: &EventOrigin{App: app, Cachelet: app + "-1", Media: m}}
}

func featureMap(fs predict.Features) map[string]predict.Feature {
	out := map[string]predict.Feature{}
	for _, f := range fs {
		out[f.Name] = f
	}
	return out
}

// TestInputMedia: the media features a cachelet's write event carries
// reach the writing application's invocations that read that version,
// with the size, and no other version's, nor another application's.
func TestInputMedia(t *testing.T) {
	clk := clock.NewFake(time.Unix(1e9, 0))
	c, _, _ := setupWith(t, Config{Clock: clk, InputSizeTimeout: 10 * time.Second})
	ctx := context.Background()
	for _, spec := range []string{
		"name: app\nmax_instances: 1\nkeep_alive: 1h\nbuckets: {data: read-write}\nfunctions: {f: {handler: m.h}}\n",
		"name: other\nmax_instances: 1\nkeep_alive: 1h\nbuckets: {data: read-write}\nfunctions: {f: {handler: m.h}}\n",
	} {
		if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
			t.Fatal(err)
		}
	}
	img := media.Features{Format: "png", Width: 640, Height: 480}
	if _, err := c.HandleEventAs(cacheletEvent("app", "img.png", "e1", 5000, &img), "app"); err != nil {
		t.Fatal(err)
	}
	a, _ := c.app("app")
	gather := func(a *app, event string) (map[string]predict.Feature, *media.Features) {
		t.Helper()
		ev := json.RawMessage(event)
		b, k, _ := inputObject(ev)
		fs, m := c.inputFeatures(ctx, a, features(ev), b, k, inputETag(ev), true)
		if _, err := predict.Normalize(fs); err != nil {
			t.Fatal(err)
		}
		return featureMap(fs), m
	}
	got, m := gather(a, `{"bucket": "data", "key": "img.png"}`)
	want := map[string]predict.Feature{
		"input.size": predict.Num("input.size", 5000), featFormat: predict.Cat(featFormat, "png"),
		featWidth: predict.Num(featWidth, 640), featHeight: predict.Num(featHeight, 480), featPixels: predict.Num(featPixels, 640*480),
	}
	for name, f := range want {
		if got[name] != f {
			t.Errorf("%s: %+v, want %+v", name, got[name], f)
		}
	}
	if _, ok := got[featDurationS]; ok || m == nil || *m != img {
		t.Errorf("features %v, media %+v", got, m)
	}
	// An S3 event naming that version, or another.
	s3ev := `{"Records": [{"s3": {"bucket": {"name": "data"}, "object": {"key": "img.png", "size": 5000, "eTag": "\"%s\""}}}]}`
	if got, _ := gather(a, fmt.Sprintf(s3ev, "e1")); got[featPixels].Num != 640*480 {
		t.Errorf("an S3 event of the version: %v", got)
	}
	if got, m := gather(a, fmt.Sprintf(s3ev, "e2")); m != nil || got[featFormat].Name != "" {
		t.Errorf("an S3 event of another version: %v", got)
	}
	// Another application reading it gets the size from the store, not
	// the writer's word on its media.
	if err := c.cfg.Store.CreateBucket(ctx, "data", ""); err != nil {
		t.Fatal(err)
	}
	_, err := c.cfg.Store.Put(ctx, "data", "img.png", bytes.NewReader(make([]byte, 700)), 700, store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := c.app("other")
	if got, m := gather(o, `{"bucket": "data", "key": "img.png"}`); m != nil || got["input.size"].Num != 700 {
		t.Errorf("another application: %v %+v", got, m)
	}
	// Past inputSizeTTL the store says the version now there: not the
	// one written with the features (it was replaced behind the
	// cachelet).
	clk.Advance(inputSizeTTL + time.Second)
	if got, m := gather(a, `{"bucket": "data", "key": "img.png"}`); m != nil || got["input.size"].Num != 700 {
		t.Errorf("a version written behind the cachelet: %v %+v", got, m)
	}
	// Past inputSizeTTL, the store's HEAD confirms the version the
	// features were read from: they stay.
	put, err := c.cfg.Store.Put(ctx, "data", "kept.png", bytes.NewReader(make([]byte, 900)), 900, store.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.HandleEventAs(cacheletEvent("app", "kept.png", put.ETag, 900, &img), "app"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(inputSizeTTL + time.Second)
	if got, m := gather(a, `{"bucket": "data", "key": "kept.png"}`); m == nil || got["input.size"].Num != 900 || got[featWidth].Num != 640 {
		t.Errorf("the version the store still holds: %v %+v", got, m)
	}
	// Without a lookup (a model that does not need the input), nothing
	// past inputSizeTTL: the version is not known.
	clk.Advance(inputSizeTTL + time.Second)
	ev := json.RawMessage(`{"bucket": "data", "key": "kept.png"}`)
	if fs, m := c.inputFeatures(ctx, a, features(ev), "data", "kept.png", "", false); m != nil || hasFeature(fs, "input.size") {
		t.Errorf("without a lookup: %v %+v", fs, m)
	}

	// A video written through the cachelet, then the same key rewritten
	// with no media: nothing.
	vid := media.Features{Format: "mp4", Width: 1280, Height: 720, DurationS: 12.5}
	if _, err := c.HandleEventAs(cacheletEvent("app", "v.mp4", "v1", 9000, &vid), "app"); err != nil {
		t.Fatal(err)
	}
	if got, _ := gather(a, `{"bucket": "data", "key": "v.mp4"}`); got[featDurationS].Num != 12.5 || got[featPixels].Num != 1280*720 {
		t.Errorf("video: %v", got)
	}
	if _, err := c.HandleEventAs(cacheletEvent("app", "v.mp4", "v2", 10, nil), "app"); err != nil {
		t.Fatal(err)
	}
	if got, m := gather(a, `{"bucket": "data", "key": "v.mp4"}`); m != nil || got["input.size"].Num != 10 {
		t.Errorf("rewritten with no media: %v %+v", got, m)
	}
	// A copy's event (its size may be unknown, sent as 0) does not say
	// the size; it does say the version, which has no features.
	if _, err := c.HandleEventAs(cacheletEvent("app", "img2.png", "i1", 5000, &img), "app"); err != nil {
		t.Fatal(err)
	}
	cp := cacheletEvent("app", "img2.png", "c1", 0, nil)
	cp.Records[0] = json.RawMessage(strings.Replace(string(cp.Records[0]), "ObjectCreated:Put", "ObjectCreated:Copy", 1))
	if _, err := c.HandleEventAs(cp, "app"); err != nil {
		t.Fatal(err)
	}
	if got, m := gather(a, fmt.Sprintf(s3ev, "c1")); m != nil || got["input.size"].Num != 5000 {
		t.Errorf("a copy: %v %+v", got, m)
	}
	if s, ok := c.cachedInputSize(a, "data", "img2.png"); !ok || s.size != 5000 || s.etag != "i1" {
		t.Errorf("a copy's event changed the size remembered: %+v %v", s, ok)
	}

	// Features that are not believable are not taken.
	bad := media.Features{Format: "png", Width: -1, Height: 5}
	if _, err := c.HandleEventAs(cacheletEvent("app", "bad.png", "b1", 10, &bad), "app"); err != nil {
		t.Fatal(err)
	}
	if _, m := gather(a, `{"bucket": "data", "key": "bad.png"}`); m != nil {
		t.Errorf("invalid features taken: %+v", m)
	}

	// An invocation's record says what its prediction had.
	if _, err := c.HandleEventAs(cacheletEvent("app", "img2.png", "i2", 5000, &img), "app"); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(`{"bucket": "data", "key": "img2.png"}`), "test")
	if err != nil || rec.InputMedia == nil || *rec.InputMedia != img {
		t.Fatalf("invocation %+v %v", rec, err)
	}
}

func TestAppendMediaBounded(t *testing.T) {
	var fs predict.Features
	for i := range predict.MaxFeatures - 2 {
		fs = append(fs, predict.Num(fmt.Sprint("a", i), 1))
	}
	fs = AppendMedia(fs, media.Features{Format: "mp4", Width: 2, Height: 2, DurationS: 3})
	if len(fs) != predict.MaxFeatures || fs[len(fs)-2].Name != featFormat || fs[len(fs)-1].Name != featWidth {
		t.Errorf("features %v", fs)
	}
	// An event's argument of the same name is not doubled.
	fs = AppendMedia(predict.Features{predict.Num(featWidth, 7)}, media.Features{Format: "png", Width: 2, Height: 2})
	if _, err := predict.Normalize(fs); err != nil || len(fs) != 4 || fs[0].Num != 7 {
		t.Errorf("features %v: %v", fs, err)
	}
}
