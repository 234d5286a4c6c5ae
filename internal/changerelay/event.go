package changerelay

import (
	"encoding/json"

	"github.com/hoard-io/hoard/internal/store"
)

// Changes are the object changes among the records of an S3 event
// notification (AWS's and MinIO's shape): every object created or removed.
// Records of other events, or that do not parse, are skipped.
func Changes(records []json.RawMessage) []store.Change {
	var out []store.Change
	for _, raw := range records {
		var r store.EventRecord
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		if ch, ok := r.Change(); ok {
			out = append(out, ch)
		}
	}
	return out
}
