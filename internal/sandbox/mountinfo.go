package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"slices"
	"strconv"
	"strings"
)

// mount is one line of /proc/self/mountinfo, the parts detection needs.
type mount struct {
	root   string   // the mounted directory inside its filesystem ("/" or e.g. "/docker/ID")
	point  string   // where it is mounted
	fstype string   // "cgroup", "cgroup2", ...
	opts   []string // super options: for v1 cgroups the controllers ("memory", "name=systemd")
}

// parseMountinfo reads /proc/PID/mountinfo (proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	(1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
func parseMountinfo(r io.Reader) ([]mount, error) {
	var out []mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 6 || len(g) < 3 {
			return nil, fmt.Errorf("mountinfo: bad line %q", line)
		}
		out = append(out, mount{
			root:   unescapeMount(f[3]),
			point:  unescapeMount(f[4]),
			fstype: g[0],
			opts:   strings.Split(g[2], ","),
		})
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes ("\040" for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findV1Memory returns the cgroup v1 mount holding the memory controller.
func findV1Memory(ms []mount) (mount, bool) {
	for _, m := range ms {
		if m.fstype == "cgroup" && slices.Contains(m.opts, "memory") {
			return m, true
		}
	}
	return mount{}, false
}

// findV2 returns the cgroup2 mounts, /sys/fs/cgroup first.
func findV2(ms []mount) []mount {
	var out []mount
	for _, m := range ms {
		if m.fstype == "cgroup2" {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b mount) int {
		return boolInt(b.point == "/sys/fs/cgroup") - boolInt(a.point == "/sys/fs/cgroup")
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// relativeTo turns a cgroup path from /proc/self/cgroup into a path below
// a mount of that hierarchy whose root is mountRoot: "/" unless the mount
// shows only a subtree (a container without a cgroup namespace).
func relativeTo(mountRoot, cg string) (string, error) {
	cg = path.Clean("/" + cg)
	mountRoot = path.Clean("/" + mountRoot)
	if mountRoot == "/" {
		return cg, nil
	}
	if cg == mountRoot {
		return "/", nil
	}
	if rest, ok := strings.CutPrefix(cg, mountRoot+"/"); ok {
		return "/" + rest, nil
	}
	return "", fmt.Errorf("own cgroup %s is outside the mounted subtree %s", cg, mountRoot)
}
