package hostnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds a dial from inside a node whose ctx has no earlier
// deadline.
const dialTimeout = 30 * time.Second

// DialContext connects to addr from inside node's network namespace, as a
// process on that node would: an address on the node's loopback (a
// cachelet's S3 listener) is reached over that loopback, any other over
// the node's link. The connection is made from a thread that joins the
// namespace for the dial and returns to its own before it serves any
// other goroutine; the connection stays in the namespace it was made in.
// A thread that cannot return is ended with its goroutine, never reused
// (a child started from that thread with a parent-death signal, such as
// a node agent, would then get it: returning to a namespace the thread
// came from is not expected to fail).
func (n Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		c, err := n.dialLocked(ctx, network, addr)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-ctx.Done():
		go func() { // the dial ends by ctx too; close what it made
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// dialLocked dials from n's namespace on the calling thread, locked to its
// goroutine, and unlocks it only once the thread is back in its own
// namespace: otherwise the thread ends with the goroutine.
func (n Node) dialLocked(ctx context.Context, network, addr string) (net.Conn, error) {
	home, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer home.Close()
	ns, err := os.Open(filepath.Join("/run/netns", n.Name))
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer ns.Close()
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("hostnet: joining %s: %w", n.Name, err)
	}
	c, err := (&net.Dialer{Timeout: dialTimeout}).DialContext(ctx, network, addr)
	if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return c, err
}
