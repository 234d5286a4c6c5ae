// Package localstore runs real S3 servers (MinIO, versitygw) as child
// processes on loopback. `hoard up` uses it to give a laptop a store without
// any setup, and the integration tests use it so that the S3 backend is
// checked against real implementations rather than a fake.
//
// A Server belongs to whoever started it: Close stops the process (SIGTERM,
// then SIGKILL after a grace period) and waits for it. On Linux the child is
// also given a parent-death signal so that a crashed parent does not leave
// servers behind.
package localstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/pki"
)

// Binary names as FindBinary knows them.
const (
	MinIOBinary     = "minio"
	VersitygwBinary = "versitygw"
)

// Defaults.
const (
	// DefaultAddr lets the kernel pick a free loopback port.
	DefaultAddr = "127.0.0.1:0"
	// DefaultAccessKey and DefaultSecretKey are the credentials used when
	// none are given; the servers only listen on loopback.
	DefaultAccessKey = "hoardadmin"
	DefaultSecretKey = "hoardadmin-secret"
	// DefaultGracePeriod is how long Close waits after SIGTERM before it
	// sends SIGKILL.
	DefaultGracePeriod = 10 * time.Second
)

// Sentinel errors.
var (
	// ErrBinaryNotFound: the server binary is not installed where
	// FindBinary looks.
	ErrBinaryNotFound = errors.New("localstore: binary not found")
	// ErrExited: the server process exited before it became ready.
	ErrExited = errors.New("localstore: server exited before it was ready")
)

// Config describes one local server. The same Config serves MinIO and
// versitygw; fields that one of them does not use are ignored (ConsoleAddr
// is MinIO only).
type Config struct {
	// Binary is the server executable. Empty: FindBinary(name).
	Binary string
	// DataDir holds the objects. Required; created if missing.
	DataDir string
	// Addr is the S3 listen address. Default DefaultAddr; a port of 0
	// picks a free one.
	Addr string
	// ConsoleAddr is MinIO's console listen address. Default: a free
	// loopback port (the browser is off, but MinIO still binds one).
	ConsoleAddr string
	// AccessKey and SecretKey are the root credentials. Defaults
	// DefaultAccessKey / DefaultSecretKey.
	AccessKey string
	SecretKey string
	// LogFile receives the server's stdout and stderr. Default:
	// <parent of DataDir>/<name>.log.
	LogFile string
	// GracePeriod between SIGTERM and SIGKILL in Close. Default
	// DefaultGracePeriod.
	GracePeriod time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Env holds extra NAME=VALUE settings for the server, such as MinIO's
	// MINIO_NOTIFY_WEBHOOK_* notification targets.
	Env []string
	// Wrapper, when set, is a command the server is run through, e.g.
	// {"ip", "netns", "exec", NAME} to run it in a network namespace.
	// Addr and ConsoleAddr then need explicit ports: a free port cannot
	// be picked from outside the namespace.
	Wrapper []string
	// TLS (MinIO only): with Cert and Key, the server serves https with
	// them (copied into its certificate directory; the endpoint is then
	// https); with CA, it trusts that bundle for the calls it makes (its
	// webhook to a controller on TLS) and so does the readiness check.
	// Default: none, plain HTTP.
	TLS pki.Files
}

// withDefaults returns a copy with every defaulted field filled in.
func (c Config) withDefaults(name string) Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.AccessKey == "" {
		c.AccessKey = DefaultAccessKey
	}
	if c.SecretKey == "" {
		c.SecretKey = DefaultSecretKey
	}
	if c.LogFile == "" && c.DataDir != "" {
		c.LogFile = filepath.Join(filepath.Dir(filepath.Clean(c.DataDir)), name+".log")
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports whether the configuration can be started.
func (c Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("localstore: DataDir is required")
	}
	if c.Addr != "" {
		if _, _, err := net.SplitHostPort(c.Addr); err != nil {
			return fmt.Errorf("localstore: Addr %q: %w", c.Addr, err)
		}
	}
	if c.ConsoleAddr != "" {
		if _, _, err := net.SplitHostPort(c.ConsoleAddr); err != nil {
			return fmt.Errorf("localstore: ConsoleAddr %q: %w", c.ConsoleAddr, err)
		}
	}
	// MinIO refuses root credentials shorter than these.
	if c.AccessKey != "" && len(c.AccessKey) < 3 {
		return errors.New("localstore: AccessKey must be at least 3 characters")
	}
	if c.SecretKey != "" && len(c.SecretKey) < 8 {
		return errors.New("localstore: SecretKey must be at least 8 characters")
	}
	if c.GracePeriod < 0 {
		return errors.New("localstore: GracePeriod must not be negative")
	}
	if len(c.Wrapper) > 0 {
		for _, a := range []string{c.Addr, c.ConsoleAddr} {
			if _, port, _ := net.SplitHostPort(a); port == "" || port == "0" {
				return errors.New("localstore: with a Wrapper, Addr and ConsoleAddr need explicit ports")
			}
		}
	}
	return nil
}

// Server is a running local S3 server.
type Server struct {
	name      string
	endpoint  string
	accessKey string
	secretKey string
	logPath   string
	grace     time.Duration
	logger    *slog.Logger

	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{} // closed when the process has been waited for
	waitErr error         // set before exited is closed

	closeOnce sync.Once
	closeErr  error
}

// Endpoint is the server's S3 URL, e.g. "http://127.0.0.1:41234".
func (s *Server) Endpoint() string { return s.endpoint }

// AccessKey is the root access key.
func (s *Server) AccessKey() string { return s.accessKey }

// SecretKey is the root secret key.
func (s *Server) SecretKey() string { return s.secretKey }

// PID is the server's process id (its CPU time is read from /proc).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// LogPath is the file that holds the server's output.
func (s *Server) LogPath() string { return s.logPath }

// Signal sends sig to the server's process: tests freeze a store with
// SIGSTOP (it keeps its connections but answers nothing) and thaw it
// with SIGCONT.
func (s *Server) Signal(sig os.Signal) error {
	return s.cmd.Process.Signal(sig)
}

// Close stops the server: SIGTERM, then SIGKILL once the grace period has
// passed, and waits for the process. Safe to call more than once and from
// several goroutines; every call returns the first call's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.stop()
	})
	return s.closeErr
}

func (s *Server) stop() error {
	defer s.logFile.Close()
	select {
	case <-s.exited:
		// Already gone (crashed, or killed with its parent's group).
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.logger.Warn("localstore: sigterm failed", "server", s.name, "err", err)
	}
	timer := time.NewTimer(s.grace)
	defer timer.Stop()
	select {
	case <-s.exited:
		return nil
	case <-timer.C:
	}
	s.logger.Warn("localstore: server ignored sigterm, killing", "server", s.name, "grace", s.grace)
	if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("localstore: kill %s: %w", s.name, err)
	}
	<-s.exited
	return nil
}

// spec is what differs between the servers start launches.
type spec struct {
	name string
	args []string
	env  []string
	// scrubEnv lists prefixes of inherited variables the server must not
	// see (its own configuration knobs, which would override ours).
	scrubEnv []string
	// ready reports whether the server answers; called until it does.
	ready func(ctx context.Context, client *http.Client, endpoint string) bool
	// tls is the readiness check's TLS, for a server on https.
	tls *tls.Config
}

// start launches the process described by sp and waits until it is ready or
// ctx ends. On failure the process is stopped and the log's tail is part of
// the error.
func start(ctx context.Context, cfg Config, binary, endpoint string, sp spec) (*Server, error) {
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("localstore: create data dir: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(cfg.LogFile), 0o755); err != nil {
		return nil, fmt.Errorf("localstore: create log dir: %w", err)
	}
	logFile, err := os.OpenFile(cfg.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("localstore: open log file: %w", err)
	}

	// Not exec.CommandContext: the server must outlive the start context
	// (hoard up passes a context that only bounds start-up).
	cmd := exec.Command(binary, sp.args...)
	if len(cfg.Wrapper) > 0 {
		cmd = exec.Command(cfg.Wrapper[0], append(append(cfg.Wrapper[1:len(cfg.Wrapper):len(cfg.Wrapper)], binary), sp.args...)...)
	}
	cmd.Env = append(scrubbedEnv(os.Environ(), sp.scrubEnv), sp.env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = cfg.DataDir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("localstore: start %s: %w", sp.name, err)
	}
	s := &Server{
		name:      sp.name,
		endpoint:  endpoint,
		accessKey: cfg.AccessKey,
		secretKey: cfg.SecretKey,
		logPath:   cfg.LogFile,
		grace:     cfg.GracePeriod,
		logger:    cfg.Logger,
		cmd:       cmd,
		logFile:   logFile,
		exited:    make(chan struct{}),
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	cfg.Logger.Info("localstore: starting", "server", sp.name, "pid", cmd.Process.Pid,
		"endpoint", endpoint, "data", cfg.DataDir, "log", cfg.LogFile)

	if err := s.waitReady(ctx, sp); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("%w\n%s log tail:\n%s", err, sp.name, tail(cfg.LogFile, 2048))
	}
	cfg.Logger.Info("localstore: ready", "server", sp.name, "endpoint", endpoint)
	return s, nil
}

func (s *Server) waitReady(ctx context.Context, sp spec) error {
	client := &http.Client{Timeout: 2 * time.Second}
	if sp.tls != nil {
		client.Transport = &http.Transport{TLSClientConfig: sp.tls}
	}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if sp.ready(ctx, client, s.endpoint) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localstore: %s not ready: %w", sp.name, ctx.Err())
		case <-s.exited:
			return fmt.Errorf("%w: %s: %v", ErrExited, sp.name, s.waitErr)
		case <-tick.C:
		}
	}
}

// resolveAddr turns a host:0 address into a concrete free port. The port
// is released before the server binds it, so another process could take it
// in between; on loopback in tests that race is rare and shows up as a
// clear start-up failure.
func resolveAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("localstore: address %q: %w", addr, err)
	}
	if port != "0" && port != "" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("localstore: find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// endpointFor is the URL clients use for a listen address. An unspecified
// host (":9000", "0.0.0.0:9000") is reached on loopback.
func endpointFor(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// tail returns at most n bytes from the end of the file at path.
func tail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := max(st.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	return strings.TrimSpace(string(b))
}

// scrubbedEnv returns env without the variables whose names start with one
// of prefixes.
func scrubbedEnv(env, prefixes []string) []string {
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, p := range prefixes {
			if strings.HasPrefix(kv, p) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}
