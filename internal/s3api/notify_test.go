package s3api

import (
	"encoding/xml"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/media"
	"github.com/hoard-io/hoard/internal/media/mediatest"
	"github.com/hoard-io/hoard/internal/notify"
)

// events records what the front notifies.
type events struct {
	mu  sync.Mutex
	evs []notify.Event
}

func (e *events) Notify(ev notify.Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *events) take() []notify.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.evs
	e.evs = nil
	return out
}

// wait takes n events, waiting a while for them: the front may answer a
// write before it notifies (copies and completions ask the store for the
// size after the response went out).
func (e *events) wait(t *testing.T, n int) []notify.Event {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		have := len(e.evs)
		e.mu.Unlock()
		if have >= n || time.Now().After(deadline) {
			return e.take()
		}
		time.Sleep(time.Millisecond)
	}
}

// Every successful PutObject, CopyObject and CompleteMultipartUpload is
// notified once answered, with the ETag the client got and the object's
// size; failed writes and other operations are not.
func TestWritesAreNotified(t *testing.T) {
	rec := &events{}
	s := newTestServerWith(t, Config{Region: testRegion, Notifier: rec})

	resp := s.do(t, http.MethodPut, "/bkt/dir/a%20b.txt", []byte("hello, world"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	putETag := strings.Trim(resp.Header.Get("ETag"), `"`)
	got := rec.wait(t, 1)
	if len(got) != 1 {
		t.Fatalf("%d events after a put, want 1", len(got))
	}
	ev := got[0]
	if ev.Name != notify.ObjectCreatedPut || ev.Bucket != "bkt" || ev.Key != "dir/a b.txt" || ev.Size != 12 ||
		ev.ETag != putETag || ev.Principal != testAK || ev.SourceIP != "127.0.0.1" || ev.Region != testRegion ||
		ev.RequestID != resp.Header.Get("x-amz-request-id") || ev.Time.IsZero() {
		t.Fatalf("put event %+v (client got ETag %s)", ev, putETag)
	}
	if ev.Media != nil {
		t.Fatalf("media features %+v of a text", ev.Media)
	}
	// A PNG written: its event carries its media features.
	resp = s.do(t, http.MethodPut, "/bkt/img.png", mediatest.PNG(64, 48), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("put: %d", resp.StatusCode)
	}
	if got := rec.wait(t, 1); len(got) != 1 || got[0].Media == nil || *got[0].Media != (media.Features{Format: "png", Width: 64, Height: 48}) {
		t.Fatalf("png events %+v", got)
	}

	resp = s.do(t, http.MethodPut, "/bkt/copy", nil, map[string]string{"x-amz-copy-source": "/bkt/dir/a%20b.txt"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("copy: %d", resp.StatusCode)
	}
	var cr copyObjectResult
	data, _ := io.ReadAll(resp.Body)
	if err := xml.Unmarshal(data, &cr); err != nil {
		t.Fatal(err)
	}
	got = rec.wait(t, 1)
	if len(got) != 1 || got[0].Name != notify.ObjectCreatedCopy || got[0].Key != "copy" || got[0].Size != 12 ||
		got[0].ETag != strings.Trim(cr.ETag, `"`) {
		t.Fatalf("copy events %+v (client got %s)", got, cr.ETag)
	}

	resp = s.do(t, http.MethodPost, "/bkt/mp?uploads", nil, nil)
	var init initiateMultipartUploadResult
	data, _ = io.ReadAll(resp.Body)
	if err := xml.Unmarshal(data, &init); err != nil || init.UploadID == "" {
		t.Fatalf("create multipart upload: %d %s", resp.StatusCode, data)
	}
	resp = s.do(t, http.MethodPut, "/bkt/mp?partNumber=1&uploadId="+init.UploadID, []byte("part one"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload part: %d", resp.StatusCode)
	}
	body := `<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>` + resp.Header.Get("ETag") +
		`</ETag></Part></CompleteMultipartUpload>`
	resp = s.do(t, http.MethodPost, "/bkt/mp?uploadId="+init.UploadID, []byte(body), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("complete: %d", resp.StatusCode)
	}
	var done completeMultipartUploadResult
	data, _ = io.ReadAll(resp.Body)
	if err := xml.Unmarshal(data, &done); err != nil {
		t.Fatal(err)
	}
	got = rec.wait(t, 1)
	if len(got) != 1 || got[0].Name != notify.ObjectCreatedCompleteMultipartUpload || got[0].Key != "mp" ||
		got[0].Size != 8 || got[0].ETag != strings.Trim(done.ETag, `"`) {
		t.Fatalf("complete events %+v (client got %s)", got, done.ETag)
	}

	// Failures, reads, deletes and parts are not notified.
	s.do(t, http.MethodPut, "/bkt/k", []byte("evil"), map[string]string{"Content-MD5": "AAAAAAAAAAAAAAAAAAAAAA=="})
	s.do(t, http.MethodPut, "/nobucket/k", []byte("x"), nil)
	s.do(t, http.MethodPut, "/bkt/copy2", nil, map[string]string{"x-amz-copy-source": "/bkt/missing"})
	s.do(t, http.MethodGet, "/bkt/copy", nil, nil)
	s.do(t, http.MethodDelete, "/bkt/copy", nil, nil)
	time.Sleep(20 * time.Millisecond) // what a copy would take to notify
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("events for failed writes or other operations: %+v", got)
	}
}
