package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/rig"
	"github.com/hoard-io/hoard/internal/ring"
	"github.com/hoard-io/hoard/internal/store"
	s3store "github.com/hoard-io/hoard/internal/store/s3"
)

var refOFCRouting = Reference{Paper: "OFC", Figure: "§6.5 (request routing)", Section: "§6.5", Citation: CiteOFC}

func localityExperiment() Experiment {
	return Experiment{
		Name:       "locality",
		Title:      "Routing to the data: invocations sent to the instance holding their input, against the most recently used one",
		Reproduces: []Reference{refOFCRouting},
		Quick:      Options{Iterations: 2, Sizes: []int64{2 << 20}},
		Full:       Options{Iterations: 6, Sizes: []int64{3 << 20}},
		Run:        runLocalityExperiment,
	}
}

// LocalityMethod says what the locality experiment measures.
const LocalityMethod = "The word-count example's count function (one input object, counted, a small result written) runs on two warm " +
	"instances whose caches (16 MiB each) hold half of its eight inputs each but not all of them, the store behind the faast link. " +
	"Each round invokes it once per input, in a shuffled order (the same in both runs), one at a time, after a warm-up round. " +
	"With routing to the data the controller sends each invocation to the instance whose cachelet owns its input; without it " +
	"(controller.Config.DisableDataRouting, a platform of its own started the same way) to the most recently used idle one, " +
	"as routing by load alone does when nothing is busy."

func runLocalityExperiment(ctx context.Context, o Options) (*Result, error) {
	started := time.Now()
	size := int64(2 << 20)
	if len(o.Sizes) > 0 && o.Sizes[0] > 0 {
		size = o.Sizes[0]
	}
	rounds := max(o.Iterations, 1)
	say := func(format string, args ...any) { fmt.Fprintf(o.Env.progress(), "locality: "+format+"\n", args...) }
	type arm struct {
		name              string
		off               bool
		exec              []float64
		owner, hits, runs int
		link              string
	}
	arms := []*arm{{name: "routing to the data"}, {name: "most recently used (load alone)", off: true}}
	for _, am := range arms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		r, err := startRig(ctx, o.Env, "faast", func(c *rig.Config) { c.DisableDataRouting = am.off })
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer r.Close()
			am.link = r.link
			app, err := r.deploy(ctx, "wordcount", func(s *appspec.Spec) {
				s.Name, s.KeepAlive, s.MaxInstances = "wc-locality", appspec.Duration(time.Hour), 2
				s.Cache.Budget, s.Cache.Shared = 16<<20, false
			})
			if err != nil {
				return err
			}
			st, err := s3store.New(s3store.Config{Endpoint: r.minioURL, AccessKey: rigStoreAccessKey, SecretKey: rigStoreSecretKey}, nil)
			if err != nil {
				return err
			}
			const bucket = "wordcount"
			_ = st.CreateBucket(ctx, bucket, "")
			// Two warm instances: two invocations at once.
			seed := []string{"locality/seed-0", "locality/seed-1"}
			text := wordText(size)
			for _, k := range seed {
				if _, err := st.Put(ctx, bucket, k, bytes.NewReader(text), int64(len(text)), store.PutOptions{}); err != nil {
					return err
				}
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, k := range seed {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = countOnce(ctx, r, app, bucket, k)
				}()
			}
			wg.Wait()
			var ids []string
			for _, a := range r.p.Controller.Apps() {
				if a.Name == app {
					for _, in := range a.Instances {
						ids = append(ids, in.ID)
					}
				}
			}
			if len(ids) != 2 {
				return fmt.Errorf("%d instances warm, want 2 (%v)", len(ids), errs)
			}
			// Eight inputs, four owned by each instance.
			rg, err := ring.New(ring.Config{}, ids)
			if err != nil {
				return err
			}
			var keys []string
			per := map[string]int{}
			for n := 0; len(keys) < 8; n++ {
				k := fmt.Sprintf("locality/in-%d.txt", n)
				if o := rg.Owner(bucket, k); per[o] < 4 {
					per[o]++
					keys = append(keys, k)
				}
			}
			for _, k := range keys {
				if _, err := st.Put(ctx, bucket, k, bytes.NewReader(text), int64(len(text)), store.PutOptions{}); err != nil {
					return err
				}
			}
			rnd := rand.New(rand.NewPCG(7, 7))
			for round := 0; round <= rounds; round++ {
				order := slices.Clone(keys)
				rnd.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
				for _, k := range order {
					rec, err := countOnce(ctx, r, app, bucket, k)
					if err != nil {
						return err
					}
					if round == 0 {
						continue // warm-up
					}
					am.exec = append(am.exec, rec.ExecMS)
					am.runs++
					if rec.Instance == rg.Owner(bucket, k) {
						am.owner++
					}
					if rec.Reads["local_hit"].Count > 0 {
						am.hits++
					}
				}
			}
			return nil
		}()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", am.name, err)
		}
		slices.Sort(am.exec)
		say("%s: median %.1f ms, %d/%d on the input's owner, %d local hits", am.name, am.exec[len(am.exec)/2], am.owner, am.runs, am.hits)
	}
	on, off := arms[0], arms[1]
	med := func(a *arm) float64 { return a.exec[len(a.exec)/2] }
	share := func(n, d int) float64 { return 100 * float64(n) / float64(max(d, 1)) }
	res := &Result{Experiment: "locality", Title: localityExperiment().Title, Reproduces: []Reference{refOFCRouting},
		Status: StatusOK, Quick: o.Quick, StartedAt: started, Machine: DescribeMachine(), Method: LocalityMethod,
		Settings: RunSettings{Link: on.link, ObjectSizes: []int64{size}, Iterations: []Count{{What: "rounds of 8 invocations", N: rounds}},
			Other: []Setting{{Name: "instances", Value: "2 warm, 16 MiB cache each"}}},
		Tables: []Table{{ID: "locality", Title: "Count of one input object, by routing",
			Columns: []string{"routing", "median exec (ms)", "p90 exec (ms)", "on the input's owner", "local hits"},
			Rows: [][]string{
				{on.name, fmt.Sprintf("%.1f", med(on)), fmt.Sprintf("%.1f", on.exec[len(on.exec)*9/10]), fmt.Sprintf("%.0f%%", share(on.owner, on.runs)), fmt.Sprintf("%.0f%%", share(on.hits, on.runs))},
				{off.name, fmt.Sprintf("%.1f", med(off)), fmt.Sprintf("%.1f", off.exec[len(off.exec)*9/10]), fmt.Sprintf("%.0f%%", share(off.owner, off.runs)), fmt.Sprintf("%.0f%%", share(off.hits, off.runs))},
			}}},
	}
	res.Rows = append(res.Rows,
		Compare("invocations run on their input's owner", "%", nil, F(share(on.owner, on.runs)), HigherIsBetter, 0, "OFC §6.5 (no figure)",
			fmt.Sprintf("%.0f%% without routing to the data, same run", share(off.owner, off.runs))),
		Compare("median execution time, routed to the data / most recently used", "x", nil, F(med(on)/med(off)), LowerIsBetter, 0, "OFC §6.5 (no figure)",
			fmt.Sprintf("%.1f ms against %.1f ms; local hits %.0f%% against %.0f%%", med(on), med(off), share(on.hits, on.runs), share(off.hits, off.runs))))
	res.Seconds = time.Since(started).Seconds()
	return res, nil
}

// countOnce invokes count on one input and returns its record.
func countOnce(ctx context.Context, r *benchRig, app, bucket, key string) (*api.Invocation, error) {
	ev, _ := json.Marshal(map[string]string{"bucket": bucket, "key": key})
	rec, err := r.p.Controller.Invoke(ctx, app, "count", ev, "bench")
	if err != nil {
		return nil, err
	}
	if !rec.OK {
		return nil, fmt.Errorf("count %s: %+v\n%s", key, rec.Error, rec.Log)
	}
	return rec, nil
}

// wordText is n bytes of words.
func wordText(n int64) []byte {
	words := []string{"serverless ", "cache ", "memory ", "hoard ", "object ", "store ", "function ", "data "}
	var b bytes.Buffer
	for i := 0; int64(b.Len()) < n; i++ {
		b.WriteString(words[(i*7+i/3)%len(words)])
	}
	return b.Bytes()[:n]
}
