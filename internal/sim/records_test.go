package sim

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRecords(t *testing.T) {
	// Two unloads of one application: in the first life m.bin was read
	// three times a minute apart (a miss, then hits) and out.json written
	// once; in the second m.bin was read once.
	in := `{"version":1,"app":"fn","instance":"i1","unloaded_at":"2025-01-01T01:00:00Z","objects":[
	  {"bucket":"b","key":"m.bin","etag":"v1","size":100,"lh":2,"lm":1,"mean_gap_ms":60000,"last":"2025-01-01T00:10:00Z"},
	  {"bucket":"b","key":"out.json","size":5,"out":1,"last":"2025-01-01T00:09:30Z"}]}
	{"version":1,"app":"fn","instance":"i2","unloaded_at":"2025-01-01T03:00:00Z","objects":[
	  {"bucket":"b","key":"m.bin","etag":"v1","size":100,"rm":1,"last":"2025-01-01T02:00:00Z"}]}`
	events, err := drain(t, NewRecords(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	at := func(s string) time.Time { t, _ := time.Parse(time.RFC3339, s); return t }
	want := []struct {
		at   time.Time
		kind Kind
		key  string
	}{
		{at("2025-01-01T00:08:00Z"), Read, "m.bin"},
		{at("2025-01-01T00:09:00Z"), Read, "m.bin"},
		{at("2025-01-01T00:09:30Z"), Write, "out.json"},
		{at("2025-01-01T00:10:00Z"), Read, "m.bin"},
		{at("2025-01-01T02:00:00Z"), Read, "m.bin"},
	}
	if len(events) != len(want) {
		t.Fatalf("%d events: %+v", len(events), events)
	}
	for i, w := range want {
		e := events[i]
		if !e.Time.Equal(w.at) || e.Kind != w.kind || e.Key != w.key || e.App != "fn" || e.Bucket != "b" {
			t.Errorf("event %d: %+v, want %+v", i, e, w)
		}
	}
	if events[0].Size != 100 || events[0].Version != "v1" {
		t.Errorf("first event %+v", events[0])
	}
}

func TestRecordsErrors(t *testing.T) {
	rec := func(unloaded, objects string) string {
		return `{"version":1,"app":"a","unloaded_at":"` + unloaded + `","objects":[` + objects + `]}`
	}
	obj := `{"bucket":"b","key":"k","size":1,"lm":1,"last":"2025-01-01T00:00:00Z"}`
	for name, tc := range map[string]struct{ in, msg string }{
		"json":    {`{"version":1,`, "access record 1"},
		"version": {`{"version":7}`, "version 7"},
		"order":   {rec("2025-01-02T00:00:00Z", obj) + rec("2025-01-01T00:00:00Z", obj), "unload order"},
		"counts":  {rec("2025-01-01T00:00:00Z", `{"bucket":"b","key":"k","lm":-1}`), "negative"},
		"key":     {rec("2025-01-01T00:00:00Z", `{"bucket":"b","lm":1}`), "no key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := drain(t, NewRecords(strings.NewReader(tc.in)))
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v, want ErrFormat saying %q", err, tc.msg)
			}
		})
	}
}
