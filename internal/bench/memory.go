package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/bytesize"
	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/localstore"
)

// The memory benchmark (`hoard bench memory`): a real `hoard serve`
// process in front of a real MinIO, read and written by many clients at
// once with objects of a few MiB, a working set several times the cache's
// budget so that it evicts all the time. What it measures is the serve
// process's peak resident memory (VmHWM in /proc/PID/status: every page
// the kernel ever charged it at once, which is what a memory cgroup
// limits), set next to the budget. Each variant is a separate process
// over the same store and the same objects, run one after the other, so
// a baseline (the process with its memory bounds turned off) is measured
// in the same run.

// MemoryConfig configures RunMemory.
type MemoryConfig struct {
	// HoardBinary is the hoard executable run as `hoard serve`. Required.
	HoardBinary string
	// MinIOBinary; default localstore.FindBinary("minio").
	MinIOBinary string
	// Budget is the cache's budget (--budget); default 64 MiB.
	Budget int64
	// Readers and Writers are the concurrent clients; default 12 and 2.
	Readers, Writers int
	// MinSize and MaxSize bound the objects' sizes (uniform); default
	// 1 MiB and 8 MiB.
	MinSize, MaxSize int64
	// WorkingSet is the objects' total size; default 4 × Budget.
	WorkingSet int64
	// Ops is how many requests the clients make in all (reads and writes
	// in the proportion of Readers to Writers); default 600.
	Ops int
	// Variants are the processes measured, in order; default
	// DefaultMemoryVariants(). The first is the baseline of the ratios.
	Variants []MemoryVariant
	// TempDir holds the run's scratch data; default the system's.
	TempDir string
	// Seed makes the objects' sizes and the clients' choices repeatable.
	Seed uint64
	// Progress receives progress lines; nil discards.
	Progress io.Writer
}

// MemoryVariant is one `hoard serve` measured: the flags and environment
// added to the benchmark's own.
type MemoryVariant struct {
	Name string
	Args []string
	Env  []string
	// About says in a few words what differs.
	About string
}

// DefaultMemoryVariants are the baseline (no Go memory limit and no
// buffer pool, as hoard ran before either), the limit alone, and hoard as
// configured by default.
func DefaultMemoryVariants() []MemoryVariant {
	return []MemoryVariant{
		{Name: "unbounded", Args: []string{"--memory-overhead", "off", "--buffer-pool", "off"}, About: "no Go memory limit, no buffer pool: as hoard ran before either"},
		{Name: "limit", Args: []string{"--buffer-pool", "off"}, About: "Go memory limit at budget + overhead, no buffer pool"},
		{Name: "hoard", About: "the defaults: Go memory limit from budget + 64 MiB, buffer pool of budget/8 up to 8 MiB"},
	}
}

func (c *MemoryConfig) defaults() error {
	if c.HoardBinary == "" {
		return errors.New("bench: memory: the hoard binary is required")
	}
	if c.Budget == 0 {
		c.Budget = 64 << 20
	}
	if c.Readers == 0 {
		c.Readers = 12
	}
	if c.Writers == 0 {
		c.Writers = 2
	}
	if c.MinSize == 0 {
		c.MinSize = 1 << 20
	}
	if c.MaxSize == 0 {
		c.MaxSize = 8 << 20
	}
	if c.WorkingSet == 0 {
		c.WorkingSet = 4 * c.Budget
	}
	if c.Ops == 0 {
		c.Ops = 600
	}
	if len(c.Variants) == 0 {
		c.Variants = DefaultMemoryVariants()
	}
	if c.Budget < 0 || c.Readers < 0 || c.Writers < 0 || c.MinSize <= 0 || c.MaxSize < c.MinSize || c.WorkingSet < c.MaxSize || c.Ops < 0 {
		return fmt.Errorf("bench: memory: bad settings (budget %d, %d readers, %d writers, sizes %d-%d, working set %d, %d ops)",
			c.Budget, c.Readers, c.Writers, c.MinSize, c.MaxSize, c.WorkingSet, c.Ops)
	}
	return nil
}

// MemoryReport is what RunMemory measured.
type MemoryReport struct {
	Budget           int64
	Readers, Writers int
	MinSize, MaxSize int64
	Objects          int
	WorkingSet       int64
	Ops              int
	Runs             []MemoryRun
}

// MemoryRun is one variant's figures.
type MemoryRun struct {
	Variant MemoryVariant
	// MaxRSS is the serve process's VmHWM at the end of the load.
	MaxRSS int64
	// StartRSS is its VmRSS once it was ready, before any load.
	StartRSS int64
	// MaxAnon and MaxFile are the largest RssAnon (the Go runtime's
	// memory, mostly) and RssFile (the binary's pages) sampled every
	// 10 ms during the load.
	MaxAnon, MaxFile int64
	// Reads and Writes completed, and the bytes they moved.
	Reads, Writes int
	Bytes         int64
	Seconds       float64
	// Served is how the cachelet served the reads, from its counters.
	Served cachelet.ReadCounters
	// PoolReused and PoolAllocated count the chunks that fills and
	// uploads took from the cache's buffer pool and those they allocated.
	PoolReused, PoolAllocated int64
	// GCs counts the Go collections the process ran.
	GCs int64
}

// Over is how far the peak went past the budget.
func (r MemoryRun) Over(budget int64) int64 { return r.MaxRSS - budget }

// RunMemory runs the memory benchmark.
func RunMemory(ctx context.Context, cfg MemoryConfig) (*MemoryReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	say := func(format string, args ...any) { fmt.Fprintf(progress, "memory: "+format+"\n", args...) }
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-memory-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	binary := cfg.MinIOBinary
	if binary == "" {
		if binary, err = localstore.FindBinary(localstore.MinIOBinary); err != nil {
			return nil, err
		}
	}
	srv, err := localstore.StartMinIO(ctx, localstore.Config{
		Binary: binary, DataDir: filepath.Join(tmp, "minio", "data"), LogFile: filepath.Join(tmp, "minio.log"),
	})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	if err := makeBucket(ctx, direct); err != nil {
		return nil, err
	}

	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6d656d))
	var sizes []int64
	for total := int64(0); total < cfg.WorkingSet; {
		n := cfg.MinSize + rng.Int64N(cfg.MaxSize-cfg.MinSize+1)
		sizes = append(sizes, n)
		total += n
	}
	rep := &MemoryReport{Budget: cfg.Budget, Readers: cfg.Readers, Writers: cfg.Writers, MinSize: cfg.MinSize, MaxSize: cfg.MaxSize,
		Objects: len(sizes), Ops: cfg.Ops}
	for _, n := range sizes {
		rep.WorkingSet += n
	}
	say("%d objects of %s-%s (%d MiB in all) against a budget of %s", len(sizes), bytesize.Format(cfg.MinSize),
		bytesize.Format(cfg.MaxSize), rep.WorkingSet>>20, bytesize.Format(cfg.Budget))

	for _, v := range cfg.Variants {
		// Every variant starts from the same objects.
		if err := putObjects(ctx, direct, sizes); err != nil {
			return nil, err
		}
		run, err := runMemoryVariant(ctx, cfg, srv, v, sizes, tmp)
		if err != nil {
			return rep, fmt.Errorf("bench: memory: %s: %w", v.Name, err)
		}
		say("%s: max RSS %d MiB (budget %s), %d reads, %d writes in %.1fs", v.Name, run.MaxRSS>>20,
			bytesize.Format(cfg.Budget), run.Reads, run.Writes, run.Seconds)
		rep.Runs = append(rep.Runs, run)
	}
	return rep, nil
}

func memoryKey(i int) string { return fmt.Sprintf("mem/%04d", i) }

// putObjects writes the objects straight to the store, each filled with
// a pattern its key and size determine.
func putObjects(ctx context.Context, c *minio.Core, sizes []int64) error {
	for i, n := range sizes {
		if _, err := c.Client.PutObject(ctx, benchBucket, memoryKey(i), bytes.NewReader(pattern(i, 0, n)), n, minio.PutObjectOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// pattern is an object's bytes: gen says which write made it.
func pattern(i, gen int, n int64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(i), uint64(gen)))
	for j := 0; j+8 <= len(b); j += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// serveProc is a `hoard serve` child process.
type serveProc struct {
	cmd    *exec.Cmd
	ready  control.Ready
	exited chan struct{}
	log    string
}

func startServe(ctx context.Context, cfg MemoryConfig, srv *localstore.Server, v MemoryVariant, dir string) (*serveProc, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	readyPath := filepath.Join(dir, "ready.json")
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := append([]string{"serve",
		"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
		"--access-key", clientKey, "--store-endpoint", srv.Endpoint(), "--store-access-key", srv.AccessKey(),
		"--budget", strconv.FormatInt(cfg.Budget, 10), "--ready-file", readyPath, "--log-level", "warn",
	}, v.Args...)
	cmd := exec.Command(cfg.HoardBinary, args...)
	cmd.Env = append(append(os.Environ(), "HOARD_SECRET_KEY="+clientSec, "HOARD_STORE_SECRET_KEY="+srv.SecretKey()), v.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serveProc{cmd: cmd, exited: make(chan struct{}), log: logPath}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(readyPath); err == nil && json.Unmarshal(data, &p.ready) == nil && p.ready.Endpoint != "" {
			return p, nil
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("hoard serve exited before it was ready: %s", tailFile(logPath))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond): // polling a file another process writes
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("hoard serve not ready after 30s: %s", tailFile(logPath))
		}
	}
}

func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func tailFile(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// procMemory reads a field of /proc/PID/status in bytes (VmHWM, VmRSS).
func procMemory(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func runMemoryVariant(ctx context.Context, cfg MemoryConfig, srv *localstore.Server, v MemoryVariant, sizes []int64, tmp string) (MemoryRun, error) {
	run := MemoryRun{Variant: v}
	p, err := startServe(ctx, cfg, srv, v, filepath.Join(tmp, "serve-"+v.Name))
	if err != nil {
		return run, err
	}
	defer p.stop()
	pid := p.cmd.Process.Pid
	if run.StartRSS, err = procMemory(pid, "VmRSS"); err != nil {
		return run, err
	}
	client, err := NewS3Client(p.ready.Endpoint, clientKey, clientSec, benchRegion)
	if err != nil {
		return run, err
	}

	// Each object's generations: a reader checks that what it read is
	// one that was written.
	var (
		mu   sync.Mutex
		gens = make([]map[string]int64, len(sizes)) // ETag-free: content checksum → size
	)
	for i, n := range sizes {
		gens[i] = map[string]int64{sum(pattern(i, 0, n)): n}
	}
	writeShare := 0
	if cfg.Writers > 0 {
		writeShare = cfg.Ops * cfg.Writers / (cfg.Readers + cfg.Writers)
	}
	var (
		reads, writes atomic.Int64
		moved         atomic.Int64
		next          atomic.Int64
		wg            sync.WaitGroup
		errMu         sync.Mutex
		firstErr      error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	worker := func(id int, write bool) {
		defer wg.Done()
		r := rand.New(rand.NewPCG(cfg.Seed+uint64(id), 0x776f726b))
		gen := 0
		for lctx.Err() == nil {
			if write {
				if writes.Add(1) > int64(writeShare) {
					return
				}
			} else if next.Add(1) > int64(cfg.Ops-writeShare) {
				return
			}
			i := r.IntN(len(sizes))
			if write {
				gen++
				n := cfg.MinSize + r.Int64N(cfg.MaxSize-cfg.MinSize+1)
				data := pattern(i, id<<20|gen, n)
				mu.Lock()
				gens[i][sum(data)] = n
				mu.Unlock()
				if _, err := client.Client.PutObject(lctx, benchBucket, memoryKey(i), bytes.NewReader(data), n, minio.PutObjectOptions{}); err != nil {
					fail(fmt.Errorf("put %s: %w", memoryKey(i), err))
					cancel()
					return
				}
				moved.Add(n)
				continue
			}
			body, _, _, err := client.GetObject(lctx, benchBucket, memoryKey(i), minio.GetObjectOptions{})
			if err != nil {
				fail(fmt.Errorf("get %s: %w", memoryKey(i), err))
				cancel()
				return
			}
			data, err := io.ReadAll(body)
			body.Close()
			if err != nil {
				fail(fmt.Errorf("get %s: %w", memoryKey(i), err))
				cancel()
				return
			}
			mu.Lock()
			_, known := gens[i][sum(data)]
			mu.Unlock()
			if !known {
				fail(fmt.Errorf("get %s: %d bytes that no write wrote", memoryKey(i), len(data)))
				cancel()
				return
			}
			reads.Add(1)
			moved.Add(int64(len(data)))
		}
	}
	sampled := make(chan [2]int64)
	go func() {
		var most [2]int64
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if a, err := procMemory(pid, "RssAnon"); err == nil {
				most[0] = max(most[0], a)
			}
			if f, err := procMemory(pid, "RssFile"); err == nil {
				most[1] = max(most[1], f)
			}
			select {
			case <-t.C:
			case <-lctx.Done():
				sampled <- most
				return
			}
		}
	}()
	for w := range cfg.Writers {
		wg.Add(1)
		go worker(1000+w, true)
	}
	for r := range cfg.Readers {
		wg.Add(1)
		go worker(r, false)
	}
	wg.Wait()
	run.Seconds = time.Since(start).Seconds()
	cancel()
	most := <-sampled
	run.MaxAnon, run.MaxFile = most[0], most[1]
	run.Reads, run.Writes, run.Bytes = int(reads.Load()), min(int(writes.Load()), writeShare), moved.Load()
	if firstErr != nil {
		return run, firstErr
	}
	if run.MaxRSS, err = procMemory(pid, "VmHWM"); err != nil {
		return run, err
	}
	if run.Served, err = readCounters(ctx, p.ready.MetricsURL); err != nil {
		return run, err
	}
	m, err := scrape(ctx, p.ready.MetricsURL)
	run.PoolReused, run.PoolAllocated = int64(m["hoard_cache_pool_reused_total"]), int64(m["hoard_cache_pool_allocated_total"])
	run.GCs = int64(m["go_gc_duration_seconds_count"])
	return run, err
}

// scrape reads the unlabelled samples of a Prometheus text endpoint.
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	out := make(map[string]float64)
	for _, line := range strings.Split(string(data), "\n") {
		name, val, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, nil
}

// readCounters reads the cachelet's read counters from its /stats.
func readCounters(ctx context.Context, metricsURL string) (cachelet.ReadCounters, error) {
	u := strings.TrimSuffix(metricsURL, "/metrics") + "/stats"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return cachelet.ReadCounters{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cachelet.ReadCounters{}, err
	}
	defer resp.Body.Close()
	var c cachelet.Counters
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return cachelet.ReadCounters{}, fmt.Errorf("%s: %w", u, err)
	}
	return c.Reads, nil
}

// sum is a checksum of data, to tell the writes' contents apart.
func sum(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}
