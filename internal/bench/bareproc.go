package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"time"
)

// throughputData is the object every throughput target serves: size
// bytes, the same in every process that makes them.
func throughputData(size int64) []byte {
	b := make([]byte, size)
	_, _ = rand.NewChaCha8([32]byte{'t', 'p'}).Read(b)
	return b
}

// bareReadyPrefix starts the line ServeBare writes once it listens.
const bareReadyPrefix = "serving on "

// ServeBare runs the bare HTTP server of `hoard bench throughput` (every
// GET answered with the run's object of size bytes, every PUT's body
// read) on a loopback port until ctx ends, as a process of its own: the
// bare-http-proc target. It writes "serving on URL" and a newline to
// ready once it listens, URL being what clients GET.
func ServeBare(ctx context.Context, size int64, ready io.Writer) error {
	if size <= 0 || size > maxThroughputSize {
		return fmt.Errorf("bench: object size %d: want 1 byte to 64 MiB", size)
	}
	s, err := startBareServer(throughputData(size))
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := fmt.Fprintf(ready, "%s%s\n", bareReadyPrefix, s.url); err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// bareProcess is `hoard bench bare-server` as a child process.
type bareProcess struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan struct{}
	url    string
}

// bareStartTimeout bounds the wait for the child to listen.
const bareStartTimeout = 30 * time.Second

// startBareProcess runs bin's `bench bare-server` for objects of size
// bytes and waits until it listens. The child ends when its standard
// input does, so it does not outlive the benchmark.
func startBareProcess(ctx context.Context, bin string, size int64) (*bareProcess, error) {
	cmd := exec.Command(bin, "bench", "bare-server", "--size", fmt.Sprint(size))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4 << 10}
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s bench bare-server: %w", bin, err)
	}
	p := &bareProcess{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReaderSize(stdout, 1024).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	timer := time.NewTimer(bareStartTimeout)
	defer timer.Stop()
	select {
	case l := <-line:
		if u, ok := strings.CutPrefix(strings.TrimSpace(l), bareReadyPrefix); ok && strings.HasPrefix(u, "http://") {
			p.url = u
			return p, nil
		}
		p.Close() // its stderr is whole once it has exited
		return nil, fmt.Errorf("bench: bench bare-server did not start: %q %s", l, strings.TrimSpace(stderr.String()))
	case <-timer.C:
		p.Close()
		return nil, errors.New("bench: bench bare-server did not listen in 30s")
	case <-ctx.Done():
		p.Close()
		return nil, ctx.Err()
	}
}

// Close ends the child (its standard input closed, then an interrupt,
// then a kill) and waits for it.
func (p *bareProcess) Close() {
	_ = p.stdin.Close()
	select {
	case <-p.exited:
		return
	case <-time.After(2 * time.Second):
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// limitedWriter keeps the first n bytes written to it.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}
