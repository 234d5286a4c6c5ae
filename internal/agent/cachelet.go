package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/admission"
	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
	"github.com/hoard-io/hoard/internal/pki"
)

// BandwidthPolicyEnv names the environment variable that, set to "off",
// starts the agent's cachelets without the bandwidth policy
// (Config.DisableBandwidthPolicy).
const BandwidthPolicyEnv = "HOARD_BANDWIDTH_POLICY"

// An instance's cachelet is configured by one document and driven over
// one API, both package control's: the agent writes the document (every
// setting, the secrets, and a fresh control token) into the cachelet's
// private directory (cacheletDir) with mode 0600, owned by the cachelet's
// uid when it has one of its own (jailed), starts `hoard serve
// --document` on it, and talks to the cachelet on the Unix socket the
// document names, with the token. Nothing secret is on the command line
// or in the cachelet's environment; the document is removed once the
// cachelet is serving.

// cacheletDocName is the document's name in the cachelet's directory.
const cacheletDocName = "cachelet.json"

// document is the instance's cachelet's configuration.
func (in *Instance) document(ep control.Endpoint, tls *control.TLSFiles) *control.Document {
	a, spec := in.agent, in.spec
	settings := spec.Cache.Settings()
	// The cachelet's Go heap follows its budget (see memory.go).
	settings.MemoryLimitOverhead = cacheconfig.DefaultMemoryOverhead
	d := &control.Document{
		Version: control.DocumentVersion,
		App:     spec.Name, ID: in.req.ID, Node: a.cfg.ID, Region: a.cfg.Region,
		Listen: "127.0.0.1:0", MetricsListen: "127.0.0.1:0", PeerListen: net.JoinHostPort(a.cfg.PeerHost, "0"),
		EtcdEndpoints: a.cfg.EtcdEndpoints,
		AccessKey:     in.req.Credentials.AccessKey, SecretKey: in.req.Credentials.SecretKey,
		PeerSecret: in.req.Credentials.PeerSecret,
		// The application's own store identity and the buckets it was
		// granted; the agent's store access is for code packages and
		// access metadata, and never leaves it.
		Store:     control.Store{Endpoint: a.cfg.StoreEndpoint, AccessKey: in.req.Store.AccessKey, SecretKey: in.req.Store.SecretKey},
		Grants:    spec.Buckets.Set(),
		NotifyURL: a.cfg.NotifyURL, NotifyToken: in.req.Credentials.PlatformToken,
		Bandwidth: !a.cfg.DisableBandwidthPolicy,
		Cache:     settings,
		Control:   ep,
		TLS:       tls,
		Disk:      in.disk,
		LogJSON:   true,
	}
	if e := in.req.Etcd; e != nil {
		d.EtcdUsername, d.EtcdPassword = e.Username, e.Password
	}
	if in.net != nil {
		d.S3ListenFD = 3 // ExtraFiles[0] (startCachelet)
	}
	if a.cfg.ControllerURL != "" {
		d.PlatformURL = a.cfg.ControllerURL
		d.PlatformToken = in.req.Credentials.PlatformToken
	}
	return d
}

// cacheletDir is the directory of the instance's cachelet's control
// socket and configuration document: the instance's directory (0700),
// or a private directory of its own under the system's temporary
// directory, which teardown removes, when the cachelet has a uid of its
// own (it cannot reach into the agent's state directory, and owns that
// one, mode 0700) or when the socket's path would be too long.
func (in *Instance) cacheletDir() (string, error) {
	p := filepath.Join(in.dir, "control.sock")
	if len(p) <= control.MaxSocketPath && in.cacheletUID == 0 {
		return in.dir, nil
	}
	dir, err := os.MkdirTemp("", "hoard-cachelet-") // mode 0700
	if err != nil {
		return "", err
	}
	in.ctlDir = dir
	if in.cacheletUID != 0 {
		if err := os.Chown(dir, in.cacheletUID, in.cacheletUID); err != nil {
			return "", err
		}
	}
	return dir, nil
}

// ControlSocket is the path of the instance's cachelet's control socket.
func (in *Instance) ControlSocket() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ctlSocket
}

// CacheletPID is the host pid of the instance's cachelet; 0 before it
// started.
func (in *Instance) CacheletPID() int {
	if in.cachelet == nil || in.cachelet.Process == nil {
		return 0
	}
	return in.cachelet.Process.Pid
}

// startCachelet starts `hoard serve` for the instance, in its sandbox
// and, jailed, as its own uid, and waits until its control API answers
// ready.
func (in *Instance) startCachelet(ctx context.Context) error {
	a := in.agent
	dir, err := in.cacheletDir()
	if err != nil {
		return err
	}
	ep := control.Endpoint{Socket: filepath.Join(dir, "control.sock"), Token: control.NewToken()}
	docPath := filepath.Join(dir, cacheletDocName)
	var keyOwner *pki.Owner
	if in.cacheletUID != 0 {
		keyOwner = &pki.Owner{UID: in.cacheletUID, GID: in.cacheletUID}
	}
	tls, err := in.cacheletTLS(dir, keyOwner)
	if err != nil {
		return err
	}
	disk, diskGID, err := in.appDisk(in.spec.Name)
	if err != nil {
		return err
	}
	if disk != nil && diskGID != 0 {
		disk.DirFD = 3 // ExtraFiles[0], or [1] after the S3 socket
		if in.net != nil {
			disk.DirFD = 4
		}
	}
	in.disk, in.diskGID = disk, diskGID
	if disk != nil && in.durable() {
		// A dead instance's undelivered writes, for this one to deliver.
		if err := in.adoptLog(disk.Dir, in.cacheletUID); err != nil {
			return err
		}
	}
	if err := control.WriteDocument(docPath, in.document(ep, tls)); err != nil {
		return fmt.Errorf("writing the cachelet's configuration: %w", err)
	}
	if in.cacheletUID != 0 {
		// Its secrets are its own: readable by its uid alone (0600).
		if err := os.Chown(docPath, in.cacheletUID, in.cacheletUID); err != nil {
			return fmt.Errorf("the cachelet's configuration: %w", err)
		}
	}
	ctl := control.NewClient(ep)
	in.mu.Lock()
	in.ctl, in.ctlSocket = ctl, ep.Socket
	in.mu.Unlock()
	cmd := exec.Command(a.cfg.HoardBin, "serve", "--document", docPath)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = in.logFile, in.logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if in.cacheletUID != 0 {
		// Not root: an unprivileged uid of its own, no groups. It binds
		// loopback ports above 1024 and is handed its S3 socket; the
		// agent, root, moves it into its cgroup and signals it.
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(in.cacheletUID), Gid: uint32(in.cacheletUID), Groups: []uint32{}}
		if diskGID != 0 {
			// Its application's disk tier group, and no other.
			cmd.SysProcAttr.Credential.Groups = []uint32{uint32(diskGID)}
		}
	}
	if in.net != nil {
		// The S3 socket in the function's network namespace.
		cmd.ExtraFiles = []*os.File{in.net.Listener()}
	}
	if disk != nil && diskGID != 0 {
		// Its disk tier, open: the path runs through the agent's
		// private directories, which its uid cannot walk.
		f, err := os.Open(disk.Dir)
		if err != nil {
			return fmt.Errorf("the disk tier: %w", err)
		}
		defer f.Close() // the child has its own copy once started
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		if in.disk.DirFD != 2+len(cmd.ExtraFiles) {
			return errors.New("the disk tier's descriptor is not the one its document names")
		}
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the cachelet: %w", err)
	}
	in.cachelet = cmd
	in.cacheletDone = make(chan struct{})
	go func() {
		err := cmd.Wait()
		close(in.cacheletDone)
		in.cacheletExited(err)
	}()
	if err := in.box.Add(cmd.Process.Pid); err != nil {
		return fmt.Errorf("moving the cachelet into its sandbox: %w", err)
	}
	if in.box.Enforced() {
		// The function, not the cachelet, is what the OOM killer should
		// take: the worker is marked preferred (startWorker), and the
		// cachelet protected where the host allows it.
		if err := in.box.ProtectFromOOM(cmd.Process.Pid); err != nil {
			a.log.Debug("cannot protect the cachelet from the OOM killer", "instance", in.req.ID, "err", err)
		}
	}
	r, err := in.waitReady(ctx, ctl)
	if err != nil {
		return err
	}
	in.ready = r
	// Read once, it has served its purpose; the secrets in it must not
	// outlive the start (the worker's home is this directory).
	if err := os.Remove(docPath); err != nil {
		return fmt.Errorf("removing the cachelet's configuration: %w", err)
	}
	if tls != nil {
		// So is the key, which the cachelet holds in memory (tls.go).
		if err := os.Remove(tls.Key); err != nil {
			return fmt.Errorf("removing the cachelet's key: %w", err)
		}
	}
	// The counters every invocation's reads are counted from.
	if s, err := ctl.Stats(ctx); err == nil {
		in.stats, in.statsOK = s, true
		in.setCounters(s)
	}
	return nil
}

// control is the client of the instance's cachelet's control API, or nil
// before the cachelet was started.
func (in *Instance) control() *control.Client {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ctl
}

// waitReady asks the cachelet's control API until it answers ready, the
// cachelet exits, or ctx ends.
func (in *Instance) waitReady(ctx context.Context, ctl *control.Client) (control.Ready, error) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		r, err := ctl.Ready(rctx)
		cancel()
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, control.ErrUnavailable) && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return control.Ready{}, fmt.Errorf("the cachelet's control API: %w", err)
		}
		select {
		case <-ctx.Done():
			return control.Ready{}, fmt.Errorf("the cachelet did not become ready: %w%s", ctx.Err(), in.logTail())
		case <-in.cacheletDone:
			return control.Ready{}, fmt.Errorf("the cachelet exited while starting%s", in.logTail())
		case <-tick.C:
		}
	}
}

// setCounters keeps the cachelet's counters for api.InstanceInfo.
func (in *Instance) setCounters(s control.Stats) {
	cc := api.CacheCounters{EvictedAgain: s.EvictedAgain, CacheBytes: s.CacheBytes, BudgetBytes: s.BudgetBytes, Erasure: s.Erasure}
	for _, r := range s.Reads {
		cc.Reads += r.Count
	}
	in.mu.Lock()
	in.cacheCounters = cc
	in.mu.Unlock()
}

// invocationReads reads the cachelet's counters once, after an
// invocation, and returns the reads since the snapshot taken after the
// previous one (or at load): the invocation's reads, and its time with
// data (api.IOTimes), and how many of its misses were not kept. Only when that snapshot is missing (a failed read)
// is the cachelet asked before the invocation too (readBefore). Called
// with invokeMu held, which guards in.stats and in.statsOK.
func (in *Instance) invocationReads(ctx context.Context) (map[string]api.ReadCount, *api.IOTimes, int64) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	after, err := in.control().Stats(ctx)
	if err != nil {
		in.agent.log.Warn("cachelet stats", "instance", in.req.ID, "err", err)
		in.statsOK = false
		return nil, nil, 0
	}
	in.setCounters(after)
	before, ok := in.stats, in.statsOK
	in.stats, in.statsOK = after, true
	if !ok {
		return nil, nil, 0
	}
	out := map[string]api.ReadCount{}
	for k, v := range after.Sub(before) {
		out[k] = api.ReadCount(v)
	}
	return out, in.agent.ioTimes(in.spec.Name, before, after), after.NotAdmitted - before.NotAdmitted
}

// ioTimes is an invocation's time with data from the cachelet's counters
// before and after it: the reads and writes as served, and the reads as
// the store would have served them, by the cost fitted to the reads the
// store served this cachelet (or, before it had any, another of the
// application's on this node), plus the writes as served (package
// admission says why). nil when no store cost is known yet.
func (a *Agent) ioTimes(app string, before, after control.Stats) *api.IOTimes {
	m, ok := after.StoreFit.Model()
	a.fitMu.Lock()
	if ok {
		if a.storeModels == nil {
			a.storeModels = map[string]admission.Model{}
		}
		a.storeModels[app] = m
	} else {
		m, ok = a.storeModels[app]
	}
	a.fitMu.Unlock()
	if !ok {
		return nil
	}
	var served time.Duration
	var reads, bytes int64
	for _, v := range after.Sub(before) {
		served += time.Duration(v.Nanos)
		reads += v.Count
		bytes += v.Bytes
	}
	writes := time.Duration(max(after.WriteNanos-before.WriteNanos, 0))
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
	return &api.IOTimes{ServedMS: ms(served + writes), StoreMS: ms(m.Cost(reads, bytes) + writes)}
}

// setAdmission tells the cachelet whether the function about to run
// keeps its misses, when that changed. A cachelet that cannot be told
// keeps what it had: caching or not, its answers are the same bytes.
// Called with invokeMu held.
func (in *Instance) setAdmission(ctx context.Context, noCache bool) {
	if noCache == in.noCache {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	if err := in.control().SetAdmit(ctx, !noCache); err != nil {
		in.agent.log.Warn("cachelet admission", "instance", in.req.ID, "err", err)
		return
	}
	in.noCache = noCache
}

// readBefore takes the snapshot invocationReads counts from, when the
// last one failed. Called with invokeMu held.
func (in *Instance) readBefore(ctx context.Context) {
	if in.statsOK {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	if s, err := in.control().Stats(ctx); err == nil {
		in.stats, in.statsOK = s, true
	}
}

// statsTimeout bounds one read of the cachelet's counters.
const statsTimeout = 5 * time.Second
