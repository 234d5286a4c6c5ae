package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/etcdembed"
	"github.com/hoard-io/hoard/internal/localstore"
	"github.com/hoard-io/hoard/internal/netshape"
	"github.com/hoard-io/hoard/internal/rig"
)

// benchRig is the platform on one machine for the experiments that run
// applications: MinIO behind a shaped link (netshape), an embedded etcd,
// a controller and a node agent in this process, instances whose
// cachelets are the running hoard binary.
type benchRig struct {
	p    *rig.Platform
	link string // the preset's description, for RunSettings.Link
	// minioURL is MinIO's own endpoint (no shaping); storeURL is where
	// the platform's cachelets reach it (through the shaped link).
	minioURL, storeURL string
	tmp                string
	root               string
	closes             []func()
}

// The rig's store credentials.
const (
	rigStoreAccessKey = "benchstore"
	rigStoreSecretKey = "benchstore-secret"
)

// startRig starts the platform with the store behind the named netshape
// preset ("local": unshaped).
func startRig(ctx context.Context, env Env, preset string, opts ...func(*rig.Config)) (_ *benchRig, err error) {
	if env.ModuleRoot == "" {
		return nil, errors.New("the repository root (for examples/) is unknown")
	}
	log := env.Log
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	r := &benchRig{root: env.ModuleRoot}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.tmp, err = os.MkdirTemp(env.TempDir, "hoard-bench-platform-"); err != nil {
		return nil, err
	}
	r.closes = append(r.closes, func() { os.RemoveAll(r.tmp) })
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	minio, err := localstore.StartMinIO(sctx, localstore.Config{Binary: env.MinIOBinary, DataDir: filepath.Join(r.tmp, "minio"),
		Addr: "127.0.0.1:0", AccessKey: rigStoreAccessKey, SecretKey: rigStoreSecretKey, Logger: log})
	if err != nil {
		return nil, err
	}
	r.closes = append(r.closes, func() { minio.Close() })
	endpoint := minio.Endpoint()
	ps, err := netshape.LookupPreset(preset)
	if err != nil {
		return nil, err
	}
	r.link = preset + " (" + ps.Store.String() + ")"
	if ps.Store.Shaped() {
		shaper, err := netshape.Start(sctx, netshape.Config{Logger: log, LogFile: filepath.Join(r.tmp, "toxiproxy.log")})
		if err != nil {
			return nil, err
		}
		r.closes = append(r.closes, func() { shaper.Close() })
		proxy, err := shaper.Shape(sctx, "store", endpoint, ps.Store, ps.Store)
		if err != nil {
			return nil, err
		}
		endpoint = proxy.Endpoint
	} else {
		r.link = LinkLoopback
	}
	etcd, err := etcdembed.Start(sctx, etcdembed.Config{Dir: r.tmp, Logger: log})
	if err != nil {
		return nil, err
	}
	r.closes = append(r.closes, etcd.Close)
	r.minioURL, r.storeURL = minio.Endpoint(), endpoint
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	rcfg := rig.Config{
		Controller: true, ControllerListener: ln, Agent: true, Dir: r.tmp,
		EtcdEndpoints: etcd.Endpoints(), StoreEndpoint: endpoint, StoreAccessKey: rigStoreAccessKey, StoreSecretKey: rigStoreSecretKey,
		ControllerToken: "bench-controller-token", AgentToken: "bench-agent-token", StoreIdentities: "minio",
		// The experiments compare functions reading the store directly
		// (the store-direct baselines) with functions reading through
		// hoard; a jailed function reaches only its cachelet, so both run
		// unjailed. What the jail costs is measured on its own
		// (BenchmarkJail, docs/benchmarks.md).
		Unjailed: true,
	}
	for _, o := range opts {
		o(&rcfg)
	}
	r.p, err = rig.Start(sctx, rcfg, log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	r.closes = append(r.closes, r.p.Close)
	return r, nil
}

// Close stops everything, in reverse order of start.
func (r *benchRig) Close() {
	for i := len(r.closes) - 1; i >= 0; i-- {
		r.closes[i]()
	}
}

// deploy deploys examples/example under its spec, changed by edit (and
// renamed when edit sets a new name), and returns the application's name.
func (r *benchRig) deploy(ctx context.Context, example string, edit func(*appspec.Spec)) (string, error) {
	dir := filepath.Join(r.tmp, "apps", example+"-"+randSuffix())
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(r.root, "examples", example))); err != nil {
		return "", err
	}
	raw, err := os.ReadFile(filepath.Join(dir, appspec.FileName))
	if err != nil {
		return "", err
	}
	spec, err := appspec.Parse(raw)
	if err != nil {
		return "", err
	}
	if edit != nil {
		edit(spec)
	}
	if raw, err = spec.Marshal(); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, appspec.FileName), raw, 0o644); err != nil {
		return "", err
	}
	pkg, err := appspec.Pack(dir)
	if err != nil {
		return "", err
	}
	if _, err := r.p.Controller.Deploy(ctx, pkg.Data); err != nil {
		return "", err
	}
	return pkg.Spec.Name, nil
}

func randSuffix() string { return fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff) }

// invoke runs a function and returns its record; a function error is an
// error.
func (r *benchRig) invoke(ctx context.Context, app, fn string, event any) (*invocation, error) {
	ev, _ := json.Marshal(event)
	rec, err := r.p.Controller.Invoke(ctx, app, fn, ev, "bench")
	if err != nil {
		return nil, err
	}
	if !rec.OK {
		return nil, fmt.Errorf("%s/%s: %s: %s\n%s", app, fn, rec.Error.Type, rec.Error.Message, rec.Log)
	}
	out := &invocation{total: time.Duration(rec.TotalMS * float64(time.Millisecond)), exec: time.Duration(rec.ExecMS * float64(time.Millisecond)), cold: rec.Cold, reads: map[string]int64{}, served: map[string]api.ReadCount{}}
	for k, v := range rec.Reads {
		out.reads[k], out.served[k] = v.Count, v
	}
	return out, nil
}

type invocation struct {
	total, exec time.Duration
	cold        bool
	reads       map[string]int64 // counts by access type
	// served is the reads by access type with their bytes and the time
	// the cachelet took to serve them.
	served map[string]api.ReadCount
}
