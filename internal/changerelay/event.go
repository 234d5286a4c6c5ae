package changerelay

import (
	"encoding/json"
	"net/url"
	"strings"
	"time"

	"github.com/hoard-io/hoard/internal/store"
)

// record is what Changes reads of one S3 event notification record.
type record struct {
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

// Changes are the object changes among the records of an S3 event
// notification (AWS's and MinIO's shape): every object created or removed.
// Records of other events, or that do not parse, are skipped.
func Changes(records []json.RawMessage) []store.Change {
	var out []store.Change
	for _, raw := range records {
		var r record
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		key, err := url.QueryUnescape(r.S3.Object.Key)
		if err != nil || r.S3.Bucket.Name == "" {
			continue
		}
		ch := store.Change{Bucket: r.S3.Bucket.Name, Key: key, ETag: strings.Trim(r.S3.Object.ETag, `"`)}
		switch name := strings.TrimPrefix(r.EventName, "s3:"); {
		case strings.HasPrefix(name, "ObjectRemoved:"):
			ch.Removed, ch.ETag = true, ""
		case strings.HasPrefix(name, "ObjectCreated:"):
		default:
			continue
		}
		ch.Time, _ = time.Parse(time.RFC3339Nano, r.EventTime)
		out = append(out, ch)
	}
	return out
}
