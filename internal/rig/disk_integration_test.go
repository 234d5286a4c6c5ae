//go:build integration

package rig

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/hoard-io/hoard/internal/netshape"
)

// TestDiskGroups: with a disk tier, an application's directory on the
// node belongs to a group of its own (root:GID 02770, the GID reserved
// in groups.json) that its jailed cachelet has as its only supplementary
// group, and that is neither its function's nor its cachelet's uid; the
// agent's disk directory lists nothing to others (0711); the cachelet,
// stopped, keeps what it read there in files of that group (0640); and
// the instance started next on the node serves them as disk hits.
func TestDiskGroups(t *testing.T) {
	e := startShaped(t, netshape.Link{}, func(c *Config) { c.DiskBudget = 64 << 20 })
	e.deploy(t, testSpec)
	body := strings.Repeat("disk tier ", 10_000) // 100 kB: worth a file
	e.put(t, "data", "big.txt", body)
	rec := invoke(t, e.p.Controller, "t1", "read", map[string]any{"bucket": "data", "keys": []string{"big.txt"}})
	if !rec.OK {
		t.Fatalf("invocation: %+v", rec.Error)
	}
	in := e.p.Agent.Instance(rec.Instance)
	if in == nil {
		t.Fatalf("no instance %s", rec.Instance)
	}
	fnUID, cacheletUID := in.UIDs()
	if cacheletUID == 0 {
		t.Fatal("the cachelet is not jailed: this test needs the agent's jails")
	}
	diskDir := filepath.Join(e.cfg.Dir, "agent", "disk")
	if fi, err := os.Stat(diskDir); err != nil || fi.Mode().Perm() != 0o711 {
		t.Fatalf("%s: %v, %v; want 0711", diskDir, fi.Mode(), err)
	}
	var groups map[string]int
	raw, err := os.ReadFile(filepath.Join(diskDir, "groups.json"))
	if err != nil || json.Unmarshal(raw, &groups) != nil {
		t.Fatalf("groups.json: %v %s", err, raw)
	}
	gid := groups["t1"]
	if gid == 0 || gid == fnUID || gid == cacheletUID {
		t.Fatalf("t1's disk group %d (function uid %d, cachelet uid %d): want one of its own", gid, fnUID, cacheletUID)
	}
	appDir := filepath.Join(diskDir, "t1")
	fi, err := os.Stat(appDir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 0 || int(st.Gid) != gid || fi.Mode()&(os.ModePerm|os.ModeSetgid) != 0o770|os.ModeSetgid {
		t.Errorf("%s: owner %d:%d mode %v; want 0:%d drwxrws---", appDir, st.Uid, st.Gid, fi.Mode(), gid)
	}
	if got := procGroups(t, in.CacheletPID()); !slices.Equal(got, []int{gid}) {
		t.Errorf("the cachelet's supplementary groups %v; want [%d]", got, gid)
	}

	// Stopped, the cachelet keeps what it read in files of the group.
	if err := e.p.Agent.Stop(rec.Instance); err != nil {
		t.Fatal(err)
	}
	var files []string
	filepath.WalkDir(filepath.Join(appDir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
			fi, _ := d.Info()
			st := fi.Sys().(*syscall.Stat_t)
			if int(st.Uid) != cacheletUID || int(st.Gid) != gid || fi.Mode().Perm() != 0o640 {
				t.Errorf("%s: owner %d:%d mode %v; want %d:%d 0640", p, st.Uid, st.Gid, fi.Mode(), cacheletUID, gid)
			}
		}
		return nil
	})
	if len(files) != 1 {
		t.Fatalf("%d files in the disk tier after the stop, want 1", len(files))
	}
	again := invoke(t, e.p.Controller, "t1", "read", map[string]any{"bucket": "data", "keys": []string{"big.txt"}})
	if !again.OK || again.Instance == rec.Instance || again.Reads["disk_hit"].Count != 1 {
		t.Fatalf("the next instance (%s after %s): ok %v, reads %+v; want one disk hit", again.Instance, rec.Instance, again.OK, again.Reads)
	}
}

// procGroups returns a process's supplementary groups.
func procGroups(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "Groups:" {
			var out []int
			for _, s := range f[1:] {
				n, _ := strconv.Atoi(s)
				out = append(out, n)
			}
			return out
		}
	}
	t.Fatalf("no Groups line in /proc/%d/status", pid)
	return nil
}
