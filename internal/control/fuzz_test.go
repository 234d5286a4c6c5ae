package control

import (
	"encoding/json"
	"testing"
)

// A document ParseDocument accepts is valid, and survives being written
// and read again unchanged.
func FuzzParseDocument(f *testing.F) {
	f.Add([]byte(`{"version": 1}`))
	f.Add([]byte(`{"version": 1, "app": "a", "cache": {"consistency": "owner", "eviction": "ttl", "ttl": "1m"}}`))
	f.Add([]byte(`{"version": 1, "control": {"socket": "/s", "token": "0123456789abcdef0123456789abcdef"}}`))
	f.Add([]byte(`{"version": 1, "cache": {"ttl": 5}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := ParseDocument(data)
		if err != nil {
			return
		}
		if err := d.Validate(); err != nil {
			t.Fatalf("accepted an invalid document: %v", err)
		}
		again, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		d2, err := ParseDocument(again)
		if err != nil {
			t.Fatalf("a written document does not parse: %v\n%s", err, again)
		}
		if d2.Cache != d.Cache || d2.Control != d.Control || d2.Store != d.Store || d2.App != d.App {
			t.Fatalf("round trip changed the document:\n%+v\n%+v", d, d2)
		}
	})
}
