package cachelet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hoard-io/hoard/internal/cache"
	"github.com/hoard-io/hoard/internal/store"
	"github.com/hoard-io/hoard/internal/store/memstore"
)

const (
	testBucket  = "bkt"
	testBudget  = 1 << 20
	testMaxSize = 256 << 10
)

// env is a cachelet over a fresh memstore holding one bucket.
type env struct {
	t   *testing.T
	st  *memstore.Store
	c   *Cachelet
	reg *prometheus.Registry
}

// newEnv builds an env; opt, if set, adjusts the config first.
func newEnv(t *testing.T, opt func(*Config)) *env {
	t.Helper()
	st := memstore.New()
	if err := st.CreateBucket(t.Context(), testBucket, ""); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Cache: cache.Config{Budget: testBudget, MaxObjectSize: testMaxSize}}
	if opt != nil {
		opt(&cfg)
	}
	reg := prometheus.NewRegistry()
	c, err := New(cfg, st, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &env{t: t, st: st, c: c, reg: reg}
}

func readLocal(cfg *Config) { cfg.ReadMode = ReadLocal }

// object returns size bytes that differ from those of any other (key,
// version) pair, so a stale or misplaced byte shows.
func object(key string, version, size int) []byte {
	b := make([]byte, size)
	seed := fmt.Sprintf("%s@%d:", key, version)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i/len(seed))
	}
	return b
}

// storePut writes straight to the store, behind the cachelet's back.
func (e *env) storePut(key string, data []byte) store.PutResult {
	e.t.Helper()
	res, err := e.st.Put(e.t.Context(), testBucket, key, bytes.NewReader(data), int64(len(data)), store.PutOptions{})
	if err != nil {
		e.t.Fatalf("store Put(%s): %v", key, err)
	}
	return res
}

// read is one whole read through the cachelet: the bytes, the object (its
// body closed) and the error of Get or of reading the body.
func (e *env) read(key string, rng *store.ByteRange) ([]byte, *Object, error) {
	return readWith(e.t.Context(), e.c, key, rng)
}

func readWith(ctx context.Context, c *Cachelet, key string, rng *store.ByteRange) ([]byte, *Object, error) {
	obj, err := c.Get(ctx, testBucket, key, rng)
	if err != nil {
		return nil, nil, err
	}
	data, err := io.ReadAll(obj.Body)
	if cerr := obj.Body.Close(); err == nil {
		err = cerr
	}
	return data, obj, err
}

// mustRead reads key whole and checks its bytes and outcome.
func (e *env) mustRead(key string, want []byte, outcome Outcome) *Object {
	e.t.Helper()
	got, obj, err := e.read(key, nil)
	if err != nil {
		e.t.Fatalf("read %s: %v", key, err)
	}
	if !bytes.Equal(got, want) {
		e.t.Fatalf("read %s: %d bytes differ from the %d expected", key, len(got), len(want))
	}
	if obj.Outcome != outcome {
		e.t.Fatalf("read %s: outcome %s, want %s", key, obj.Outcome, outcome)
	}
	if obj.Length() != int64(len(want)) || obj.Info.Size != int64(len(want)) {
		e.t.Fatalf("read %s: Length %d, Info.Size %d, want %d", key, obj.Length(), obj.Info.Size, len(want))
	}
	return obj
}

// settle waits until every fill in flight has ended (been added, doomed or
// aborted).
func (e *env) settle() { e.c.wg.Wait() }

func (e *env) reads(o Outcome) float64 { return toFloat64(e.c.m.reads.WithLabelValues(string(o))) }
func (e *env) fills(result string) float64 {
	return toFloat64(e.c.m.fills.WithLabelValues(result))
}
func (e *env) validations(result string) float64 {
	return toFloat64(e.c.m.validations.WithLabelValues(result))
}

// wantGets checks the store's Get counts.
func (e *env) wantGets(want memstore.GetCounts) {
	e.t.Helper()
	if got := e.st.GetCounts(); got != want {
		e.t.Fatalf("store Gets = %+v, want %+v", got, want)
	}
}

// checkBudget fails if the memory tier holds more than its budget.
func (e *env) checkBudget() {
	e.t.Helper()
	s := e.c.Stats()
	if s.Bytes+s.Reserved > s.Budget || s.Bytes < 0 || s.Reserved < 0 {
		e.t.Fatalf("cache stats %+v break the budget", s)
	}
}

// toFloat64 is the value of a collector holding one counter or gauge, as
// prometheus/testutil.ToFloat64 computes it. (testutil itself pulls in a
// dependency the module does not list.)
func toFloat64(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 8)
	c.Collect(ch)
	close(ch)
	var ms []prometheus.Metric
	for m := range ch {
		ms = append(ms, m)
	}
	if len(ms) != 1 {
		panic(fmt.Sprintf("toFloat64: collector has %d metrics, want 1", len(ms)))
	}
	var pb dto.Metric
	if err := ms[0].Write(&pb); err != nil {
		panic(err)
	}
	switch {
	case pb.Counter != nil:
		return pb.Counter.GetValue()
	case pb.Gauge != nil:
		return pb.Gauge.GetValue()
	case pb.Untyped != nil:
		return pb.Untyped.GetValue()
	}
	panic("toFloat64: not a counter or gauge")
}

// gathered returns the series the registry exposes under name, as a
// scraper would see them.
func (e *env) gathered(name string) []*dto.Metric {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}
