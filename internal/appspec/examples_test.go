package appspec

import (
	"os"
	"path/filepath"
	"testing"
)

// Every example's spec parses: its triggers' and pipelines' buckets are
// among its buckets.
func TestExamplesParse(t *testing.T) {
	specs, err := filepath.Glob("../../examples/*/" + FileName)
	if err != nil || len(specs) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, p := range specs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Parse(data)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(s.Buckets) == 0 {
			t.Errorf("%s: no buckets", p)
		}
	}
}
