package s3store

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
)

// The event records MinIO sends, decoded: keys URL-encoded as AWS does
// ('+' a space), quoted ETags, removals without an ETag, other events
// ignored.
func TestEventRecordChange(t *testing.T) {
	const line = `{"Records":[
	 {"eventName":"s3:ObjectCreated:Put","eventTime":"2026-11-25T03:45:03.831Z","s3":{"bucket":{"name":"b"},"object":{"key":"dir%2Fa+b%25.txt","eTag":"\"abc\""}}},
	 {"eventName":"s3:ObjectRemoved:Delete","s3":{"bucket":{"name":"b"},"object":{"key":"gone","eTag":"x"}}},
	 {"eventName":"s3:ObjectAccessed:Get","s3":{"bucket":{"name":"b"},"object":{"key":"read"}}},
	 {"eventName":"s3:ObjectCreated:Copy","s3":{"bucket":{"name":"b"},"object":{"key":"%zz"}}}]}`
	var msg eventMessage
	if err := json.Unmarshal([]byte(line), &msg); err != nil {
		t.Fatal(err)
	}
	c, ok := msg.Records[0].Change()
	if !ok || c.Bucket != "b" || c.Key != "dir/a b%.txt" || c.ETag != "abc" || c.Removed || c.Time.IsZero() {
		t.Errorf("created: %+v %v", c, ok)
	}
	c, ok = msg.Records[1].Change()
	if !ok || c.Key != "gone" || !c.Removed || c.ETag != "" {
		t.Errorf("removed: %+v %v", c, ok)
	}
	if c, ok := msg.Records[2].Change(); ok {
		t.Errorf("a read taken as a change: %+v", c)
	}
	if c, ok := msg.Records[3].Change(); ok {
		t.Errorf("an undecodable key taken as a change: %+v", c)
	}
}

// A line the stream ends in the middle of is an error, never an event;
// a line over the bound is refused.
func TestReadLine(t *testing.T) {
	r := bufio.NewReaderSize(strings.NewReader("{\"Records\":[]}\n{\"Records\":[{\"even"), 16)
	if l, err := readLine(r); err != nil || l != "{\"Records\":[]}\n" {
		t.Fatalf("first line: %q, %v", l, err)
	}
	if l, err := readLine(r); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("cut line: %q, %v; want io.ErrUnexpectedEOF", l, err)
	}
	long := bufio.NewReader(strings.NewReader(strings.Repeat("x", maxEventLine+10) + "\n"))
	if _, err := readLine(long); err == nil {
		t.Error("a line over the bound was accepted")
	}
}
