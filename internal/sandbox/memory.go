package sandbox

import (
	"errors"
	"fmt"
	"os"
)

// ErrNotSupported: the sandbox's cgroup (or its absence, in mode "none")
// does not offer what was asked.
var ErrNotSupported = errors.New("sandbox: not supported here")

// workingSetter and usageNotifier are what groups that can tell their
// working set, or notify usage thresholds, implement.
type workingSetter interface {
	// inactiveFile is the cgroup's inactive file-backed memory (page
	// cache the kernel reclaims first under pressure).
	inactiveFile() (int64, error)
}

type usageNotifier interface {
	// notifyUsage registers a usage threshold and returns the
	// non-blocking eventfd the kernel signals at each crossing.
	notifyUsage(threshold int64) (*os.File, error)
}

// WorkingSet is the memory the sandbox's processes hold that the kernel
// cannot simply drop: Usage less the inactive page cache (v1
// memory.stat total_inactive_file, v2 memory.stat inactive_file), the
// measure container runtimes compare with the limit. Page cache the
// processes' file I/O brought in counts in Usage, but the kernel reclaims
// it before it kills anything, so a daemon keeping processes under the
// limit should watch this. In mode "none" it is Usage (resident set
// sizes).
func (s *Sandbox) WorkingSet() (int64, error) {
	u, err := s.Usage()
	if err != nil || s.g == nil {
		return u, err
	}
	ws, ok := s.g.(workingSetter)
	if !ok {
		return u, nil
	}
	s.mu.Lock()
	inactive, err := ws.inactiveFile()
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sandbox %q: %w", s.name, err)
	}
	return max(u-inactive, 0), nil
}

// NotifyUsage asks the kernel to signal when the sandbox's memory usage
// (as Usage counts it) crosses threshold bytes, upwards or downwards. Each
// crossing sends on the returned channel, without blocking: crossings the
// receiver has not taken yet are merged into one. stop ends the
// notifications and closes the channel; call it before Delete. It works
// with cgroup v1 (memory.usage_in_bytes thresholds registered through
// cgroup.event_control); elsewhere it returns ErrNotSupported, and the
// caller polls Usage instead.
func (s *Sandbox) NotifyUsage(threshold int64) (_ <-chan struct{}, stop func(), _ error) {
	if threshold <= 0 {
		return nil, nil, fmt.Errorf("sandbox %q: usage threshold must be positive, got %d", s.name, threshold)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted {
		return nil, nil, ErrDeleted
	}
	n, ok := s.g.(usageNotifier)
	if !ok {
		return nil, nil, ErrNotSupported
	}
	f, err := n.notifyUsage(threshold)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %q: usage notification at %d bytes: %w", s.name, threshold, err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		var buf [8]byte // the eventfd's counter
		for {
			if _, err := f.Read(buf[:]); err != nil {
				return
			}
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	return ch, func() { _ = f.Close() }, nil
}
