package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// Durable writes (cache.durable_writes, ADR 0030) keep each cachelet's
// log in its application's disk tier directory on the node, under
// writelog/<instance ID>, mode 0700, the cachelet's own (package instance
// makes it). Instance IDs are the controller's (APP-VERSION-RANDOM) and
// never reused, so a cachelet never finds its own log from an earlier
// process. Instead:
//
//   - A cachelet that exits cleanly (0, after the agent's SIGTERM) has
//     delivered every write it logged: the agent removes its log.
//   - A cachelet that crashed, or was killed past its grace, leaves its
//     log with the writes it had not delivered. The next instance of the
//     application started on the node adopts it: the agent renames it to
//     the new instance's ID (and, jailed, gives it the new cachelet's
//     uid) before starting the cachelet, which replays it as its own,
//     each write guarded against newer ones (ADR 0030). One log per
//     start; a log is an orphan when no instance of the agent that is
//     not dead has its ID and no process holds its lock.
//   - Under durable_writes on, the agent does not wait for that: once the
//     dead cachelet's teardown has it gone, the agent runs a drain of its
//     log (drain.go: `hoard serve --document` with DrainLog, in the
//     instance's sandbox, as the cachelet's uid, with the application's
//     store identity), which delivers its writes, guarded, and exits;
//     an emptied log is removed. A drain that fails (the store did not
//     answer within its 2 minutes, the process failed) is run again
//     after a backoff (10 s, doubling up to 1 min; at most 5 attempts in
//     all, none starting more than 5 min after the first failure;
//     drainRetry), counted in hoard_agent_log_drains_total and logged.
//     The retries stop when an instance of the application adopts the
//     log meanwhile (it delivers the writes then), when the instance is
//     stopped (a second teardown) and when the agent shuts down. A log still not emptied stays for the next instance.
//     While a drain runs no instance adopts its log.
//   - Deleting an application unloads its instances, which remove their
//     logs; a log left as above stays until an instance of the
//     application starts on the node again, with the disk tier's
//     directory, which the agent keeps as it keeps the disk tier.
//
// Under replicated, a crashed cachelet's writes are also delivered by
// their backups once it leaves the ring; the adopted log's are then
// delivered a second time, guarded, which changes nothing.

// writelogDir is the directory of an application's logs on the node.
func writelogDir(diskDir string) string { return filepath.Join(diskDir, "writelog") }

// durable reports whether the instance's application asks for durable
// writes.
func (in *Instance) durable() bool {
	return in.spec.Cache.Settings().DurableWrites != cacheconfig.DurableOff
}

// adoptLog gives the instance the log of a dead instance of its
// application on this node, if there is one (see above). uid is the
// cachelet's own (0: it runs as the agent). Nothing to adopt is not an
// error; a log that cannot be moved is.
func (in *Instance) adoptLog(diskDir string, uid int) error {
	a := in.agent
	dir := writelogDir(diskDir)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: durable logs: %w", err)
	}
	mine := filepath.Join(dir, in.req.ID)
	if _, err := os.Lstat(mine); err == nil {
		return nil // its own already (never, with fresh IDs)
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || id == in.req.ID || !idRE.MatchString(id) || a.liveInstance(id) || a.drainingLog(id) {
			continue
		}
		old := filepath.Join(dir, id)
		if !unlocked(old) {
			continue
		}
		if err := os.Rename(old, mine); err != nil {
			return fmt.Errorf("agent: adopting durable log %s: %w", id, err)
		}
		if uid != 0 {
			if err := chownTree(mine, uid); err != nil {
				return fmt.Errorf("agent: adopting durable log %s: %w", id, err)
			}
		}
		a.log.Info("durable log of a dead instance adopted: its writes are delivered by the new one", "instance", in.req.ID, "from", id, "app", in.spec.Name)
		return nil
	}
	return nil
}

// settleLog, once the instance's cachelet is gone, removes its log when
// it exited cleanly (every logged write delivered); else, under
// durable_writes on, has the log drained now (drain.go; retried within
// drainRetry's bounds) and removes it once empty. A log the drains could
// not empty stays for the next instance of the application on the node
// to adopt.
func (in *Instance) settleLog() {
	if in.disk == nil || !in.durable() || in.cachelet == nil || in.cachelet.ProcessState == nil {
		return
	}
	dir := filepath.Join(writelogDir(in.disk.Dir), in.req.ID)
	if !in.cachelet.ProcessState.Success() {
		if in.spec.Cache.Settings().DurableWrites != cacheconfig.DurableLog || !hasRecords(dir) {
			return
		}
		if !in.drainRetrying(dir) {
			return
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		in.agent.log.Warn("removing a durable log", "instance", in.req.ID, "err", err)
	}
}

// drainRetry bounds the retries of a failed drain (settleLog): attempts
// in all, the first included; the wait before the next, first and
// doubling up to most; no attempt starts more than within after the
// first failure.
type drainRetry struct {
	attempts    int
	first, most time.Duration
	within      time.Duration
}

var defaultDrainRetry = drainRetry{attempts: 5, first: 10 * time.Second, most: time.Minute, within: 5 * time.Minute}

// drainRetrying drains the log at dir (drainLog), again after a backoff
// while it fails, within drainRetry's bounds, and reports whether it was
// drained. It stops early when an instance of the application adopted
// the log (dir is gone: adoptLog renamed it) or the agent shuts down.
func (in *Instance) drainRetrying(dir string) bool {
	a := in.agent
	p := a.drainRetry
	if p.attempts == 0 {
		p = defaultDrainRetry
	}
	var failed time.Time
	wait := p.first
	for attempt := 1; ; attempt++ {
		if !in.claimLog(dir) {
			a.countDrain("adopted")
			a.log.Info("durable log of a dead instance adopted by a new instance before its drain was retried: the new one delivers its writes", "instance", in.req.ID, "app", in.spec.Name, "attempts", attempt-1)
			return false
		}
		err := in.drainLog()
		in.drainingLog.Store(false)
		if err == nil {
			a.countDrain("ok")
			return true
		}
		a.countDrain("failed")
		if failed.IsZero() {
			failed = time.Now()
		}
		if attempt >= p.attempts || time.Since(failed)+wait > p.within {
			a.log.Warn("durable log of a dead instance not drained: the next instance of its application on this node adopts it", "instance", in.req.ID, "app", in.spec.Name, "attempts", attempt, "err", err)
			return false
		}
		a.log.Warn("durable log drain failed: retrying", "instance", in.req.ID, "app", in.spec.Name, "attempt", attempt, "retry_in", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-a.closingCh():
			t.Stop()
			a.log.Warn("durable log of a dead instance not drained: the agent is shutting down; the next instance of its application on this node adopts it", "instance", in.req.ID, "app", in.spec.Name, "attempts", attempt)
			return false
		case <-in.stopRetriesCh():
			t.Stop()
			a.log.Warn("durable log of a dead instance not drained: the instance was stopped; the next instance of its application on this node adopts it", "instance", in.req.ID, "app", in.spec.Name, "attempts", attempt)
			return false
		}
		wait = min(2*wait, p.most)
	}
}

// stopRetriesCh is closed once a second teardown asked the instance to
// stop while the first retried a drain.
func (in *Instance) stopRetriesCh() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.stopRetries == nil {
		in.stopRetries = make(chan struct{})
	}
	return in.stopRetries
}

// claimLog marks the log at dir as being drained, so that no instance
// adopts it meanwhile (adoptLog), and reports false when it is gone
// (adopted already).
func (in *Instance) claimLog(dir string) bool {
	a := in.agent
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if _, err := os.Lstat(dir); err != nil {
		return false
	}
	in.drainingLog.Store(true)
	return true
}

// drainingLog reports whether a drain of the log of instance id runs.
func (a *Agent) drainingLog(id string) bool {
	a.mu.Lock()
	in := a.instances[id]
	a.mu.Unlock()
	return in != nil && in.drainingLog.Load()
}

// countDrain counts a drain attempt's result.
func (a *Agent) countDrain(result string) {
	if a.m != nil {
		a.m.drains.WithLabelValues(result).Inc()
	}
}

// hasRecords reports whether the log at dir has a segment with anything
// in it.
func hasRecords(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && filepath.Ext(e.Name()) == ".log" && fi.Mode().IsRegular() && fi.Size() > 0 {
			return true
		}
	}
	return false
}

// liveInstance reports whether the agent has an instance of that ID
// that is not dead (a dead one may still be in its teardown).
func (a *Agent) liveInstance(id string) bool {
	a.mu.Lock()
	in := a.instances[id]
	a.mu.Unlock()
	if in == nil {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.state != api.StateDead
}

// unlocked reports whether no process holds the log at dir (its LOCK
// file's flock, package writelog); a log without one was never opened.
func unlocked(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "LOCK"), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// chownTree gives everything under dir to uid, keeping the group.
func chownTree(dir string, uid int) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, -1)
	})
}
