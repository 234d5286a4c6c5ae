//go:build integration

package rig

import (
	"encoding/base64"
	"strconv"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/media/mediatest"
)

const mediaSpec = `
name: md
memory: 128MiB
timeout: 20s
keep_alive: 1h
max_instances: 1
buckets: {data: read-write}
cache: {budget: 16MiB}
functions:
  put: {handler: fns.put}
  size: {handler: fns.size}
`

const mediaFns = `
import base64
import boto3

s3 = boto3.client("s3")

def put(event, context):
    s3.put_object(Bucket=event["bucket"], Key=event["key"], Body=base64.b64decode(event["b64"]))
    return "ok"

def size(event, context):
    return len(s3.get_object(Bucket=event["bucket"], Key=event["key"])["Body"].read())
`

// TestInputMedia: a PNG and an MP4 written through a cachelet (by a
// function, with boto3, into a real MinIO behind it) reach the
// controller's features for the invocations that read them: the
// cachelet read their size and duration from the first bytes as they
// streamed in, and its write event carried them.
func TestInputMedia(t *testing.T) {
	e := start(t)
	e.deployCode(t, mediaSpec, mediaFns)
	c := e.p.Controller
	for _, o := range []struct {
		key  string
		data []byte
		want media.Features
	}{
		{"in/photo.png", mediatest.PNG(800, 600), media.Features{Format: "png", Width: 800, Height: 600}},
		{"in/clip.mp4", mediatest.MP4("isom", 90000, 90000*42, 1920, 1080, 8<<10),
			media.Features{Format: "mp4", Width: 1920, Height: 1080, DurationS: 42}},
	} {
		if rec := invoke(t, c, "md", "put", map[string]any{"bucket": "data", "key": o.key, "b64": base64.StdEncoding.EncodeToString(o.data)}); !rec.OK {
			t.Fatalf("put %s: %+v", o.key, rec.Error)
		}
		// The write's event reaches the controller after the function's
		// write was answered: soon after the invocation.
		var rec *api.Invocation
		eventually(t, o.key+"'s media features in an invocation's record", 10*time.Second, func() bool {
			rec = invoke(t, c, "md", "size", map[string]any{"bucket": "data", "key": o.key})
			return rec.InputMedia != nil
		})
		if !rec.OK || string(rec.Result) != strconv.Itoa(len(o.data)) || *rec.InputMedia != o.want {
			t.Fatalf("reading %s: ok %v, result %s, media %+v; want %+v", o.key, rec.OK, rec.Result, rec.InputMedia, o.want)
		}
		t.Logf("%s: %+v", o.key, *rec.InputMedia)
	}
	// Rewritten with something else through the cachelet: once its event
	// is in, no features for the new version.
	if rec := invoke(t, c, "md", "put", map[string]any{"bucket": "data", "key": "in/photo.png", "b64": base64.StdEncoding.EncodeToString([]byte("not an image"))}); !rec.OK {
		t.Fatal(rec.Error)
	}
	eventually(t, "the rewrite without features", 10*time.Second, func() bool {
		rec := invoke(t, c, "md", "size", map[string]any{"bucket": "data", "key": "in/photo.png"})
		return string(rec.Result) == "12" && rec.InputMedia == nil
	})
}
