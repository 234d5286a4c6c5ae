package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/predict"
	"github.com/hoard-io/hoard/internal/store"
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

// TestPrediction: a function whose memory follows the size of its input
// object (which the controller reads from the store's metadata) gets a
// mature model that sizes its invocations; an input in a bucket the
// application was not granted is not looked up, which makes the
// invocation a doubt; a restarted controller goes on with the model it
// saved in etcd.
func TestPrediction(t *testing.T) {
	// A loaded machine can take longer than the default to answer a HEAD,
	// which would make the invocation a doubt.
	c, fa, _ := setupWith(t, Config{Prediction: predict.Config{MinInvocations: 20, RetrainEvery: 5}, InputSizeTimeout: 10 * time.Second})
	ctx := context.Background()
	const spec = "name: app\nmax_instances: 1\nkeep_alive: 1h\nbuckets: {data: read-write}\nfunctions: {f: {handler: m.h}}\n"
	if _, err := c.Deploy(ctx, pkg(t, spec)); err != nil {
		t.Fatal(err)
	}
	sizes := []int64{1 << 20, 20 << 20, 50 << 20}
	if err := c.cfg.Store.CreateBucket(ctx, "data", ""); err != nil {
		t.Fatal(err)
	}
	for i, n := range sizes {
		if _, err := c.cfg.Store.Put(ctx, "data", fmt.Sprint("in/", i), bytes.NewReader(make([]byte, n)), n, store.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	invoke := func(c *Controller, bucket string, i int) *api.Invocation {
		t.Helper()
		peak := 30<<20 + 2*sizes[i]
		ev := fmt.Sprintf(`{"bucket": %q, "key": "in/%d", "peak": %d}`, bucket, i, peak)
		rec, err := c.Invoke(ctx, "app", "f", json.RawMessage(ev), "test")
		if err != nil || !rec.OK {
			t.Fatalf("invoke: %+v %v", rec, err)
		}
		return rec
	}
	var rec *api.Invocation
	for n := 0; ; n++ {
		if n == 60 {
			t.Fatalf("no prediction after %d invocations: %+v", n, c.modelInfo("app", "f"))
		}
		rec = invoke(c, "data", n%3)
		if rec.Predicted > 0 {
			break
		}
		if n < 19 && rec.Predicted != 0 {
			t.Fatalf("a prediction after %d invocations", n+1)
		}
	}
	iv := predict.DefaultInterval
	for i := range sizes {
		rec = invoke(c, "data", i)
		want := iv.Upper(iv.Class(30<<20+2*sizes[i]) + 1)
		if rec.Predicted != want || fa.lastLimit.Load() != want {
			t.Errorf("input %d: predicted %d, sent %d; want %d", i, rec.Predicted, fa.lastLimit.Load(), want)
		}
	}
	if rec := invoke(c, "other", 2); rec.Predicted != 0 {
		t.Errorf("an input in an ungranted bucket was sized: %d", rec.Predicted)
	}
	if mi := c.modelInfo("app", "f"); !mi.Mature || mi.Predicted < 3 || mi.Trainings == 0 {
		t.Errorf("model %+v", mi)
	}

	// A restarted controller reads the model back.
	c.Close()
	c2, err := New(ctx, c.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if rec := invoke(c2, "data", 1); rec.Predicted != iv.Upper(iv.Class(30<<20+2*sizes[1])+1) {
		t.Errorf("after a restart: predicted %d; %+v %+v", rec.Predicted, c2.modelInfo("app", "f"), rec)
	}
	// Removing the application removes its models.
	if err := c2.Remove(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	if resp, err := c2.cfg.Etcd.Get(ctx, EtcdModels, clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
		t.Errorf("models left in etcd: %v %v", resp, err)
	}
}
