package netshape

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
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2/client"

	"github.com/hoard-io/hoard/internal/localstore"
)

// BinaryName is the toxiproxy server as `make tools` installs it into
// .tools/bin (built from github.com/Shopify/toxiproxy/v2/cmd/server at the
// version the Makefile pins).
const BinaryName = "toxiproxy-server"

// BinaryEnv overrides where FindBinary looks; the Makefile exports it.
const BinaryEnv = "HOARD_TOXIPROXY_BIN"

// Defaults.
const (
	// DefaultGracePeriod is how long Close waits after SIGTERM before it
	// sends SIGKILL.
	DefaultGracePeriod = 5 * time.Second
	// DefaultStartTimeout bounds Start when its context has no deadline.
	DefaultStartTimeout = 15 * time.Second
	// DefaultLogLevel is toxiproxy's LOG_LEVEL: "info" logs every
	// accepted connection, "warn" only trouble.
	DefaultLogLevel = "info"
)

// ErrExited: the toxiproxy process exited before its API answered.
var ErrExited = errors.New("netshape: toxiproxy exited before it was ready")

// Config describes the toxiproxy server Start runs.
type Config struct {
	// Binary is the toxiproxy server executable. Empty: FindBinary().
	Binary string
	// LogFile receives the server's output. Empty: a temporary file that
	// Close removes.
	LogFile string
	// LogLevel is toxiproxy's LOG_LEVEL. Default DefaultLogLevel.
	LogLevel string
	// GracePeriod between SIGTERM and SIGKILL in Close. Default
	// DefaultGracePeriod.
	GracePeriod time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// ListenHost is the address proxies listen on, each on a free port.
	// Default 127.0.0.1; a hostnet bridge's address puts proxies where
	// nodes in network namespaces reach them.
	ListenHost string
}

// FindBinary locates the toxiproxy server: $HOARD_TOXIPROXY_BIN, then
// localstore.FindBinary's places for "toxiproxy-server" (.tools/bin under
// the module root, beside the running executable, $PATH). The error wraps
// localstore.ErrBinaryNotFound and says how to get the binary.
func FindBinary() (string, error) {
	if p := os.Getenv(BinaryEnv); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%w: $%s=%q: %v (run `make tools` to build it)",
				localstore.ErrBinaryNotFound, BinaryEnv, p, err)
		}
		return p, nil
	}
	p, err := localstore.FindBinary(BinaryName)
	if err != nil {
		return "", fmt.Errorf("%w: %s (run `make tools`, or set $%s, or put it on $PATH)",
			localstore.ErrBinaryNotFound, BinaryName, BinaryEnv)
	}
	return p, nil
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// Server is a running toxiproxy server. It belongs to whoever started it:
// Close stops the process and with it every proxy. On Linux the process
// also gets a parent-death signal, so a crashed parent leaves nothing
// behind.
type Server struct {
	apiAddr   string
	client    *toxiproxy.Client
	cmd       *exec.Cmd
	logFile   *os.File
	logPath   string
	removeLog bool
	grace     time.Duration
	logger    *slog.Logger
	listen    string        // the host proxies listen on
	exited    chan struct{} // closed once the process has been waited for
	waitErr   error         // set before exited is closed

	mu      sync.Mutex
	proxies map[string]*Proxy
	closed  bool

	closeOnce sync.Once
	closeErr  error
}

// Validate checks the config and fills in the defaults (the binary is
// looked for by Start).
func (c *Config) Validate() error {
	if c.GracePeriod < 0 {
		return errors.New("netshape: GracePeriod must not be negative")
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.LogLevel == "" {
		c.LogLevel = DefaultLogLevel
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Start runs a toxiproxy server with its API on a free loopback port and
// returns once the API answers. ctx bounds only the start-up (default
// DefaultStartTimeout when it has no deadline): the server runs until
// Close. A missing binary fails with an error that wraps
// localstore.ErrBinaryNotFound; an API that does not come up, with the
// tail of toxiproxy's log.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin := cfg.Binary
	if bin == "" {
		var err error
		if bin, err = FindBinary(); err != nil {
			return nil, err
		}
	} else if err := checkExecutable(bin); err != nil {
		return nil, fmt.Errorf("%w: %v (run `make tools` to build %s)", localstore.ErrBinaryNotFound, err, BinaryName)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}

	var logFile *os.File
	var err error
	removeLog := false
	if cfg.LogFile == "" {
		logFile, err = os.CreateTemp("", "hoard-toxiproxy-*.log")
		removeLog = true
	} else {
		logFile, err = os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("netshape: open log file: %w", err)
	}
	// On failure the log stays, even a temporary one: the error names it.
	fail := func(err error) (*Server, error) {
		logFile.Close()
		return nil, err
	}

	// The API port is found free and then bound by toxiproxy; should
	// another process take it in between, toxiproxy keeps running without
	// an API and says so in its log: try another port.
	for attempt := 1; ; attempt++ {
		s, err := startOnce(ctx, cfg, bin, logFile, removeLog)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == 3 {
			return fail(err)
		}
		cfg.Logger.Warn("netshape: toxiproxy API port taken, retrying", "attempt", attempt)
	}
}

// errPortTaken: toxiproxy could not bind its API port.
var errPortTaken = errors.New("netshape: toxiproxy API port already in use")

func startOnce(ctx context.Context, cfg Config, bin string, logFile *os.File, removeLog bool) (*Server, error) {
	apiAddr, err := freeLoopbackAddr()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(apiAddr)
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	// Not exec.CommandContext: the server outlives the start context.
	cmd := exec.Command(bin, "-host", host, "-port", port)
	cmd.Env = append(os.Environ(), "LOG_LEVEL="+cfg.LogLevel)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("netshape: start %s: %w", bin, err)
	}
	s := &Server{
		apiAddr:   apiAddr,
		client:    toxiproxy.NewClient(apiAddr),
		cmd:       cmd,
		logFile:   logFile,
		logPath:   logFile.Name(),
		removeLog: removeLog,
		grace:     cfg.GracePeriod,
		logger:    cfg.Logger,
		listen:    cfg.ListenHost,
		exited:    make(chan struct{}),
		proxies:   make(map[string]*Proxy),
	}
	if s.listen == "" {
		s.listen = "127.0.0.1"
	}
	s.client.UserAgent = "hoard-netshape"
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	cfg.Logger.Info("netshape: starting toxiproxy", "pid", cmd.Process.Pid, "api", apiAddr, "log", s.logPath)

	if err := s.waitReady(ctx, logStart); err != nil {
		_ = s.stopProcess()
		return nil, fmt.Errorf("%w\ntoxiproxy log tail (%s):\n%s", err, s.logPath, logTail(s.logPath, logStart, 2048))
	}
	cfg.Logger.Info("netshape: toxiproxy ready", "api", apiAddr)
	return s, nil
}

// waitReady polls GET /version until it answers as toxiproxy does.
func (s *Server) waitReady(ctx context.Context, logStart int64) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s.versionAnswers(ctx, client) {
			return nil
		}
		if strings.Contains(logTail(s.logPath, logStart, 64<<10), "address already in use") {
			return errPortTaken
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netshape: toxiproxy API on %s not ready: %w", s.apiAddr, ctx.Err())
		case <-s.exited:
			return fmt.Errorf("%w: %v", ErrExited, s.waitErr)
		case <-tick.C:
		}
	}
}

func (s *Server) versionAnswers(ctx context.Context, client *http.Client) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.apiAddr+"/version", nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode == http.StatusOK && json.Unmarshal(bytes.TrimSpace(body), &v) == nil && v.Version != ""
}

// APIAddr is the host:port of toxiproxy's HTTP API.
func (s *Server) APIAddr() string { return s.apiAddr }

// LogPath is the file that holds toxiproxy's output.
func (s *Server) LogPath() string { return s.logPath }

// Shape creates a proxy called name that listens on a free port of
// Config.ListenHost (loopback by default) and forwards every connection
// to upstream, shaped by down (upstream to client: answers, GET bodies)
// and up (client to upstream: requests, PUT bodies). upstream is
// host:port or a URL such as a localstore endpoint
// ("http://127.0.0.1:9000"); the proxy's Endpoint keeps the URL's scheme.
//
// The toxiproxy client takes no context: ctx is checked before each call
// to the API (each is a loopback round trip bounded by the client's own
// 30 s timeout).
func (s *Server) Shape(ctx context.Context, name, upstream string, down, up Link) (*Proxy, error) {
	if name == "" || strings.ContainsAny(name, "/?#% ") {
		return nil, fmt.Errorf("netshape: proxy name %q: want a non-empty name without '/', '?', '#', '%%' or spaces", name)
	}
	if err := validateLinks(down, up); err != nil {
		return nil, err
	}
	scheme, addr, err := splitUpstream(upstream)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	if _, dup := s.proxies[name]; dup {
		s.mu.Unlock()
		return nil, fmt.Errorf("netshape: proxy %q already exists", name)
	}
	s.proxies[name] = nil // reserved
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		delete(s.proxies, name)
		s.mu.Unlock()
	}

	if err := ctx.Err(); err != nil {
		release()
		return nil, err
	}
	tp, err := s.client.CreateProxy(name, net.JoinHostPort(s.listen, "0"), addr)
	if err != nil {
		release()
		return nil, fmt.Errorf("netshape: create proxy %q to %s: %w", name, addr, err)
	}
	p := &Proxy{
		Name:     name,
		Addr:     tp.Listen,
		Endpoint: scheme + "://" + tp.Listen,
		Upstream: addr,
		server:   s,
		tp:       tp,
		chain:    map[string][]string{},
	}
	if err := p.apply(ctx, down, up); err != nil {
		_ = tp.Delete()
		release()
		return nil, fmt.Errorf("netshape: shape proxy %q: %w", name, err)
	}
	s.mu.Lock()
	s.proxies[name] = p
	s.mu.Unlock()
	s.logger.Info("netshape: shaped", "proxy", name, "listen", p.Addr, "upstream", addr,
		"down", down.String(), "up", up.String())
	return p, nil
}

// splitUpstream accepts host:port or scheme://host:port[/].
func splitUpstream(upstream string) (scheme, addr string, err error) {
	scheme, addr = "http", upstream
	if strings.Contains(upstream, "://") {
		u, err := url.Parse(upstream)
		if err != nil {
			return "", "", fmt.Errorf("netshape: upstream %q: %w", upstream, err)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return "", "", fmt.Errorf("netshape: upstream %q: want scheme://host:port without path, query or user", upstream)
		}
		scheme, addr = u.Scheme, u.Host
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return "", "", fmt.Errorf("netshape: upstream %q: want host:port", upstream)
	}
	return scheme, addr, nil
}

// Close stops toxiproxy (SIGTERM, then SIGKILL once the grace period has
// passed) and waits for it; every proxy goes with it. Safe to call more
// than once; every call returns the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.closeErr = s.stopProcess()
		s.logFile.Close()
		if s.removeLog {
			os.Remove(s.logPath)
		}
		s.logger.Info("netshape: toxiproxy stopped", "api", s.apiAddr)
	})
	return s.closeErr
}

// stopProcess ends the process and waits for it.
func (s *Server) stopProcess() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.logger.Warn("netshape: sigterm failed", "err", err)
	}
	timer := time.NewTimer(s.grace)
	defer timer.Stop()
	select {
	case <-s.exited:
		return nil
	case <-timer.C:
	}
	s.logger.Warn("netshape: toxiproxy ignored sigterm, killing", "grace", s.grace)
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("netshape: kill toxiproxy: %w", err)
	}
	<-s.exited
	return nil
}

// freeLoopbackAddr finds a free loopback port. It is released before
// toxiproxy binds it; Start retries if another process takes it between.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("netshape: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// logTail returns at most n bytes from the end of the file at path, not
// looking before offset from.
func logTail(path string, from, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(st.Size()-n, from, 0)
	if off > st.Size() {
		return ""
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	return strings.TrimSpace(string(b))
}
