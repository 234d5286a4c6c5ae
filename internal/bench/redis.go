package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrRedisNotFound: no redis-server binary was found.
var ErrRedisNotFound = errors.New("redis-server not found on $PATH or in /usr/bin (run `make redis` to install it)")

// FindRedisServer locates redis-server: $PATH, then /usr/bin and
// /usr/local/bin.
func FindRedisServer() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/local/bin/redis-server"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", ErrRedisNotFound
}

// RedisServer is a redis-server child process on loopback, without
// persistence.
type RedisServer struct {
	Addr    string
	Version string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// StartRedis runs binary on a free loopback port with dir as its working
// directory, and waits until it answers PING.
func StartRedis(ctx context.Context, binary, dir string) (*RedisServer, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	logPath := filepath.Join(dir, "redis.log")
	cmd := exec.Command(binary,
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--protected-mode", "no",
		"--proto-max-bulk-len", "1gb",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
	)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start redis-server: %w", err)
	}
	s := &RedisServer{Addr: addr, cmd: cmd, exited: make(chan struct{}), logPath: logPath}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	client := NewRedisClient(addr)
	defer client.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := client.Ping(pctx).Err()
		cancel()
		if err == nil {
			break
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("bench: redis-server exited at start; log %s:\n%s", logPath, readTail(logPath))
		case <-ctx.Done():
			s.Close()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("bench: redis-server on %s did not answer PING: %w", addr, err)
		}
	}
	if info, err := client.Info(ctx, "server").Result(); err == nil {
		for line := range strings.SplitSeq(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				s.Version = v
			}
		}
	}
	return s, nil
}

// Close stops the server and waits for it.
func (s *RedisServer) Close() error {
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	return nil
}

func readTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}
