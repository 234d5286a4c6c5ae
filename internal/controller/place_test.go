package controller

import (
	"testing"

	"github.com/hoard-io/hoard/internal/api"
)

func TestPlace(t *testing.T) {
	agents := []api.Registration{{ID: "n0"}, {ID: "n1"}, {ID: "n2"}}
	for _, tc := range []struct {
		name         string
		ofApp, total map[string]int
		want         string
	}{
		{"empty: the first", nil, nil, "n0"},
		{"fewest of the app", map[string]int{"n0": 1, "n1": 1}, map[string]int{"n0": 1, "n1": 1}, "n2"},
		{"the app before the load", map[string]int{"n0": 1, "n2": 1}, map[string]int{"n0": 1, "n1": 5, "n2": 1}, "n1"},
		{"then the least loaded", map[string]int{"n0": 1, "n1": 1, "n2": 1}, map[string]int{"n0": 3, "n1": 2, "n2": 4}, "n1"},
		{"ties by ID", map[string]int{"n0": 1}, map[string]int{"n0": 1, "n1": 2, "n2": 2}, "n1"},
	} {
		if got := place(agents, tc.ofApp, tc.total, ""); got.ID != tc.want {
			t.Errorf("%s: placed on %s, want %s", tc.name, got.ID, tc.want)
		}
	}
	// The node of the input's owner first, when it is registered.
	if got := place(agents, map[string]int{"n2": 3}, map[string]int{"n2": 9}, "n2"); got.ID != "n2" {
		t.Errorf("near the data: placed on %s, want n2", got.ID)
	}
	if got := place(agents, nil, nil, "gone"); got.ID != "n0" {
		t.Errorf("near an unregistered node: placed on %s, want n0", got.ID)
	}
}
