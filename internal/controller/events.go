package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/media"
)

// S3Event is an S3 event notification, as AWS, MinIO and hoard's
// cachelets send them.
type S3Event struct {
	Records []json.RawMessage `json:"Records"`
	// Hoard names the application and cachelet that sent it (cachelets'
	// events only).
	Hoard *EventOrigin `json:"hoard,omitempty"`
}

// EventOrigin is the sender of a cachelet's event, and the media
// features it read of the object written (its event has one record).
type EventOrigin struct {
	App      string          `json:"app"`
	Cachelet string          `json:"cachelet"`
	Media    *media.Features `json:"media,omitempty"`
}

type s3Record struct {
	EventSource string `json:"eventSource"`
	EventName   string `json:"eventName"`
	EventTime   string `json:"eventTime"`
	S3          struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key  string `json:"key"`
			Size int64  `json:"size"`
			ETag string `json:"eTag"`
		} `json:"object"`
	} `json:"s3"`
}

// HandleEvent fires the object triggers matching each object-created
// record of an event, once per (bucket, key, ETag) within the dedup
// window, whichever source reports it first. It returns how many
// triggers fired; they run in the background.
func (c *Controller) HandleEvent(ev *S3Event) (int, error) {
	return c.handleEvent(ev, "")
}

// HandleEventAs is HandleEvent for an event posted with app's token. It
// is refused whole (ErrForbidden, nothing fires, nothing is marked seen)
// when it names another application, or when one of its records names a
// bucket app's spec does not and some trigger watches: an application
// may fire the triggers of its own buckets only, and cannot mark another
// application's objects as already notified.
func (c *Controller) HandleEventAs(ev *S3Event, app string) (int, error) {
	if app == "" {
		return 0, fmt.Errorf("%w: no application", ErrForbidden)
	}
	return c.handleEvent(ev, app)
}

func (c *Controller) handleEvent(ev *S3Event, scope string) (int, error) {
	if scope != "" {
		if err := c.eventInScope(ev, scope); err != nil {
			return 0, err
		}
	}
	fired := 0
	for _, raw := range ev.Records {
		var r s3Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return fired, fmt.Errorf("bad event record: %w", err)
		}
		if !strings.HasPrefix(r.EventName, "ObjectCreated:") && !strings.HasPrefix(r.EventName, "s3:ObjectCreated:") {
			continue
		}
		key, err := url.QueryUnescape(r.S3.Object.Key)
		if err != nil {
			return fired, fmt.Errorf("bad object key %q in event: %w", r.S3.Object.Key, err)
		}
		bucket := r.S3.Bucket.Name
		if strings.HasPrefix(key, changeProbePrefix) {
			continue // the relay's and cachelets' probes fire nothing
		}
		etag := strings.Trim(r.S3.Object.ETag, `"`)
		source := "store"
		if strings.HasPrefix(r.EventSource, "hoard") {
			source = "cachelet"
		}
		if scope != "" && ev.Hoard != nil {
			// A copy's or a completed upload's event may carry size 0 for
			// "unknown" (s3api.notifyUnsized): only a PUT's says it.
			size := int64(-1)
			if strings.HasSuffix(r.EventName, "ObjectCreated:Put") {
				size = r.S3.Object.Size
			}
			c.rememberWrite(scope, bucket, key, etag, size, ev.Hoard.Media)
		}
		if !c.firstSighting(bucket, key, etag) {
			continue
		}
		type target struct {
			app string
			t   *appspec.Trigger
		}
		var targets []target
		c.mu.Lock()
		for name, a := range c.apps {
			for _, t := range a.spec.Triggers {
				if t.Object != nil && t.Object.Match(bucket, key) {
					targets = append(targets, target{name, t})
				}
			}
		}
		c.mu.Unlock()
		event, _ := json.Marshal(S3Event{Records: []json.RawMessage{raw}})
		for _, tg := range targets {
			fired++
			c.m.triggers.WithLabelValues(tg.app, "object", source).Inc()
			c.log.Info("object trigger", "app", tg.app, "bucket", bucket, "key", key, "source", source,
				"function", tg.t.Function, "pipeline", tg.t.Pipeline)
			go c.fire(tg.app, tg.t, event, "object")
		}
	}
	return fired, nil
}

// eventInScope checks an event posted with app's token (HandleEventAs).
func (c *Controller) eventInScope(ev *S3Event, app string) error {
	if ev.Hoard != nil && ev.Hoard.App != app {
		return fmt.Errorf("%w: the event names application %q, the token is %q's", ErrForbidden, ev.Hoard.App, app)
	}
	a, err := c.app(app)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	own := appBuckets(a.spec)
	for _, raw := range ev.Records {
		var r s3Record
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("bad event record: %w", err)
		}
		b := r.S3.Bucket.Name
		if own[b] {
			continue
		}
		for name, other := range c.apps {
			for _, t := range other.spec.Triggers {
				if t.Object != nil && t.Object.Bucket == b {
					return fmt.Errorf("%w: bucket %q is not application %q's (application %q watches it)", ErrForbidden, b, app, name)
				}
			}
		}
	}
	return nil
}

// fire runs a trigger's target in the background.
func (c *Controller) fire(app string, t *appspec.Trigger, event json.RawMessage, kind string) {
	ctx, cancel := context.WithTimeout(c.ctx, time.Hour)
	defer cancel()
	var err error
	if t.Function != "" {
		var rec *api.Invocation
		rec, err = c.Invoke(ctx, app, t.Function, event, kind)
		if err == nil && !rec.OK {
			err = fmt.Errorf("%s: %s", rec.Error.Type, rec.Error.Message)
		}
	} else {
		var run *api.PipelineRun
		run, err = c.RunPipeline(ctx, app, t.Pipeline, event, kind)
		if err == nil && !run.OK {
			err = fmt.Errorf("%s", run.Error)
		}
	}
	if err != nil {
		c.log.Warn("triggered invocation failed", "app", app, "function", t.Function, "pipeline", t.Pipeline, "err", err)
	}
}

// firstSighting records an object version and reports whether it is new.
func (c *Controller) firstSighting(bucket, key, etag string) bool {
	now := c.clk.Now()
	id := bucket + "\x00" + key + "\x00" + etag
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.seen) > 100000 || len(c.seen)%1024 == 0 {
		for k, t := range c.seen {
			if now.Sub(t) > c.cfg.DedupWindow {
				delete(c.seen, k)
			}
		}
	}
	if t, ok := c.seen[id]; ok && now.Sub(t) <= c.cfg.DedupWindow {
		return false
	}
	c.seen[id] = now
	return true
}

// HTTPTrigger finds the function or pipeline bound to an HTTP path.
func (c *Controller) HTTPTrigger(appName, path string) (*appspec.Trigger, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range a.spec.Triggers {
		if t.HTTP == path {
			return t, nil
		}
	}
	return nil, fmt.Errorf("%w: application %s binds nothing to %s", ErrNotFound, appName, path)
}
