package store

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"time"
)

// Change is one object changed in the store, as its change notifications
// tell it: created (or overwritten) or removed, by anyone.
type Change struct {
	Bucket string
	Key    string
	// ETag is the new version's, without quotes; empty for a removal.
	ETag string
	// Removed: the object (or its current version) is gone.
	Removed bool
	// Time is when the store says the change happened; zero when it does
	// not say.
	Time time.Time
}

// ErrListenUnsupported: the store offers no change notifications to
// listen to (AWS S3 and most S3-compatible stores other than MinIO).
var ErrListenUnsupported = errors.New("store: change notifications not supported")

// Listener is a store whose changes can be followed as they happen
// (MinIO's ListenBucketNotification).
type Listener interface {
	// Listen follows the changes of bucket's objects until ctx ends or
	// the stream breaks, and returns why (never nil). ready is called
	// once the store has registered the listener: every change after it
	// is delivered to each, in the order the store sends them. Listen
	// returns an error wrapping ErrUnavailable when the stream is cut or
	// stays silent past heartbeat (the store pings at least every
	// heartbeat/3), ErrListenUnsupported when the store refuses to
	// listen, and an *APIError (AccessDenied, NoSuchBucket) as it is.
	Listen(ctx context.Context, bucket string, heartbeat time.Duration, ready func(), each func(Change)) error
}

// EventRecord is what a change needs of one record of an S3 event
// notification (AWS's and MinIO's shape, as MinIO's listen stream and the
// stores' webhooks send it).
type EventRecord struct {
	EventName string `json:"eventName"`
	EventTime string `json:"eventTime"`
	S3        struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key  string `json:"key"`
			ETag string `json:"eTag"`
		} `json:"object"`
	} `json:"s3"`
}

// Change is the record's object change: false for a record of another
// event, without a bucket, or whose key (URL-encoded, as S3 sends it)
// does not decode.
func (r EventRecord) Change() (Change, bool) {
	key, err := url.QueryUnescape(r.S3.Object.Key)
	if err != nil || r.S3.Bucket.Name == "" {
		return Change{}, false
	}
	c := Change{Bucket: r.S3.Bucket.Name, Key: key, ETag: strings.Trim(r.S3.Object.ETag, `"`)}
	switch name := strings.TrimPrefix(r.EventName, "s3:"); {
	case strings.HasPrefix(name, "ObjectRemoved:"):
		c.Removed, c.ETag = true, ""
	case strings.HasPrefix(name, "ObjectCreated:"):
	default:
		return Change{}, false
	}
	c.Time, _ = time.Parse(time.RFC3339Nano, r.EventTime)
	return c, true
}
