package controller

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/changerelay"
)

// The relay of the store's changes to the applications' cachelets (ADR
// 0033, package changerelay): the store's event notifications posted to
// POST /v1/events go out on GET /v1/changes?bucket=B to the cachelets of
// the applications granted B, and to no one else.

// changeProbePrefix is where probe objects live (cachelet.ProbePrefix,
// changerelay.ProbeKey): their events fire no trigger and are not relayed.
const changeProbePrefix = ".hoard/changes/"

// serveChanges is GET /v1/changes?bucket=B[&heartbeat=D], with an
// application's token: the stream of B's changes, when B is one of the
// application's buckets.
func (c *Controller) serveChanges(w http.ResponseWriter, r *http.Request) {
	app := scopedApp(r.Context())
	if app == "" {
		api.WriteError(w, http.StatusForbidden, errors.New("forbidden: a change stream is an application's: subscribe with its token"))
		return
	}
	bucket := r.URL.Query().Get("bucket")
	if bucket == "" {
		api.WriteError(w, http.StatusBadRequest, errors.New("bucket: required"))
		return
	}
	heartbeat := 6 * time.Second
	if s := r.URL.Query().Get("heartbeat"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 3*time.Second || d > 10*time.Minute {
			api.WriteError(w, http.StatusBadRequest, fmt.Errorf("heartbeat %q: want a duration from 3s to 10m", s))
			return
		}
		heartbeat = d
	}
	if err := c.mayFollow(app, bucket); err != nil {
		api.WriteError(w, statusOfFollow(err), err)
		return
	}
	s, err := c.relay.Subscribe(app, bucket)
	if err != nil {
		w.Header().Set("Retry-After", "10")
		api.WriteError(w, http.StatusServiceUnavailable, err)
		return
	}
	defer c.relay.Unsubscribe(s)
	c.relay.Serve(w, r, s, heartbeat/3)
}

// mayFollow checks that bucket is one of app's granted buckets.
func (c *Controller) mayFollow(app, bucket string) error {
	a, err := c.app(app)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.spec.Buckets.Set().Allows(bucket, false) {
		return fmt.Errorf("%w: bucket %q is not granted to application %q", ErrForbidden, bucket, app)
	}
	return nil
}

func statusOfFollow(err error) int {
	if errors.Is(err, ErrForbidden) {
		return http.StatusForbidden
	}
	return statusOf(err)
}

// relayChanges hands the store's event to the relay: every record of an
// object created or removed.
func (c *Controller) relayChanges(ev *S3Event) {
	if out := changerelay.Changes(ev.Records); len(out) > 0 {
		c.relay.Publish(out)
	}
}

// followBuckets has the store notify the controller of the changes of
// the application's buckets when its cachelets follow them through the
// relay (cache.store_changes relay or auto).
func (c *Controller) followBuckets(ctx context.Context, spec *appspec.Spec) {
	if c.cfg.Notifications == nil || !spec.Cache.FollowsRelay() {
		return
	}
	for _, b := range spec.Buckets {
		if err := c.cfg.Notifications.EnableNotifications(ctx, b.Name); err != nil {
			c.log.Warn("the store will not notify the bucket's changes: the application's cachelets validate their reads of it",
				"bucket", b.Name, "err", err)
		}
	}
}
