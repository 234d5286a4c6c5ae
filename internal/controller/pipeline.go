package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/store"
)

// stageEvent is what each stage's function receives.
type stageEvent struct {
	Input    json.RawMessage            `json:"input"`
	Args     map[string]any             `json:"args"`
	Results  map[string]json.RawMessage `json:"results"`
	Pipeline pipelineInfo               `json:"pipeline"`
}

type pipelineInfo struct {
	Name         string            `json:"name"`
	RunID        string            `json:"run_id"`
	Stage        string            `json:"stage"`
	Intermediate *appspec.Location `json:"intermediate,omitempty"`
}

// RunPipeline runs a pipeline to its end: each stage starts once the
// stages it waits for have succeeded, independent stages run at once, and
// a failed stage stops the stages after it. When the run ends, its
// intermediate objects are dropped from every instance's cachelet (and
// deleted from the store with delete_intermediate).
func (c *Controller) RunPipeline(ctx context.Context, appName, name string, input json.RawMessage, trigger string) (*api.PipelineRun, error) {
	a, err := c.app(appName)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	p := a.spec.Pipelines[name]
	c.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("%w: application %s has no pipeline %q", ErrNotFound, appName, name)
	}
	if len(input) == 0 {
		input = json.RawMessage("{}")
	}
	if !json.Valid(input) {
		return nil, fmt.Errorf("the pipeline's input is not valid JSON")
	}
	start := c.clk.Now()
	run := &api.PipelineRun{App: appName, Pipeline: name, RunID: randHex(8), Stages: map[string]*api.Invocation{}}
	if p.Intermediate != nil {
		run.Intermediate = &appspec.Location{Bucket: p.Intermediate.Bucket, Prefix: p.Intermediate.Prefix + run.RunID + "/"}
	}
	var mu sync.Mutex
	results := map[string]json.RawMessage{}
	done := map[string]bool{}
	failed := ""
	var wg sync.WaitGroup
	var launch func()
	launch = func() { // called with mu held
		if failed != "" {
			return
		}
		for _, st := range p.Stages {
			if done[st.Name] || run.Stages[st.Name] != nil {
				continue
			}
			ready := true
			for _, dep := range st.After {
				ready = ready && done[dep]
			}
			if !ready {
				continue
			}
			ev, _ := json.Marshal(stageEvent{Input: input, Args: st.Args, Results: copyResults(results),
				Pipeline: pipelineInfo{Name: name, RunID: run.RunID, Stage: st.Name, Intermediate: run.Intermediate}})
			run.Stages[st.Name] = &api.Invocation{Function: st.Function} // placeholder: launched
			wg.Add(1)
			go func(st *appspec.Stage) {
				defer wg.Done()
				rec, err := c.Invoke(ctx, appName, st.Function, ev, "pipeline")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					run.Stages[st.Name] = &api.Invocation{Function: st.Function, Error: &api.ErrorInfo{Type: "NotRun", Message: err.Error()}}
					if failed == "" {
						failed = fmt.Sprintf("stage %s: %v", st.Name, err)
					}
				case !rec.OK:
					run.Stages[st.Name] = rec
					if failed == "" {
						failed = fmt.Sprintf("stage %s failed: %s: %s", st.Name, rec.Error.Type, rec.Error.Message)
					}
				default:
					run.Stages[st.Name] = rec
					results[st.Name] = rec.Result
					done[st.Name] = true
					launch()
				}
			}(st)
		}
	}
	mu.Lock()
	launch()
	mu.Unlock()
	wg.Wait()
	for _, st := range p.Stages { // stages never launched
		if run.Stages[st.Name] == nil {
			run.Stages[st.Name] = &api.Invocation{Function: st.Function, Error: &api.ErrorInfo{Type: "NotRun", Message: "an earlier stage failed"}}
		}
	}
	run.OK, run.Error = failed == "", failed
	if run.Intermediate != nil {
		run.Dropped, run.Deleted = c.cleanIntermediate(context.WithoutCancel(ctx), a, p, run.Intermediate)
	}
	run.TotalMS = ms(c.clk.Now().Sub(start))
	result := "ok"
	if !run.OK {
		result = "error"
	}
	c.m.pipelines.WithLabelValues(appName, name, result).Inc()
	c.log.Info("pipeline run ended", "app", appName, "pipeline", name, "run", run.RunID, "ok", run.OK,
		"took", c.clk.Now().Sub(start).Round(time.Millisecond), "dropped", run.Dropped, "deleted", run.Deleted)
	return run, nil
}

func copyResults(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// cleanIntermediate drops a run's intermediate objects from every
// instance's cachelet, and deletes them from the store when asked.
func (c *Controller) cleanIntermediate(ctx context.Context, a *app, p *appspec.Pipeline, loc *appspec.Location) (dropped, deleted int) {
	c.mu.Lock()
	list := make([]*inst, 0, len(a.instances))
	for _, in := range a.instances {
		list = append(list, in)
	}
	c.mu.Unlock()
	for _, in := range list {
		n, err := c.agents.at(in.agentURL).Drop(ctx, in.id, api.DropRequest{Bucket: loc.Bucket, Prefix: loc.Prefix})
		if err != nil {
			c.log.Warn("dropping intermediate objects", "instance", in.id, "err", err)
			continue
		}
		dropped += n
	}
	c.m.dropped.WithLabelValues(a.rec.Name).Add(float64(dropped))
	if !p.DeleteIntermediate {
		return dropped, 0
	}
	opts := store.ListOptions{Prefix: loc.Prefix}
	for {
		page, err := c.cfg.Store.List(ctx, loc.Bucket, opts)
		if err != nil {
			c.log.Warn("listing intermediate objects", "bucket", loc.Bucket, "prefix", loc.Prefix, "err", err)
			return dropped, deleted
		}
		keys := make([]string, 0, len(page.Objects))
		for _, o := range page.Objects {
			keys = append(keys, o.Key)
		}
		if len(keys) > 0 {
			failed, err := c.cfg.Store.DeleteMany(ctx, loc.Bucket, keys)
			if err != nil {
				c.log.Warn("deleting intermediate objects", "bucket", loc.Bucket, "err", err)
				return dropped, deleted
			}
			deleted += len(keys) - len(failed)
		}
		if !page.IsTruncated {
			return dropped, deleted
		}
		opts.ContinuationToken = page.NextContinuationToken
	}
}
