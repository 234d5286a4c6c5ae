package sim

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/hoard-io/hoard/internal/predict"
)

// The published statistics the generator reproduces (see GenConfig).
var (
	// BlobSizeQuantiles are the Azure blob trace's blob sizes at the
	// published quantiles, from the smallest (taken as 1 byte) to the
	// largest (1.78 GiB). The generator draws sizes from the log-linear
	// interpolation between them.
	BlobSizeQuantiles = []Quantile{{0, 1}, {0.25, 542}, {0.5, 5302}, {0.8, 12367}, {0.99, 1.59e6}, {1, 1.78 * (1 << 30)}}
	// ReadShare is the share of blob accesses that are reads: 77.3%.
	ReadShare = 0.773
)

// Quantile is a value at a quantile of a distribution.
type Quantile struct{ Q, Value float64 }

// The applications' shares, by how they use blobs and how often they are
// invoked. The blob trace's published shares overlap (an application that
// touches a single blob may also read it in several invocations); the
// generator makes them a partition: 50.1% read each blob in one
// invocation only, 11.8% touch a single blob, the rest read a set of
// blobs of their own, Zipf-popular, across invocations.
const (
	shareReadOnce = 0.501
	shareSingle   = 0.118
	// Invocation frequency (Shahrad et al. 2020): 45% of applications are
	// invoked less than once an hour, 81% at most once a minute.
	shareHourly = 0.45
	shareMinute = 0.81
	// Inter-arrival regularity: 10% of applications strictly periodic, 50%
	// more regular than Poisson (CoV 0.5), 40% burstier (CoV 2): 60% with
	// a CoV below 1, as ~60% of the trace's blobs.
	sharePeriodic = 0.10
	shareRegular  = 0.50
)

// GenConfig shapes a generated workload. The same config gives the same
// events.
type GenConfig struct {
	// Seed picks the workload.
	Seed uint64
	// Apps is how many applications there are. Default (0): 100.
	Apps int
	// Duration is the span of the workload. Default (0): 24 hours.
	Duration time.Duration
	// MaxEvents stops the workload early; 0: no limit.
	MaxEvents int64
	// Start is the first event's earliest time. Default: AzureBlobStart.
	Start time.Time
}

// AzureBlobStart is the first day of the blob trace, where generated
// workloads start by default.
var AzureBlobStart = time.Date(2020, 11, 30, 0, 0, 0, 0, time.UTC)

// Generator is a Source of a synthetic workload that reproduces the
// published statistics of the Azure Functions traces: invocations of
// applications with the frequencies and inter-arrival regularity of
// Shahrad et al., each reading or writing blobs with the sizes, read share
// and reuse of the 2020 blob trace. It holds a few numbers per application
// and per blob of an application's working set, never the events.
type Generator struct {
	cfg    GenConfig
	end    time.Time
	rng    *rand.Rand
	apps   []*genApp
	queue  appQueue
	events int64
	buf    []Event
	next   int
	inv    uint64
}

type blobUse uint8

const (
	useOnce blobUse = iota
	useSingle
	useShared
)

type arrivals uint8

const (
	periodic arrivals = iota
	regular
	bursty
)

type genApp struct {
	name     string
	use      blobUse
	arrivals arrivals
	gap      time.Duration // mean inter-arrival time
	duration time.Duration // mean run time
	memoryMB int
	blobs    int      // the shared working set's size
	versions []uint32 // per blob of the working set
	zipf     *rand.Zipf
	fresh    uint64 // blobs of useOnce made so far
	at       time.Time
	idx      int // in the queue
}

// NewGenerator returns the Source of cfg's workload.
func NewGenerator(cfg GenConfig) (*Generator, error) {
	if cfg.Apps == 0 {
		cfg.Apps = 100
	}
	if cfg.Duration == 0 {
		cfg.Duration = 24 * time.Hour
	}
	if cfg.Apps < 0 || cfg.Apps > 10_000_000 || cfg.Duration < 0 || cfg.MaxEvents < 0 {
		return nil, errors.New("sim: generator: apps must be in [1, 10^7], duration and events not negative")
	}
	if cfg.Start.IsZero() {
		cfg.Start = AzureBlobStart
	}
	g := &Generator{cfg: cfg, end: cfg.Start.Add(cfg.Duration), rng: rand.New(rand.NewPCG(cfg.Seed, 0x686f617264))}
	for i := range cfg.Apps {
		a := g.newApp(i)
		// A random phase: the first arrival is a uniform share of a gap
		// away, as if the application had been running before.
		a.at = cfg.Start.Add(time.Duration(g.rng.Float64() * float64(a.gap)))
		g.apps = append(g.apps, a)
		heap.Push(&g.queue, a)
	}
	return g, nil
}

func (g *Generator) newApp(i int) *genApp {
	r := g.rng
	a := &genApp{name: "app" + strconv.Itoa(i)}
	switch u := r.Float64(); {
	case u < shareReadOnce:
		a.use = useOnce
	case u < shareReadOnce+shareSingle:
		a.use, a.blobs = useSingle, 1
	default:
		a.use, a.blobs = useShared, 2+int(r.ExpFloat64()*30)
		a.zipf = rand.NewZipf(r, 1.2, 1, uint64(a.blobs-1))
	}
	a.versions = make([]uint32, a.blobs)
	// Invocations per hour, log-uniform within each band.
	var perHour float64
	switch u := r.Float64(); {
	case u < shareHourly:
		perHour = logUniform(r, 1.0/24, 1)
	case u < shareMinute:
		perHour = logUniform(r, 1, 60)
	default:
		perHour = logUniform(r, 60, 3600)
	}
	a.gap = time.Duration(float64(time.Hour) / perHour)
	switch u := r.Float64(); {
	case u < sharePeriodic:
		a.arrivals = periodic
	case u < sharePeriodic+shareRegular:
		a.arrivals = regular
	default:
		a.arrivals = bursty
	}
	// Half the functions run for less than a second on average; none
	// for more than 10 minutes.
	a.duration = min(time.Duration(math.Exp(r.NormFloat64()*1.5)*float64(time.Second)), 10*time.Minute)
	switch u := r.Float64(); {
	case u < 0.5:
		a.memoryMB = 128
	case u < 0.8:
		a.memoryMB = 256
	case u < 0.95:
		a.memoryMB = 512
	default:
		a.memoryMB = 1024
	}
	return a
}

func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
}

// gap draws the time to an application's next invocation: exactly its
// mean when periodic, else log-normal with a CoV of 0.5 or 2.
func (g *Generator) gap(a *genApp) time.Duration {
	if a.arrivals == periodic {
		return a.gap
	}
	cov := 0.5
	if a.arrivals == bursty {
		cov = 2
	}
	s2 := math.Log(1 + cov*cov)
	return time.Duration(float64(a.gap) * math.Exp(g.rng.NormFloat64()*math.Sqrt(s2)-s2/2))
}

// Next implements Source.
func (g *Generator) Next() (Event, error) {
	if g.cfg.MaxEvents > 0 && g.events >= g.cfg.MaxEvents {
		return Event{}, io.EOF
	}
	for g.next >= len(g.buf) {
		if len(g.queue) == 0 || !g.queue[0].at.Before(g.end) {
			return Event{}, io.EOF
		}
		g.invoke(g.queue[0])
		heap.Fix(&g.queue, 0)
	}
	g.events++
	g.next++
	return g.buf[g.next-1], nil
}

// invoke makes one invocation of a and its blob accesses, and schedules
// its next.
func (g *Generator) invoke(a *genApp) {
	r := g.rng
	g.buf, g.next = g.buf[:0], 0
	g.inv++
	dur := time.Duration(float64(a.duration) * math.Exp(r.NormFloat64()*0.3))
	fn := InvocationFunction(g.cfg.Seed, a.name, g.inv)
	g.buf = append(g.buf, Event{Time: a.at, Kind: Invoke, App: a.name, Function: fn, Invocation: g.inv, Duration: dur, MemoryMB: a.memoryMB})
	for n := 1 + int(r.ExpFloat64()); n > 0; n-- {
		e := Event{Time: a.at, Kind: Read, App: a.name, Invocation: g.inv, Bucket: a.name}
		if r.Float64() >= ReadShare {
			e.Kind = Write
		}
		var blob uint64
		switch a.use {
		case useOnce:
			a.fresh++
			blob = a.fresh
		case useShared:
			blob = a.zipf.Uint64()
		}
		if a.use != useOnce && e.Kind == Write {
			a.versions[blob]++
		}
		e.Key = "blob" + strconv.FormatUint(blob, 10)
		if a.use != useOnce {
			e.Version = "v" + strconv.FormatUint(uint64(a.versions[blob]), 10)
		}
		e.Size = BlobSize(g.cfg.Seed, a.name, blob)
		g.buf = append(g.buf, e)
	}
	// The first object the invocation touches is its input (or, written
	// first, its output): the event names it, so the controller knows
	// its size.
	inv := &g.buf[0]
	in := g.buf[1].Size
	inv.Peak = InvocationPeak(g.cfg.Seed, a.name, fn, g.inv, a.memoryMB, in)
	inv.Features = predict.Features{predict.Num("accesses", float64(len(g.buf)-1)), predict.Num("input.size", float64(in))}
	a.at = a.at.Add(max(g.gap(a), time.Millisecond))
}

// MaxFunctions bounds a generated application's functions: each has 1
// to MaxFunctions (InvocationFunction).
const MaxFunctions = 4

// InvocationFunction is the function an invocation of app runs in the
// workload of seed: app has 1 to MaxFunctions functions ("f0", "f1",
// ...), a hash of seed and app, and the first is the most invoked (an
// invocation runs function ⌊n·u²⌋ of n for a uniform u). Like the peaks
// it is a hash, so the workload's other events are those the generator
// made before functions were modelled.
func InvocationFunction(seed uint64, app string, invocation uint64) string {
	ha := mix64(hashString(app) ^ seed*0x9E3779B97F4A7C15 ^ 0xF0)
	n := 1 + int(ha%MaxFunctions)
	u := unit64(mix64(ha ^ invocation*0xD6E8FEB86659FD93))
	return functionNames[min(int(float64(n)*u*u), n-1)]
}

var functionNames = [MaxFunctions]string{"f0", "f1", "f2", "f3"}

func mix64(h uint64) uint64 {
	h ^= h >> 31
	h *= 0x94D049BB133111EB
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	return h ^ h>>32
}

func unit64(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// InvocationPeak is the peak memory of an invocation of app's function fn
// in the workload of seed, for memory prediction: a share of the booked
// memory of its own per function (15-50%), growing with the logarithm of
// its input's size up to 90% of the booking at 16 MiB, plus noise (σ 3
// MiB, as the prediction benchmark's), within [8 MiB, booked]. It is a
// hash of its arguments: the generator draws nothing more for it, so the
// workload's other events are those it made before peaks were modelled.
func InvocationPeak(seed uint64, app, fn string, invocation uint64, bookedMB int, input int64) int64 {
	booked := int64(bookedMB) << 20
	mix, unit := mix64, unit64
	ha := mix(hashString(app+"/"+fn) ^ seed*0x9E3779B97F4A7C15)
	base := (0.15 + 0.35*unit(ha)) * float64(booked)
	frac := min(math.Log2(1+float64(max(input, 0)))/24, 1)
	hi := mix(ha ^ invocation*0xD6E8FEB86659FD93)
	u1, u2 := max(unit(hi), 1e-12), unit(mix(hi))
	noise := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2) * 3 * (1 << 20)
	peak := int64(base + (0.9*float64(booked)-base)*frac + noise)
	return min(max(peak, 8<<20), booked)
}

// BlobSize is the size of an application's blob in the workload of seed:
// the same blob has the same size at every access.
func BlobSize(seed uint64, app string, blob uint64) int64 {
	h := hashString(app) ^ seed*0x9E3779B97F4A7C15 ^ blob*0xBF58476D1CE4E5B9
	h ^= h >> 31
	h *= 0x94D049BB133111EB
	h ^= h >> 29
	return int64(quantileValue(BlobSizeQuantiles, float64(h>>11)/(1<<53)))
}

// quantileValue interpolates log-linearly between the quantiles.
func quantileValue(qs []Quantile, u float64) float64 {
	for i := 1; i < len(qs); i++ {
		if u <= qs[i].Q {
			lo, hi := qs[i-1], qs[i]
			f := (u - lo.Q) / (hi.Q - lo.Q)
			return math.Exp(math.Log(lo.Value) + f*(math.Log(hi.Value)-math.Log(lo.Value)))
		}
	}
	return qs[len(qs)-1].Value
}

func (a *genApp) String() string { return fmt.Sprintf("%s every %s", a.name, a.gap) }

type appQueue []*genApp

func (q appQueue) Len() int { return len(q) }
func (q appQueue) Less(i, j int) bool {
	if q[i].at.Equal(q[j].at) {
		return q[i].name < q[j].name
	}
	return q[i].at.Before(q[j].at)
}
func (q appQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].idx = i; q[j].idx = j }
func (q *appQueue) Push(x any)   { a := x.(*genApp); a.idx = len(*q); *q = append(*q, a) }
func (q *appQueue) Pop() any {
	old := *q
	a := old[len(old)-1]
	*q = old[:len(old)-1]
	return a
}
