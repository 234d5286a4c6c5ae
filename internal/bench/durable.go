package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/hoard-io/hoard/internal/localstore"
)

// DurableConfig configures `hoard bench durable`: the kill loop of
// TestDurableWritesSurviveKill, for longer. A `hoard serve` cachelet in
// front of MinIO takes a write and read load and is killed (SIGKILL)
// every KillEvery, restarted on the same disk directory each time; at
// the end the store is compared with what was acknowledged.
type DurableConfig struct {
	HoardBinary, MinIOBinary string
	// Consistency is the cachelet's setting; default "owner".
	Consistency string
	// Durable turns --durable-writes on. Default false: the variant
	// that shows what background persistence loses.
	Durable bool
	// Duration of the load; default 5 minutes. KillEvery: default 10 s.
	Duration, KillEvery time.Duration
	// Keys written; default 48, by Keys/3 writers.
	Keys    int
	TempDir string
	// Progress receives progress lines; nil discards.
	Progress io.Writer
	Log      *slog.Logger
}

func (c *DurableConfig) defaults() error {
	if c.HoardBinary == "" {
		c.HoardBinary = os.Getenv("HOARD_BIN")
	}
	if c.HoardBinary == "" {
		return errors.New("bench durable: the hoard binary is required (HOARD_BIN)")
	}
	if c.Consistency == "" {
		c.Consistency = "owner"
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.KillEvery <= 0 {
		c.KillEvery = 10 * time.Second
	}
	if c.Keys < 3 {
		c.Keys = 48
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	return nil
}

// DurableReport is what one kill loop found.
type DurableReport struct {
	Consistency string `json:"consistency"`
	Durable     bool   `json:"durable"`
	Kills       int    `json:"kills"`
	Acked       int64  `json:"acked"`
	Failed      int64  `json:"failed"` // while the cachelet was down or dying: may or may not have landed
	Reads       int64  `json:"reads"`
	// Missing: keys whose newest acknowledged write the store lacks at
	// the end. Stale: reads older than a write acknowledged before they
	// began. Wrong: reads (or store objects) whose bytes no write of the
	// key wrote.
	Missing, Stale, Wrong int64
}

func (r *DurableReport) String() string {
	mode := "memory (background persistence)"
	if r.Durable {
		mode = "durable writes"
	}
	return fmt.Sprintf("%s, %s: %d kills; %d writes acknowledged, %d failed while down; %d reads; acknowledged writes missing from the store: %d; stale reads: %d; wrong bytes: %d",
		r.Consistency, mode, r.Kills, r.Acked, r.Failed, r.Reads, r.Missing, r.Stale, r.Wrong)
}

// durableValue is an object the reader can check: its key, its
// sequence number and a SHA-256 of its random body.
func durableValue(key string, seq int64, rnd *rand.Rand) []byte {
	body := make([]byte, 512+rnd.IntN(8<<10))
	for i := range body {
		body[i] = byte(rnd.Uint32())
	}
	sum := sha256.Sum256(body)
	return append([]byte(fmt.Sprintf("%s %d %s\n", key, seq, hex.EncodeToString(sum[:]))), body...)
}

// durableCheck returns v's sequence number, or an error when v is not an
// intact value of key.
func durableCheck(key string, v []byte) (int64, error) {
	nl := bytes.IndexByte(v, '\n')
	if nl < 0 {
		return 0, errors.New("no header")
	}
	var k, sum string
	var seq int64
	if _, err := fmt.Sscanf(string(v[:nl]), "%s %d %s", &k, &seq, &sum); err != nil || k != key {
		return 0, fmt.Errorf("header %q is not %s's", v[:min(nl, 80)], key)
	}
	if s := sha256.Sum256(v[nl+1:]); hex.EncodeToString(s[:]) != sum {
		return seq, errors.New("body fails its SHA-256")
	}
	return seq, nil
}

// RunDurable runs one kill loop.
func RunDurable(ctx context.Context, cfg DurableConfig) (*DurableReport, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(cfg.TempDir, "hoard-bench-durable-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	srv, err := localstore.StartMinIO(ctx, localstore.Config{Binary: cfg.MinIOBinary, DataDir: filepath.Join(tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: "benchdurable", SecretKey: "benchdurable-secret", Logger: cfg.Log})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	direct, err := NewS3Client(srv.Endpoint(), srv.AccessKey(), srv.SecretKey(), benchRegion)
	if err != nil {
		return nil, err
	}
	const bucket = "durable"
	if err := direct.MakeBucket(ctx, bucket, minio.MakeBucketOptions{}); err != nil {
		return nil, err
	}
	type keyState struct {
		mu    sync.Mutex
		next  int64
		acked atomic.Int64
	}
	keys := make([]string, cfg.Keys)
	state := make([]*keyState, cfg.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("out/k%03d", i)
		state[i] = &keyState{next: 1}
	}
	rep := &DurableReport{Consistency: cfg.Consistency, Durable: cfg.Durable}
	var cur atomic.Pointer[minio.Core]
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range cfg.Keys / 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(w), 16))
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				c := cur.Load()
				if c == nil {
					time.Sleep(5 * time.Millisecond) // the cachelet is restarting
					continue
				}
				i := w*3 + n%3
				ks := state[i]
				ks.mu.Lock()
				seq := ks.next
				ks.next++
				v := durableValue(keys[i], seq, rnd)
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_, err := c.PutObject(octx, bucket, keys[i], bytes.NewReader(v), int64(len(v)), "", "", minio.PutObjectOptions{})
				cancel()
				if err == nil {
					ks.acked.Store(seq)
					atomic.AddInt64(&rep.Acked, 1)
				} else {
					atomic.AddInt64(&rep.Failed, 1)
				}
				ks.mu.Unlock()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			c := cur.Load()
			if c == nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			i := n % cfg.Keys
			floor := state[i].acked.Load()
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			body, _, _, err := c.GetObject(octx, bucket, keys[i], minio.GetObjectOptions{})
			var v []byte
			if err == nil {
				v, err = io.ReadAll(body)
				body.Close()
			}
			cancel()
			if err != nil {
				continue
			}
			atomic.AddInt64(&rep.Reads, 1)
			seq, err := durableCheck(keys[i], v)
			switch {
			case err != nil:
				atomic.AddInt64(&rep.Wrong, 1)
			case seq < floor:
				atomic.AddInt64(&rep.Stale, 1)
			}
		}
	}()

	args := []string{"--consistency", cfg.Consistency, "--disk-dir", filepath.Join(tmp, "disk"), "--disk-budget", "256MiB", "--id", "durable-0"}
	if cfg.Durable {
		args = append(args, "--durable-writes")
	}
	mcfg := MemoryConfig{HoardBinary: cfg.HoardBinary, Budget: 256 << 20}
	start := func(i int) (*serveProc, error) {
		return startServe(ctx, mcfg, srv, MemoryVariant{Args: args}, filepath.Join(tmp, fmt.Sprintf("run-%d", i)))
	}
	began := time.Now()
	var loopErr error
	for i := 0; time.Since(began) < cfg.Duration; i++ {
		p, err := start(i)
		if err != nil {
			loopErr = err
			break
		}
		c, err := NewS3Client(p.ready.Endpoint, clientKey, clientSec, benchRegion)
		if err != nil {
			p.stop()
			loopErr = err
			break
		}
		cur.Store(c)
		select {
		case <-time.After(cfg.KillEvery):
		case <-ctx.Done():
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		cur.Store(nil)
		<-p.exited
		rep.Kills++
		fmt.Fprintf(cfg.Progress, "kill %d at %v: %d acknowledged so far\n", rep.Kills, time.Since(began).Round(time.Second), atomic.LoadInt64(&rep.Acked))
		if ctx.Err() != nil {
			loopErr = ctx.Err()
			break
		}
	}
	close(stop)
	wg.Wait()
	if loopErr != nil {
		return rep, loopErr
	}
	// Once more without load; a clean stop delivers what it holds.
	p, err := start(rep.Kills + 1)
	if err != nil {
		return rep, err
	}
	p.stop()
	for i, key := range keys {
		acked := state[i].acked.Load()
		if acked == 0 {
			continue
		}
		body, _, _, err := direct.GetObject(ctx, bucket, key, minio.GetObjectOptions{})
		var v []byte
		if err == nil {
			v, err = io.ReadAll(body)
			body.Close()
		}
		seq, cerr := durableCheck(key, v)
		switch {
		case err == nil && cerr != nil:
			rep.Wrong++
		case err != nil || seq < acked:
			rep.Missing++
		}
	}
	return rep, nil
}
