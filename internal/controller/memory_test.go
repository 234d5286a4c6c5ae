package controller

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/predict"
)

func TestFeatures(t *testing.T) {
	ev := `{"width": 640, "format": "png", "gray": true, "tags": [1,2,3], "nested": {"x": 1},
		"Records": [{"s3": {"object": {"key": "a", "size": 1000}}}, {"s3": {"object": {"size": 24}}}]}`
	got := map[string]predict.Feature{}
	for _, f := range features(json.RawMessage(ev)) {
		got[f.Name] = f
	}
	for name, want := range map[string]predict.Feature{
		"width": predict.Num("width", 640), "format": predict.Cat("format", "png"), "gray": predict.Cat("gray", "true"),
		"tags.len": predict.Num("tags.len", 3), "Records.len": predict.Num("Records.len", 2), "input.size": predict.Num("input.size", 1024),
		"event.bytes": predict.Num("event.bytes", float64(len(ev))),
	} {
		if got[name] != want {
			t.Errorf("%s: %+v, want %+v", name, got[name], want)
		}
	}
	if _, ok := got["nested"]; ok || len(got) != 7 {
		t.Errorf("features %v", got)
	}
	// Bounded: a large event is its size; many arguments are cut.
	big := `{"s": "` + strings.Repeat("x", maxEventFeatureBytes) + `"}`
	if fs := features(json.RawMessage(big)); len(fs) != 1 || fs[0].Name != "event.bytes" {
		t.Errorf("a large event: %+v", fs)
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range 100 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`"a` + strings.Repeat("b", i%5) + string(rune('A'+i%50)) + `": 1`)
	}
	many.WriteString("}")
	if fs := features(json.RawMessage(many.String())); len(fs) > predict.MaxFeatures {
		t.Errorf("%d features", len(fs))
	}
	if _, err := predict.Normalize(features(json.RawMessage(`{"": 1, "a\u0000": 2, "n": 1e308}`))); err != nil {
		t.Errorf("features of odd names: %v", err)
	}
}

// TestModelRecordRejects: a record read back from etcd that is not
// well formed is refused whole.
func TestModelRecordRejects(t *testing.T) {
	cfg := predict.Config{}
	_ = cfg.Validate()
	for name, rec := range map[string]string{
		"not json":    `{`,
		"bad trainer": `{"trainer": {"v": 1, "observed": 1, "samples": [{"f": [], "c": 9999, "w": 1}]}}`,
		"bad model":   `{"trainer": {"v": 1, "observed": 0, "samples": []}, "model": {"v": 1, "nodes": []}}`,
		"too large":   `{"trainer": "` + strings.Repeat("x", maxModelRecord) + `"}`,
	} {
		fm := &fnModel{}
		if err := fm.restore(cfg, []byte(rec)); err == nil {
			t.Errorf("%s: restored", name)
		}
		if fm.trainer != nil || fm.model != nil {
			t.Errorf("%s: a refused record changed the model", name)
		}
	}
	fm := &fnModel{}
	if err := fm.restore(cfg, []byte(`{"trainer": {"v": 1, "observed": 3, "since": 1, "samples": [{"f": [{"n": "x", "v": 1}], "c": 2, "w": 1}]}}`)); err != nil || fm.trainer.Observed() != 3 {
		t.Errorf("a good record: %v", err)
	}
}
