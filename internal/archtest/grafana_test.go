package archtest

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboard: deploy/grafana/hoard.json is a dashboard whose
// every query names only metrics hoard defines (a metric renamed in the
// code and not in the dashboard fails here), with unique panel ids.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/hoard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("hoard.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("hoard.json: title %q, uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}

	defined := map[string]bool{}
	name := regexp.MustCompile(`"(hoard_[a-z0-9_]+)"`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllSubmatch(src, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !defined["hoard_cachelet_reads_total"] || !defined["hoard_invocations_total"] {
		t.Fatalf("found %d metric names in the code, not the known ones", len(defined))
	}

	used := regexp.MustCompile(`\bhoard_[a-z0-9_]+`)
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Title == "" || p.Type == "" || len(p.Targets) == 0 {
			t.Errorf("panel %d: title %q, type %q, %d queries", p.ID, p.Title, p.Type, len(p.Targets))
		}
		for _, tg := range p.Targets {
			for _, m := range used.FindAllString(tg.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(m, suffix); ok && defined[b] {
						base = b
					}
				}
				if !defined[base] {
					t.Errorf("panel %q queries %s, which no code defines", p.Title, m)
				}
			}
		}
	}
}
