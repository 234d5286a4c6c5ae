package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/predict"
)

// Memory prediction (OFC §5, ADR 0024): a model per function, fed by the
// peaks agents measure and asked before each invocation. A mature model's
// size travels in the invoke request (api.InvokeRequest.MemoryLimit); the
// agent sizes the function to it and gives the rest of the booked memory
// to the cache. Models and their training sets live in etcd under
// EtcdModels so a restarted controller goes on from them.

// EtcdModels is where the functions' memory models are kept (key: prefix
// + app + "/" + function).
const EtcdModels = "/hoard/platform/models/"

// maxEventFeatureBytes bounds the events whose arguments become features;
// a larger event contributes its size alone.
const maxEventFeatureBytes = 64 << 10

// fnModel is one function's model and training set.
type fnModel struct {
	mu       sync.Mutex
	trainer  *predict.Trainer
	model    *predict.Model // nil until the first training
	training bool           // a training is running (train)
	info     api.ModelInfo
	mature   bool // as last announced in the application's events

	// saveMu orders the saves of successive trainings: one trained later
	// is never overwritten in etcd by one trained before it.
	saveMu sync.Mutex
	saved  int64 // the Trainings count of the model saved last
}

// models are the controller's, by app/function, and the input sizes it
// looked up lately.
type models struct {
	mu sync.Mutex
	m  map[string]*fnModel

	sizes fifoMap[sizeSeen]  // by app + "\x00" + bucket + "/" + key, at most maxInputSizes
	media fifoMap[mediaSeen] // as sizes, at most maxInputMedia (inputs.go)
}

// fifoMap is a map bounded by dropping its oldest keys (by first
// insertion; replacing a value keeps its place). The zero value is
// empty. Not safe for concurrent use: models.mu guards both.
type fifoMap[V any] struct {
	m     map[string]V
	order []string // oldest first
}

func (f *fifoMap[V]) get(k string) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}

// put sets k to v and drops the oldest keys beyond max.
func (f *fifoMap[V]) put(k string, v V, max int) {
	if f.m == nil {
		f.m = map[string]V{}
	}
	if _, ok := f.m[k]; !ok {
		f.order = append(f.order, k)
	}
	f.m[k] = v
	for len(f.order) > max {
		delete(f.m, f.order[0])
		f.order = f.order[1:]
	}
}

type sizeSeen struct {
	size int64
	etag string // the version the size is of ("" when not known)
	at   time.Time
}

// Input sizes: an event naming an input object in a bucket the
// application was granted gets its size as the feature "input.size",
// from the store's metadata (a HEAD, at most Config.InputSizeTimeout,
// default inputSizeTimeout; a failure
// or a timeout leaves the feature out, which the model treats as a doubt
// if it splits on it). The HEAD is on the invocation's path only when the
// function's mature model splits on the size; otherwise the invocation
// uses a size remembered from before, if any, and the size is looked up
// after it, for training. Sizes are remembered for inputSizeTTL, at most
// maxInputSizes of them.
const (
	inputSizeTimeout = 250 * time.Millisecond
	inputSizeTTL     = 30 * time.Second
	maxInputSizes    = 4096
)

// cachedInputSize is bucket/key's size, and the version it is of, for
// application a if it was looked up (or written through one of a's
// cachelets) lately (no I/O).
func (c *Controller) cachedInputSize(a *app, bucket, key string) (sizeSeen, bool) {
	id := a.rec.Name + "\x00" + bucket + "/" + key
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	if s, ok := c.models.sizes.get(id); ok && c.clk.Now().Sub(s.at) < inputSizeTTL {
		return s, true
	}
	return sizeSeen{}, false
}

// needs says whether the function's mature model splits on the feature,
// so that a prediction without it would be a doubt.
func (fm *fnModel) needs(feature string) bool {
	if fm == nil {
		return false
	}
	fm.mu.Lock()
	m := fm.model
	fm.mu.Unlock()
	return m != nil && m.Maturity().Mature && m.Uses(feature)
}

// inputSize is bucket/key's size, and the version it is of, for
// application a, if a may read the bucket and the store answers in time.
func (c *Controller) inputSize(ctx context.Context, a *app, bucket, key string) (sizeSeen, bool) {
	c.mu.Lock()
	granted := a.spec.Buckets.Set().Allows(bucket, false)
	c.mu.Unlock()
	if !granted {
		return sizeSeen{}, false
	}
	if s, ok := c.cachedInputSize(a, bucket, key); ok {
		return s, true
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.InputSizeTimeout)
	info, err := c.cfg.Store.Stat(sctx, bucket, key)
	cancel()
	if err != nil || info.Size < 0 {
		return sizeSeen{}, false
	}
	s := sizeSeen{size: info.Size, etag: strings.Trim(info.ETag, `"`), at: c.clk.Now()}
	c.rememberSize(a.rec.Name, bucket, key, s)
	return s, true
}

// rememberSize remembers bucket/key's size for application app, for
// inputSizeTTL, at most maxInputSizes of them.
func (c *Controller) rememberSize(app, bucket, key string, s sizeSeen) {
	id := app + "\x00" + bucket + "/" + key
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	c.models.sizes.put(id, s, maxInputSizes)
}

func modelKey(app, function string) string { return app + "/" + function }

// model returns the function's model, restoring it from etcd the first
// time it is asked for (a bad record is logged and replaced by an empty
// model). Nil when prediction is off.
func (c *Controller) model(ctx context.Context, app, function string) *fnModel {
	if c.cfg.DisablePrediction {
		return nil
	}
	key := modelKey(app, function)
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	if fm := c.models.m[key]; fm != nil {
		return fm
	}
	tr, _ := predict.NewTrainer(c.cfg.Prediction) // validated by Config.Validate
	fm := &fnModel{trainer: tr}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	resp, err := c.cfg.Etcd.Get(rctx, EtcdModels+key)
	cancel()
	if err == nil && len(resp.Kvs) > 0 {
		if err := fm.restore(c.cfg.Prediction, resp.Kvs[0].Value); err != nil {
			c.log.Warn("ignoring a saved memory model", "app", app, "function", function, "err", err)
		}
	}
	c.models.m[key] = fm
	return fm
}

// modelRecord is a model and its training set as kept in etcd.
type modelRecord struct {
	Model   json.RawMessage `json:"model,omitempty"`
	Trainer json.RawMessage `json:"trainer"`
	Info    api.ModelInfo   `json:"info"`
}

// maxModelRecord bounds a record read back from etcd.
const maxModelRecord = predict.MaxModelBytes + predict.MaxTrainerBytes + 64<<10

func (fm *fnModel) restore(cfg predict.Config, data []byte) error {
	if len(data) > maxModelRecord {
		return fmt.Errorf("a record of %d bytes", len(data))
	}
	var rec modelRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return err
	}
	tr, err := predict.DecodeTrainer(cfg, rec.Trainer)
	if err != nil {
		return err
	}
	var m *predict.Model
	if len(rec.Model) > 0 {
		if m, err = predict.DecodeModel(rec.Model); err != nil {
			return err
		}
		if m.Interval() != tr.Config().Interval {
			m = nil // trained on other intervals: wait for the next training
		}
	}
	fm.trainer, fm.model, fm.info = tr, m, rec.Info
	fm.mature = m != nil && m.Maturity().Mature
	return nil
}

// limit is the memory a mature model gives an invocation with features
// fs, and the class it predicted; 0 and -1 without one.
func (fm *fnModel) limit(fs predict.Features) (int64, int) {
	if fm == nil {
		return 0, -1
	}
	fm.mu.Lock()
	m := fm.model
	fm.mu.Unlock()
	return predict.Sized(m, fs)
}

// observe feeds an invocation's outcome to its function's model and, when
// a retraining is due, trains it in the background.
func (c *Controller) observe(a *app, function string, fm *fnModel, fs predict.Features, class int, rec *api.Invocation, bucket, key, etag string) {
	mem := rec.Memory
	if fm == nil || mem == nil || mem.Peak <= 0 {
		return
	}
	// Off the invocation's path: the input's size and media features,
	// when the invocation went without them, are looked up for training
	// now.
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if bucket != "" {
			fs, _ = c.inputFeatures(c.ctx, a, fs, bucket, key, etag, true)
		}
		c.learn(a, function, fm, fs, class, mem)
	}()
}

// learn feeds one invocation to its function's trainer and starts a
// retraining when one is due.
func (c *Controller) learn(a *app, function string, fm *fnModel, fs predict.Features, class int, mem *api.InvocationMemory) {
	fm.mu.Lock()
	due, err := fm.trainer.Observe(fs, mem.Peak, class)
	if err != nil {
		fm.mu.Unlock()
		c.log.Debug("an invocation's features were not usable", "app", a.rec.Name, "function", function, "err", err)
		return
	}
	iv := fm.trainer.Config().Interval
	if class >= 0 {
		fm.info.Predicted++
		fm.info.PredictedBytes += mem.Limit
		fm.info.PeakBytes += mem.Peak
		fm.info.CacheGivenBytes += mem.CacheGiven
		if iv.Class(mem.Peak) > class {
			fm.info.UnderPredicted++
		}
	}
	if mem.Retried {
		fm.info.Retries++
	}
	start := due && !fm.training
	if start {
		fm.training = true
	}
	fm.mu.Unlock()
	outcome := "unsized"
	switch k := iv.Class(mem.Peak); {
	case class < 0:
	case k == class:
		outcome = "exact"
	case k < class:
		outcome = "over"
	default:
		outcome = "under"
	}
	c.m.predictions.WithLabelValues(a.rec.Name, function, outcome).Inc()
	if mem.Retried {
		c.m.oomRetries.WithLabelValues(a.rec.Name, function).Inc()
	}
	if mem.CacheGiven > 0 {
		c.m.cacheGiven.WithLabelValues(a.rec.Name, function).Add(float64(mem.CacheGiven))
	}
	if !start {
		return
	}
	c.train(a, function, fm) // already off the invocation's path
}

// train retrains a function's model, records the change of maturity in
// the application's events and saves the model in etcd.
func (c *Controller) train(a *app, function string, fm *fnModel) {
	fm.mu.Lock()
	start := time.Now()
	m, err := fm.trainer.Train()
	took := time.Since(start)
	if err != nil {
		fm.training = false
		fm.mu.Unlock()
		return
	}
	mt := m.Maturity()
	fm.model = m
	fm.training = false
	fm.info.Trainings++
	fm.info.TrainedOn = fm.trainer.Observed()
	fm.info.Observed, fm.info.Samples, fm.info.Mature = fm.trainer.Observed(), fm.trainer.Samples(), mt.Mature
	fm.info.Evaluated, fm.info.Nodes = mt.Evaluated, m.Nodes()
	fm.info.Exact, fm.info.ExactOrOver, fm.info.UnderWithinOne = mt.ExactShare(), mt.ExactOrOverShare(), mt.UnderWithinOneShare()
	changed := fm.mature != mt.Mature
	fm.mature = mt.Mature
	info := fm.info
	model, err1 := json.Marshal(m)
	trainer, err2 := json.Marshal(fm.trainer)
	fm.mu.Unlock()

	mature := 0.0
	if mt.Mature {
		mature = 1
	}
	c.m.modelMature.WithLabelValues(a.rec.Name, function).Set(mature)
	c.m.trainSeconds.Observe(took.Seconds())
	if changed {
		what := "matured"
		if !mt.Mature {
			what = "lost its maturity (invocations get their booked memory)"
		}
		c.mu.Lock()
		a.event(c.clk.Now(), "model", "%s's memory model %s after %d invocations: %.0f%% exact, %.0f%% exact or over, %.0f%% of under-predictions within one interval (%d held out)",
			function, what, mt.Observed, 100*mt.ExactShare(), 100*mt.ExactOrOverShare(), 100*mt.UnderWithinOneShare(), mt.Evaluated)
		c.mu.Unlock()
		c.log.Info("memory model: "+what, "app", a.rec.Name, "function", function, "observed", mt.Observed,
			"exact_or_over", mt.ExactOrOverShare(), "under_within_one", mt.UnderWithinOneShare())
	}
	if err := errors.Join(err1, err2); err != nil {
		c.log.Warn("encoding a memory model", "app", a.rec.Name, "function", function, "err", err)
		return
	}
	rec, err := json.Marshal(modelRecord{Model: model, Trainer: trainer, Info: info})
	if err != nil {
		return
	}
	// Saved even while the controller closes (Close waits for this, 5 s at
	// most): a model trained just before a restart is not lost.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
	defer cancel()
	fm.saveMu.Lock()
	defer fm.saveMu.Unlock()
	if info.Trainings <= fm.saved {
		return // a later training was saved already
	}
	if _, err := c.cfg.Etcd.Put(ctx, EtcdModels+modelKey(a.rec.Name, function), string(rec)); err != nil {
		c.log.Warn("saving a memory model", "app", a.rec.Name, "function", function, "err", err)
		return
	}
	fm.saved = info.Trainings
}

// modelInfo is a function's model for `hoard apps`; nil without one.
func (c *Controller) modelInfo(app, function string) *api.ModelInfo {
	c.models.mu.Lock()
	fm := c.models.m[modelKey(app, function)]
	c.models.mu.Unlock()
	if fm == nil {
		return nil
	}
	fm.mu.Lock()
	defer fm.mu.Unlock()
	info := fm.info
	info.Observed, info.Samples = fm.trainer.Observed(), fm.trainer.Samples()
	return &info
}

// forgetModels drops an application's models, here and in etcd.
func (c *Controller) forgetModels(ctx context.Context, app string) {
	c.models.mu.Lock()
	for k := range c.models.m {
		if strings.HasPrefix(k, app+"/") {
			delete(c.models.m, k)
		}
	}
	c.models.mu.Unlock()
	if _, err := c.cfg.Etcd.Delete(ctx, EtcdModels+app+"/", clientv3.WithPrefix()); err != nil {
		c.log.Warn("removing an application's memory models", "app", app, "err", err)
	}
}

// features are an invocation's features from its event (OFC §5.1.2):
// each top-level number is a numeric feature, each string or boolean a
// category, an array its length; an S3 event's object size (an object
// trigger's input) is "input.size". A larger event than
// maxEventFeatureBytes contributes its size alone.
func features(event json.RawMessage) predict.Features {
	fs := predict.Features{predict.Num("event.bytes", float64(len(event)))}
	if len(event) > maxEventFeatureBytes {
		return fs
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(event, &top) != nil {
		return fs
	}
	names := make([]string, 0, len(top))
	for k := range top {
		if k != "" && len(k) <= predict.MaxNameLen && !strings.ContainsAny(k, "\x00\n") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	var size float64
	hasSize := false
	for _, k := range names {
		if len(fs) >= predict.MaxFeatures {
			break
		}
		var v any
		if json.Unmarshal(top[k], &v) != nil {
			continue
		}
		switch x := v.(type) {
		case float64:
			fs = append(fs, predict.Num(k, x))
		case string:
			fs = append(fs, predict.Cat(k, x))
		case bool:
			fs = append(fs, predict.Cat(k, fmt.Sprint(x)))
		case []any:
			fs = append(fs, predict.Num(k+".len", float64(len(x))))
			if k == "Records" {
				size, hasSize = s3EventSize(x)
			}
		}
	}
	if hasSize && len(fs) < predict.MaxFeatures {
		fs = append(fs, predict.Num("input.size", size))
	}
	return fs
}

// s3EventSize sums the object sizes of an S3 event's records.
func s3EventSize(records []any) (float64, bool) {
	var sum float64
	found := false
	for _, r := range records {
		m, _ := r.(map[string]any)
		s3, _ := m["s3"].(map[string]any)
		obj, _ := s3["object"].(map[string]any)
		if n, ok := obj["size"].(float64); ok && n >= 0 {
			sum += n
			found = true
		}
	}
	return sum, found
}

func hasFeature(fs predict.Features, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return true
		}
	}
	return false
}
