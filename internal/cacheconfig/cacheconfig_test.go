package cacheconfig

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// The tables are handed out as copies: a caller changing its copy changes
// no one else's.
func TestTablesAreCopies(t *testing.T) {
	a := Consistencies()
	a[0].Name, a[0].Target = "eventual", WriteLocal
	if b := Consistencies(); b[0].Name != "strong" || b[0].Target != WriteStore || len(b) != 6 {
		t.Fatalf("Consistencies changed through a copy: %+v", b[0])
	}
	p := Policies()
	p[0] = "fifo"
	if Policies()[0] != PolicyOwnerLRU {
		t.Fatal("Policies changed through a copy")
	}
}

func TestParse(t *testing.T) {
	for _, c := range Consistencies() {
		got, err := ParseConsistency(c.Name)
		if err != nil || got != c || !ValidWrite(c.Target, c.Mode) || !ValidReadMode(c.Read) {
			t.Errorf("%s: %+v, %v", c.Name, got, err)
		}
	}
	if _, err := ParseConsistency("eventual"); err == nil {
		t.Error("eventual parsed")
	}
	if ValidWrite(WriteStore, WriteAsync) {
		t.Error("store/async is not one of the six")
	}
	for _, p := range Policies() {
		if got, err := ParsePolicy(string(p)); err != nil || got != p {
			t.Errorf("%s: %v, %v", p, got, err)
		}
	}
	if _, err := ParsePolicy("fifo"); err == nil {
		t.Error("fifo parsed")
	}
}

func TestSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Settings
		ok   bool
	}{
		{"zero", Settings{}, true},
		{"owner ttl", Settings{Consistency: "owner", Eviction: PolicyTTL, TTL: Duration(time.Minute)}, true},
		{"read mode", Settings{ReadMode: ReadLocal}, true},
		{"bad consistency", Settings{Consistency: "eventual"}, false},
		{"bad read mode", Settings{ReadMode: "maybe"}, false},
		{"bad policy", Settings{Eviction: "fifo"}, false},
		{"ttl without ttl", Settings{Eviction: PolicyTTL}, false},
		{"ttl elsewhere", Settings{TTL: Duration(time.Minute)}, false},
		{"negative", Settings{Budget: -1}, false},
		{"size-aware threshold", Settings{Eviction: PolicySizeAware, LargeObjectSize: 1 << 20}, true},
		{"threshold elsewhere", Settings{LargeObjectSize: 1 << 20}, false},
		{"migrate bounds", Settings{Migrate: Migrate{HotReads: 2, HotIdle: Duration(time.Minute), MaxObjects: 8, MaxBytes: 1 << 20, Timeout: Duration(time.Second)}}, true},
		{"migrate off", Settings{Migrate: Migrate{Off: true}}, true},
		{"migrate off with bounds", Settings{Migrate: Migrate{Off: true, MaxObjects: 8}}, false},
		{"migrate negative", Settings{Migrate: Migrate{MaxBytes: -1}}, false},
		{"migrate too many objects", Settings{Migrate: Migrate{MaxObjects: MaxMigrateObjects + 1}}, false},
		{"migrate too many bytes", Settings{Migrate: Migrate{MaxBytes: MaxMigrateBytes + 1}}, false},
		{"migrate too long", Settings{Migrate: Migrate{Timeout: Duration(2 * MaxMigrateTimeout)}}, false},
	} {
		err := tc.s.Validate()
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	c, err := Settings{Consistency: "owner", ReadMode: ReadLocal}.Resolved()
	if err != nil || c.Target != WriteOwner || c.Mode != WriteSync || c.Read != ReadLocal {
		t.Fatalf("Resolved = %+v, %v", c, err)
	}
	if c, _ := (Settings{}).Resolved(); c.Name != DefaultConsistency || c.Read != ReadVersionCheck {
		t.Fatalf("zero Resolved = %+v", c)
	}
}

func TestSettingsJSON(t *testing.T) {
	s := Settings{Consistency: "local", Eviction: PolicyTTL, TTL: Duration(90 * time.Second), Budget: 1 << 20}
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"consistency":"local","eviction":"ttl","ttl":"1m30s","budget_bytes":1048576}`; string(data) != want {
		t.Fatalf("JSON %s, want %s", data, want)
	}
	var back Settings
	if err := json.Unmarshal(data, &back); err != nil || back != s {
		t.Fatalf("round trip %+v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"ttl": 5}`), &back); err == nil {
		t.Fatal("a bare number read as a duration")
	}
}

// Final-output locations round-trip and refuse a location without a
// bucket.
func TestLocations(t *testing.T) {
	locs, err := ParseLocations(" out/reports/, thumbs ")
	if err != nil || len(locs) != 2 || locs[0] != (Location{"out", "reports/"}) || locs[1] != (Location{"thumbs", ""}) {
		t.Fatalf("ParseLocations = %+v, %v", locs, err)
	}
	if got := JoinLocations(locs); got != "out/reports/,thumbs/" {
		t.Errorf("JoinLocations = %q", got)
	}
	if !locs[0].Contains("out", "reports/2024") || locs[0].Contains("out", "report") || locs[0].Contains("thumbs", "reports/x") {
		t.Error("Contains")
	}
	if !locs[0].Overlaps(Location{"out", ""}) || !locs[0].Overlaps(Location{"out", "reports/q"}) || locs[0].Overlaps(Location{"out", "in/"}) {
		t.Error("Overlaps")
	}
	for _, bad := range []string{"/prefix", "a,,b", "," + strings.Repeat("b,", MaxFinalOutputs)} {
		if _, err := ParseLocations(bad); err == nil {
			t.Errorf("ParseLocations(%q) accepted", bad)
		}
		if err := (Settings{FinalOutputs: bad}).Validate(); err == nil {
			t.Errorf("Validate accepted final_outputs %q", bad)
		}
	}
}

// durable_shadow stands for logged writes: alone it is refused, saying so.
func TestDurableShadowNeedsDurableWrites(t *testing.T) {
	err := Settings{Consistency: "owner", DurableShadow: true}.Validate()
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "durable_shadow needs durable_writes") {
		t.Fatalf("durable_shadow alone: %v", err)
	}
	for _, m := range []DurableMode{DurableLog, DurableReplicated} {
		if err := (Settings{Consistency: "owner", DurableWrites: m, DurableShadow: true}).Validate(); err != nil {
			t.Errorf("durable_shadow with durable_writes %s: %v", m, err)
		}
	}
}
