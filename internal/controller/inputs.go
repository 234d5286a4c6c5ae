package controller

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/predict"
)

// Input objects' media features (OFC §5.1.2, ADR 0024): a cachelet reads
// an object's width and height, or duration, from its first bytes as it
// is written (package media), and its write event carries them here
// (EventOrigin.Media). The controller remembers them per application,
// object and version (ETag), at most maxInputMedia of them, and gives
// them to that application's invocations whose event names the object,
// as the features mediaNames, when the version the invocation reads is
// the one they were read from: the version an S3 event names, or the
// one the input's size was looked up for (the write's own event, or a
// HEAD, remembered inputSizeTTL). No byte of the object is read for
// them. An application's cachelets speak for its own invocations only:
// another application reading the object gets no features from them.

// maxInputMedia bounds the media features remembered; the oldest go
// first.
const maxInputMedia = 4096

// The media features' names.
const (
	featFormat    = "input.format"     // categorical: png, jpeg, mp4, wav, ...
	featWidth     = "input.width"      // pixels
	featHeight    = "input.height"     // pixels
	featPixels    = "input.pixels"     // width × height
	featDurationS = "input.duration_s" // seconds
)

var mediaNames = []string{featFormat, featWidth, featHeight, featPixels, featDurationS}

type mediaSeen struct {
	etag string
	f    media.Features
}

// rememberMedia keeps an object version's media features for application
// app, as its cachelet read them when it was written.
func (c *Controller) rememberMedia(app, bucket, key, etag string, f media.Features) {
	if etag == "" || f.Validate() != nil {
		return
	}
	id := app + "\x00" + bucket + "/" + key
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	c.models.media.put(id, mediaSeen{etag: etag, f: f}, maxInputMedia)
}

// rememberWrite takes what an application's cachelet said of an object
// version it wrote: its size (as if looked up now; -1 when the event did
// not say it) and its media features (m nil for none), for the
// application's invocations that read it. An object in a bucket the
// application may not read is not remembered.
func (c *Controller) rememberWrite(app, bucket, key, etag string, size int64, m *media.Features) {
	a, err := c.app(app)
	if err != nil || etag == "" {
		return
	}
	c.mu.Lock()
	granted := a.spec.Buckets.Set().Allows(bucket, false)
	c.mu.Unlock()
	if !granted {
		return
	}
	if size >= 0 {
		c.rememberSize(app, bucket, key, sizeSeen{size: size, etag: etag, at: c.clk.Now()})
	}
	if m != nil {
		c.rememberMedia(app, bucket, key, etag, *m)
	} else {
		c.forgetMedia(app, bucket, key, etag)
	}
}

// forgetMedia says bucket/key's version etag has no media features for
// app, if some were remembered for another version.
func (c *Controller) forgetMedia(app, bucket, key, etag string) {
	id := app + "\x00" + bucket + "/" + key
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	if _, ok := c.models.media.get(id); ok {
		c.models.media.put(id, mediaSeen{etag: etag}, maxInputMedia) // keeps its place
	}
}

// inputMedia is the media features of bucket/key's version etag that
// application app's cachelets read when they wrote it (no I/O).
func (c *Controller) inputMedia(app, bucket, key, etag string) (media.Features, bool) {
	if etag == "" {
		return media.Features{}, false
	}
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	m, ok := c.models.media.get(app + "\x00" + bucket + "/" + key)
	if !ok || m.etag != etag || m.f.IsZero() {
		return media.Features{}, false
	}
	return m.f, true
}

// inputFeatures adds to fs what is known of the invocation's input
// bucket/key for application a: its size ("input.size", unless the event
// gave it) and its media features (mediaNames), for the version etag
// (the event's; "" when it names none: then the version whose size is
// known). Without a size remembered it asks the store (inputSize) only
// when lookup is set. It returns the media features added, nil for none.
// Features past predict.MaxFeatures are left out.
func (c *Controller) inputFeatures(ctx context.Context, a *app, fs predict.Features, bucket, key, etag string, lookup bool) (predict.Features, *media.Features) {
	c.mu.Lock()
	granted := a.spec.Buckets.Set().Allows(bucket, false)
	c.mu.Unlock()
	if !granted {
		return fs, nil
	}
	if hasSize := hasFeature(fs, "input.size"); !hasSize || etag == "" {
		s, ok := c.cachedInputSize(a, bucket, key)
		if !ok && lookup {
			s, ok = c.inputSize(ctx, a, bucket, key)
		}
		if ok && !hasSize && len(fs) < predict.MaxFeatures {
			fs = append(fs, predict.Num("input.size", float64(s.size)))
		}
		if etag == "" {
			etag = s.etag
		}
	}
	if hasFeature(fs, featFormat) {
		return fs, nil
	}
	m, ok := c.inputMedia(a.rec.Name, bucket, key, etag)
	if !ok {
		return fs, nil
	}
	return AppendMedia(fs, m), &m
}

// AppendMedia adds an object's media features to fs as the controller
// names them (mediaNames), those it has (an image has no duration, a
// sound no size), within predict.MaxFeatures.
func AppendMedia(fs predict.Features, m media.Features) predict.Features {
	add := func(f predict.Feature) {
		if len(fs) < predict.MaxFeatures && !hasFeature(fs, f.Name) { // an event's own argument of that name stays
			fs = append(fs, f)
		}
	}
	add(predict.Cat(featFormat, m.Format))
	if m.Width > 0 {
		add(predict.Num(featWidth, float64(m.Width)))
		add(predict.Num(featHeight, float64(m.Height)))
		add(predict.Num(featPixels, float64(m.Pixels())))
	}
	if m.DurationS > 0 {
		add(predict.Num(featDurationS, m.DurationS))
	}
	return fs
}

// needsInput says whether the function's mature model splits on the
// input's size or media features, so that a prediction without them
// would be a doubt.
func (fm *fnModel) needsInput() bool {
	if fm.needs("input.size") {
		return true
	}
	for _, n := range mediaNames {
		if fm.needs(n) {
			return true
		}
	}
	return false
}

// inputETag is the version an S3 event's first record names ("" for
// none, or another event).
func inputETag(event json.RawMessage) string {
	if len(event) > maxEventFeatureBytes {
		return ""
	}
	var ev struct {
		Records []struct {
			S3 struct {
				Object struct {
					ETag string `json:"eTag"`
				} `json:"object"`
			} `json:"s3"`
		} `json:"Records"`
	}
	if json.Unmarshal(event, &ev) != nil || len(ev.Records) == 0 {
		return ""
	}
	return strings.Trim(ev.Records[0].S3.Object.ETag, `"`)
}
