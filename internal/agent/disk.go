package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

// The node's disk tier (package disktier, ADR 0022): with
// Config.DiskBudget set, each application gets a directory of its own
// under Config.DiskDir, which its cachelets on this node share and which
// outlives them. Jailed cachelets run as uids of their own, one per
// instance: the directory belongs to a group of the application's (a gid
// from the agent's sandbox range, kept in DiskDir/groups.json so that it
// is never given to another application or to an instance's uid, even
// after a restart), mode 02770, and each of the application's cachelets
// has that group as its only supplementary one. Another application's
// cachelets and every function lack it: they cannot list, read or write
// the directory. Unjailed cachelets run as the agent, with mode 0700.
// Durable writes keep each cachelet's log there too (durable.go).

// groupsFile records the applications' disk groups under DiskDir.
const groupsFile = "groups.json"

// loadDiskGroups reads the recorded groups and reserves their gids in the
// sandbox range. Called by New.
func (a *Agent) loadDiskGroups() error {
	a.diskGroups = map[string]int{}
	if a.cfg.DiskBudget <= 0 {
		return nil
	}
	if err := os.MkdirAll(a.cfg.DiskDir, 0o711); err != nil {
		return fmt.Errorf("agent: disk tier: %w", err)
	}
	_ = os.Chmod(a.cfg.DiskDir, 0o711) // traverse only: no listing of applications
	b, err := os.ReadFile(filepath.Join(a.cfg.DiskDir, groupsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent: disk tier: %w", err)
	}
	if err := json.Unmarshal(b, &a.diskGroups); err != nil {
		return fmt.Errorf("agent: disk tier: %s: %w", groupsFile, err)
	}
	for _, gid := range a.diskGroups {
		a.uids[gid] = true
	}
	return nil
}

// appDisk returns the disk setting of app's cachelets on this node and
// the group they share it with (0 when they run as the agent), making
// the directory on first use. Nil when the agent has no disk tier; an
// application asking for durable writes (their log lives there) cannot
// be loaded then.
func (in *Instance) appDisk(app string) (*control.Disk, int, error) {
	a := in.agent
	if a.cfg.DiskBudget <= 0 || in.spec.Cache.NoDisk {
		if m := in.spec.Cache.Settings().DurableWrites; m != cacheconfig.DurableOff {
			return nil, 0, fmt.Errorf("agent: %s asks for durable_writes %s, whose log lives on the node's disk tier; node %s has none (hoard agent --disk-budget)", app, m, a.cfg.ID)
		}
		return nil, 0, nil
	}
	if !idRE.MatchString(app) {
		return nil, 0, fmt.Errorf("agent: disk tier: application name %q is not a directory name", app)
	}
	dir := filepath.Join(a.cfg.DiskDir, app)
	d := &control.Disk{Dir: dir, Budget: a.cfg.DiskBudget}
	if b := int64(in.spec.Cache.DiskBudget); b > 0 {
		d.Budget = min(b, d.Budget) // the application's cap
	}
	if in.cacheletUID == 0 {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, 0, fmt.Errorf("agent: disk tier: %w", err)
		}
		return d, 0, nil
	}
	gid, err := a.diskGroup(app)
	if err != nil {
		return nil, 0, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("agent: disk tier: %w", err)
	}
	if err := os.Chown(dir, 0, gid); err != nil {
		return nil, 0, fmt.Errorf("agent: disk tier: %w", err)
	}
	if err := os.Chmod(dir, 0o770|os.ModeSetgid); err != nil {
		return nil, 0, fmt.Errorf("agent: disk tier: %w", err)
	}
	d.Group = true
	return d, gid, nil
}

// diskGroup returns app's group, taking one from the sandbox range and
// recording it the first time.
func (a *Agent) diskGroup(app string) (int, error) {
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if gid, ok := a.diskGroups[app]; ok {
		return gid, nil
	}
	gid, err := a.takeUID()
	if err != nil {
		return 0, fmt.Errorf("agent: disk tier group: %w", err)
	}
	a.diskGroups[app] = gid
	b, _ := json.Marshal(a.diskGroups)
	if err := control.WriteFileAtomic(filepath.Join(a.cfg.DiskDir, groupsFile), b, 0o600); err != nil {
		delete(a.diskGroups, app)
		a.releaseUID(gid)
		return 0, fmt.Errorf("agent: disk tier group: %w", err)
	}
	return gid, nil
}
