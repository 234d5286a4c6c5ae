package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"

	"github.com/hoard-io/hoard/internal/cachelet"
	"github.com/hoard-io/hoard/internal/loadgen"
	"github.com/hoard-io/hoard/internal/localstore"
)

// The throughput benchmark's targets, in the order they are measured.
const (
	TPBare       = "bare-http"         // a Go net/http server answering the same bytes
	TPBareProc   = "bare-http-proc"    // the same server as a process of its own
	TPRedis      = "redis"             // redis-server GET / SET
	TPMinIO      = "minio"             // MinIO direct, presigned
	TPLocal      = "hoard-local"       // hoard, read mode local: local hits of one key
	TPStrongHot  = "hoard-strong-hot"  // hoard, strong: every connection reads (writes) one key
	TPStrongMany = "hoard-strong-many" // hoard, strong: each connection its own key
)

// The operations measured.
const (
	OpGet = "get"
	OpPut = "put"
)

// ThroughputTargets lists every target.
func ThroughputTargets() []string {
	return []string{TPBare, TPBareProc, TPRedis, TPMinIO, TPLocal, TPStrongHot, TPStrongMany}
}

// ThroughputTargetDescription says what a target measures.
func ThroughputTargetDescription(t string) string {
	switch t {
	case TPBare:
		return "a bare Go net/http server in the benchmark's process answering the same bytes (GET) or reading the body (PUT): the load generator's ceiling"
	case TPBareProc:
		return "the same bare server as a process of its own (hoard bench bare-server), as hoard serve is: each request crosses to another process and back, " +
			"so this is the bare server to set the hoard targets against"
	case TPRedis:
		return "redis-server on loopback: GET of one key, SET of one key per connection"
	case TPMinIO:
		return "MinIO direct, presigned requests: GET of one object, PUT of one object per connection"
	case TPLocal:
		return "a hoard serve process with --read-mode local: GETs of one cached object (local hits, no store request), PUTs of one object per connection (through to MinIO)"
	case TPStrongHot:
		return "a hoard serve process under strong (the default): every connection GETs one cached object (each read checked with MinIO, checks shared) or PUTs one object"
	case TPStrongMany:
		return "the same hoard serve process under strong: each connection GETs (PUTs) an object of its own"
	}
	return t
}

// Defaults of ThroughputConfig.
var (
	DefaultConnections = []int{1, 4, 16, 64, 256}
	QuickConnections   = []int{1, 16}
)

const (
	// DefaultThroughputSize is the object size.
	DefaultThroughputSize = 4 << 10
	// MaxConnections bounds --connections.
	MaxConnections = 256
	// maxThroughputSize bounds --size.
	maxThroughputSize = 64 << 20
)

// ThroughputConfig configures RunThroughput.
type ThroughputConfig struct {
	// Connections are the concurrent connections per point (1 to
	// MaxConnections); default DefaultConnections (QuickConnections when
	// Quick).
	Connections []int
	// Size of each object; default DefaultThroughputSize.
	Size int64
	// Duration of each point's timed window; default 2 s (300 ms when
	// Quick). Warmup runs before it, untimed; default a quarter of it.
	Duration, Warmup time.Duration
	// Ops are OpGet and OpPut; default both.
	Ops []string
	// Targets to measure, a subset of ThroughputTargets(); default all.
	Targets []string
	Quick   bool
	// HoardBinary runs `hoard serve` for the hoard targets; default
	// $HOARD_BIN.
	HoardBinary string
	// BareBinary runs `hoard bench bare-server` for bare-http-proc;
	// default HoardBinary. `hoard bench throughput` sets its own binary,
	// so the baseline stays the same when --hoard picks another.
	BareBinary string
	// MinIOBinary: default localstore.FindBinary("minio"). RedisBinary:
	// default FindRedisServer(); when that finds none, Redis is left out
	// and the report says so.
	MinIOBinary, RedisBinary string
	TempDir                  string
	Progress                 io.Writer
	Log                      *slog.Logger
}

// ErrNoHoardBinary: the hoard targets need the hoard binary.
var ErrNoHoardBinary = errors.New("bench: the hoard targets need the hoard binary (set $HOARD_BIN or --hoard)")

// Validate checks the config and fills in the defaults. notes receives
// what was left out.
func (cfg *ThroughputConfig) Validate() (notes []string, err error) {
	if len(cfg.Connections) == 0 {
		cfg.Connections = DefaultConnections
		if cfg.Quick {
			cfg.Connections = QuickConnections
		}
	}
	for _, n := range cfg.Connections {
		if n < 1 || n > MaxConnections {
			return nil, fmt.Errorf("bench: %d connections: want 1 to %d", n, MaxConnections)
		}
	}
	if cfg.Size == 0 {
		cfg.Size = DefaultThroughputSize
	}
	if cfg.Size < 0 || cfg.Size > maxThroughputSize {
		return nil, fmt.Errorf("bench: object size %d: want 1 byte to 64 MiB", cfg.Size)
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
		if cfg.Quick {
			cfg.Duration = 300 * time.Millisecond
		}
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = cfg.Duration / 4
	}
	if cfg.Duration < 0 || cfg.Warmup < 0 {
		return nil, errors.New("bench: duration and warm-up must be positive")
	}
	if len(cfg.Ops) == 0 {
		cfg.Ops = []string{OpGet, OpPut}
	}
	for _, op := range cfg.Ops {
		if op != OpGet && op != OpPut {
			return nil, fmt.Errorf("bench: unknown operation %q (want get, put)", op)
		}
	}
	explicit := len(cfg.Targets) > 0
	if !explicit {
		cfg.Targets = ThroughputTargets()
	}
	for _, t := range cfg.Targets {
		if !slices.Contains(ThroughputTargets(), t) {
			return nil, fmt.Errorf("bench: unknown target %q (known: %s)", t, strings.Join(ThroughputTargets(), ", "))
		}
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.MinIOBinary == "" {
		if cfg.MinIOBinary, err = localstore.FindBinary(localstore.MinIOBinary); err != nil {
			return nil, err
		}
	}
	if cfg.wants(TPRedis) && cfg.RedisBinary == "" {
		bin, err := FindRedisServer()
		switch {
		case errors.Is(err, ErrRedisNotFound) && !explicit:
			cfg.Targets = slices.DeleteFunc(slices.Clone(cfg.Targets), func(t string) bool { return t == TPRedis })
			notes = append(notes, "Redis was left out: "+err.Error())
		case err != nil:
			return nil, err
		default:
			cfg.RedisBinary = bin
		}
	}
	if (cfg.wantsHoard() || cfg.wants(TPBareProc) && cfg.BareBinary == "") && cfg.HoardBinary == "" {
		cfg.HoardBinary = os.Getenv("HOARD_BIN")
		if cfg.HoardBinary == "" {
			return nil, ErrNoHoardBinary
		}
	}
	if cfg.wants(TPBareProc) && cfg.BareBinary == "" {
		cfg.BareBinary = cfg.HoardBinary
	}
	return notes, nil
}

func (cfg *ThroughputConfig) wants(t string) bool { return slices.Contains(cfg.Targets, t) }

func (cfg *ThroughputConfig) wantsHoard() bool {
	return cfg.wants(TPLocal) || cfg.wants(TPStrongHot) || cfg.wants(TPStrongMany)
}

func (cfg *ThroughputConfig) progress(format string, args ...any) {
	fmt.Fprintf(cfg.Progress, format+"\n", args...)
}

// manyKeys is how many objects the many-keys target reads: one per
// connection of the largest point.
func (cfg *ThroughputConfig) manyKeys() int { return slices.Max(cfg.Connections) }

// Keys of the run's objects.
const (
	tpHotKey = "throughput/hot"
)

func tpManyKey(i int) string               { return fmt.Sprintf("throughput/many/%d", i) }
func tpPutKey(target string, i int) string { return fmt.Sprintf("throughput/put/%s/%d", target, i) }

// RunThroughput measures ops/s, p50 and p99 of GETs and PUTs of one
// size at each connection count, for every target, in one run.
func RunThroughput(ctx context.Context, cfg ThroughputConfig) (*ThroughputReport, error) {
	notes, err := cfg.Validate()
	if err != nil {
		return nil, err
	}
	for _, n := range notes {
		cfg.progress("note: %s", n)
	}
	rep := newThroughputReport(cfg, notes)
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-throughput-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	r, err := startThroughputRig(ctx, &cfg, tmp, rep)
	if err != nil {
		return nil, err
	}
	defer r.Close()

	for _, op := range cfg.Ops {
		for _, conns := range cfg.Connections {
			for _, target := range cfg.Targets {
				ops, err := r.ops(ctx, target, op, conns)
				if err != nil {
					return nil, fmt.Errorf("bench: %s %s: %w", target, op, err)
				}
				cpu := r.serverCPU(target)
				res, err := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: conns, Warmup: cfg.Warmup, Duration: cfg.Duration,
					Window: cpu.window}, ops)
				if err != nil {
					return nil, fmt.Errorf("bench: %s %s, %d connections: %w", target, op, conns, err)
				}
				p := ThroughputPoint{Op: op, Connections: conns, Target: target, Ops: res.Ops, Rate: res.Rate,
					P50NS: res.P50.Nanoseconds(), P99NS: res.P99.Nanoseconds(), ServerCPUNS: cpu.perOp(res.Ops)}
				cfg.progress("%-3s %3d conns  %-18s %9.0f ops/s  p50 %-9s p99 %s", op, conns, target, p.Rate,
					FormatDuration(res.P50), FormatDuration(res.P99))
				rep.Points = append(rep.Points, p)
			}
		}
	}
	rep.computeRatios()
	return rep, ctx.Err()
}

// throughputRig is what a run measures against.
type throughputRig struct {
	data  []byte
	store *minio.Core
	rdb   *redis.Client
	bare  *bareServer
	// bareProc is the bare server as a process of its own.
	bareProc *bareProcess
	hoards   map[string]*hoardProcess // by read mode: local, version-check
	minio    *localstore.Server
	closes   []func()
	// clients are the HTTP clients, one per target, each keeping up to
	// MaxConnections connections alive.
	clients map[string]*http.Client
}

func (r *throughputRig) Close() {
	for i := len(r.closes) - 1; i >= 0; i-- {
		r.closes[i]()
	}
}

func startThroughputRig(ctx context.Context, cfg *ThroughputConfig, tmp string, rep *ThroughputReport) (_ *throughputRig, err error) {
	r := &throughputRig{hoards: map[string]*hoardProcess{}, clients: map[string]*http.Client{}}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	r.data = throughputData(cfg.Size)

	cfg.progress("starting MinIO (%s)", cfg.MinIOBinary)
	srv, core, err := startStore(ctx, cfg.MinIOBinary, tmp, cfg.Log)
	if err != nil {
		return nil, err
	}
	r.closes = append(r.closes, func() { srv.Close() })
	r.store, r.minio = core, srv
	keys := []string{tpHotKey}
	if cfg.wants(TPStrongMany) {
		for i := range cfg.manyKeys() {
			keys = append(keys, tpManyKey(i))
		}
	}
	for _, k := range keys {
		if _, err := core.PutObject(ctx, benchBucket, k, bytes.NewReader(r.data), cfg.Size, "", "",
			minio.PutObjectOptions{DisableMultipart: true, ContentType: "application/octet-stream"}); err != nil {
			return nil, fmt.Errorf("bench: upload %s: %w", k, err)
		}
	}
	cfg.progress("uploaded %d objects of %s", len(keys), FormatSize(cfg.Size))

	if cfg.wants(TPRedis) {
		rs, err := StartRedis(ctx, cfg.RedisBinary, filepath.Join(tmp, "redis"))
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { rs.Close() })
		rep.Machine.RedisVersion = rs.Version
		r.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr, PoolSize: MaxConnections, MinIdleConns: 1,
			DialTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second})
		r.closes = append(r.closes, func() { r.rdb.Close() })
		if err := r.rdb.Set(ctx, tpHotKey, r.data, 0).Err(); err != nil {
			return nil, fmt.Errorf("bench: redis SET: %w", err)
		}
		cfg.progress("started redis-server %s on %s", rs.Version, rs.Addr)
	}
	if cfg.wants(TPBare) {
		if r.bare, err = startBareServer(r.data); err != nil {
			return nil, err
		}
		r.closes = append(r.closes, r.bare.Close)
	}
	if cfg.wants(TPBareProc) {
		if r.bareProc, err = startBareProcess(ctx, cfg.BareBinary, cfg.Size); err != nil {
			return nil, err
		}
		r.closes = append(r.closes, r.bareProc.Close)
		cfg.progress("started %s bench bare-server on %s", cfg.BareBinary, r.bareProc.url)
	}
	budget := 4*int64(len(keys))*cfg.Size + 64<<20
	for _, mode := range []cachelet.ReadMode{cachelet.ReadLocal, cachelet.ReadVersionCheck} {
		if mode == cachelet.ReadLocal && !cfg.wants(TPLocal) || mode != cachelet.ReadLocal && !cfg.wants(TPStrongHot) && !cfg.wants(TPStrongMany) {
			continue
		}
		h, err := startHoardProcess(ctx, cfg, srv, string(mode), budget, filepath.Join(tmp, "hoard-"+string(mode)))
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, h.Close)
		r.hoards[string(mode)] = h
		cfg.progress("started hoard serve --read-mode %s on %s", mode, h.endpoint)
		// Fill its cache: the timed GETs are hits.
		hc, err := NewS3Client(h.endpoint, clientKey, clientSec, benchRegion)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if mode == cachelet.ReadLocal && k != tpHotKey {
				continue
			}
			if _, err := NewS3Getter(hc, benchBucket).Get(ctx, k); err != nil {
				return nil, fmt.Errorf("bench: fill hoard's cache with %s: %w", k, err)
			}
		}
	}
	rep.Settings.Budget = budget
	for _, t := range cfg.Targets {
		if t == TPRedis {
			continue
		}
		tr := &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        MaxConnections,
			MaxIdleConnsPerHost: MaxConnections,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
			WriteBufferSize:     64 << 10,
			ReadBufferSize:      64 << 10,
		}
		r.closes = append(r.closes, tr.CloseIdleConnections)
		r.clients[t] = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	}
	return r, nil
}

// ops makes conns workers' operations of one target: requests built (and
// presigned) once per worker, bodies read into a buffer of the worker's.
func (r *throughputRig) ops(ctx context.Context, target, op string, conns int) ([]loadgen.Op, error) {
	out := make([]loadgen.Op, conns)
	size := int64(len(r.data))
	for i := range conns {
		if target == TPRedis {
			key := tpPutKey(target, i)
			if op == OpGet {
				key = tpHotKey
			}
			out[i] = redisOp(ctx, r.rdb, op, key, r.data)
			continue
		}
		var (
			url    string
			expect string
			err    error
		)
		switch target {
		case TPBare:
			url = r.bare.url
		case TPBareProc:
			url = r.bareProc.url
		case TPMinIO:
			url, err = presign(ctx, r.store, op, r.key(target, op, i))
		case TPLocal:
			url, err = r.hoardURL(ctx, string(cachelet.ReadLocal), op, r.key(target, op, i))
		case TPStrongHot, TPStrongMany:
			url, err = r.hoardURL(ctx, string(cachelet.ReadVersionCheck), op, r.key(target, op, i))
		}
		if err != nil {
			return nil, err
		}
		if target != TPBare && target != TPBareProc && target != TPMinIO && op == OpGet {
			expect = string(cachelet.LocalHit)
		}
		if out[i], err = httpOp(ctx, r.clients[target], op, url, r.data, size, expect); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// key is the object worker i of target reads or writes.
func (r *throughputRig) key(target, op string, i int) string {
	switch {
	case op == OpGet && target == TPStrongMany:
		return tpManyKey(i)
	case op == OpGet:
		return tpHotKey
	case target == TPStrongHot:
		return tpPutKey(target, 0) // every connection writes one key
	}
	return tpPutKey(target, i)
}

// hoardURL presigns a request to the hoard process of a read mode.
func (r *throughputRig) hoardURL(ctx context.Context, mode, op, key string) (string, error) {
	h := r.hoards[mode]
	if h.core == nil {
		c, err := NewS3Client(h.endpoint, clientKey, clientSec, benchRegion)
		if err != nil {
			return "", err
		}
		h.core = c
	}
	return presign(ctx, h.core, op, key)
}

// presign returns a presigned URL for a GET or PUT of key, valid for a day.
func presign(ctx context.Context, core *minio.Core, op, key string) (string, error) {
	var (
		u   fmt.Stringer
		err error
	)
	if op == OpGet {
		u, err = core.PresignedGetObject(ctx, benchBucket, key, 24*time.Hour, nil)
	} else {
		u, err = core.PresignedPutObject(ctx, benchBucket, key, 24*time.Hour)
	}
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// httpOp makes one worker's operation: a GET whose body is read into the
// worker's buffer and counted (and whose x-hoard-read must be expect, when
// set), or a PUT of data.
func httpOp(ctx context.Context, client *http.Client, op, url string, data []byte, size int64, expect string) (loadgen.Op, error) {
	method := http.MethodGet
	if op == OpPut {
		method = http.MethodPut
	}
	base, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, min(size+1, 256<<10))
	return func(context.Context) error {
		req := base
		if op == OpPut {
			// The transport may close a body after it returns: a fresh
			// reader per request, over the same bytes.
			r := *base
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(data)), size
			req = &r
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		var n int64
		for {
			m, err := resp.Body.Read(buf)
			n += int64(m)
			if err == io.EOF {
				break
			}
			if err != nil {
				resp.Body.Close()
				return err
			}
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode != http.StatusOK:
			return fmt.Errorf("%s %s: status %d", method, url, resp.StatusCode)
		case op == OpGet && n != size:
			return fmt.Errorf("GET read %d bytes, want %d", n, size)
		case expect != "" && resp.Header.Get("X-Hoard-Read") != expect:
			return fmt.Errorf("GET answered as %q, want %q", resp.Header.Get("X-Hoard-Read"), expect)
		}
		return nil
	}, nil
}

// redisOp is one worker's GET of key or SET of data under key.
func redisOp(ctx context.Context, rdb *redis.Client, op, key string, data []byte) loadgen.Op {
	return func(context.Context) error {
		if op == OpPut {
			return rdb.Set(ctx, key, data, 0).Err()
		}
		b, err := rdb.Get(ctx, key).Bytes()
		if err == nil && len(b) != len(data) {
			err = fmt.Errorf("redis GET: %d bytes, want %d", len(b), len(data))
		}
		return err
	}
}

// bareServer is a net/http server answering every GET with the same
// bytes and every PUT by reading its body.
type bareServer struct {
	srv *http.Server
	url string
}

func startBareServer(data []byte) (*bareServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	length := fmt.Sprint(len(data))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Length", length)
		_, _ = w.Write(data)
	})
	s := &bareServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, url: "http://" + ln.Addr().String() + "/" + tpHotKey}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *bareServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// hoardProcess is a `hoard serve` child process on loopback.
type hoardProcess struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	endpoint string
	core     *minio.Core
	logPath  string
}

// startHoardProcess runs `hoard serve` in front of the store, with the
// read mode and budget, and waits until it is serving.
func startHoardProcess(ctx context.Context, cfg *ThroughputConfig, srv *localstore.Server, mode string, budget int64, dir string) (*hoardProcess, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ready := filepath.Join(dir, "ready.json")
	logPath := filepath.Join(dir, "hoard.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(cfg.HoardBinary, "serve",
		"--listen", "127.0.0.1:0", "--metrics-listen", "off", "--ready-file", ready,
		"--store-endpoint", srv.Endpoint(), "--region", benchRegion,
		"--read-mode", mode, "--budget", fmt.Sprint(budget), "--log-level", "warn")
	cmd.Env = append(os.Environ(),
		"HOARD_ACCESS_KEY="+clientKey, "HOARD_SECRET_KEY="+clientSec,
		"HOARD_STORE_ACCESS_KEY="+srv.AccessKey(), "HOARD_STORE_SECRET_KEY="+srv.SecretKey())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start hoard serve: %w", err)
	}
	h := &hoardProcess{cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() {
		_ = cmd.Wait()
		close(h.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(ready); err == nil && len(b) > 0 {
			var info struct {
				Endpoint string `json:"endpoint"`
			}
			if err := json.Unmarshal(b, &info); err == nil && info.Endpoint != "" {
				h.endpoint = info.Endpoint
				return h, nil
			}
		}
		select {
		case <-h.exited:
			return nil, fmt.Errorf("bench: hoard serve exited at start; log %s:\n%s", logPath, readTail(logPath))
		case <-ctx.Done():
			h.Close()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.Close()
			return nil, fmt.Errorf("bench: hoard serve did not get ready in 30s; log %s:\n%s", logPath, readTail(logPath))
		}
	}
}

// Close stops the process and waits for it.
func (h *hoardProcess) Close() {
	select {
	case <-h.exited:
		return
	default:
	}
	_ = h.cmd.Process.Signal(os.Interrupt)
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.exited
	}
}
