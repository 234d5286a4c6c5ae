package instance

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/hoard-io/hoard/internal/bytesize"
)

// MemoryLimitOverheadEnv names the environment variable that, set to a
// size ("48MiB", or bytes), has the cachelet keep the Go runtime's soft
// memory limit at its cache budget plus that much, following the budget
// as it changes (cachelet.Config.MemoryLimitOverhead). The platform's node
// agent sets it for the `hoard serve` of each instance, whose memory
// cgroup holds the function too: the cachelet's heap must not balloon
// past what it caches.
const MemoryLimitOverheadEnv = "HOARD_MEMORY_LIMIT_OVERHEAD"

// memoryLimitOverheadFromEnv reads MemoryLimitOverheadEnv; 0 when unset.
func memoryLimitOverheadFromEnv() (int64, error) {
	v := strings.TrimSpace(os.Getenv(MemoryLimitOverheadEnv))
	if v == "" {
		return 0, nil
	}
	n, err := bytesize.Parse(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("instance: $%s=%q: want a size such as 48MiB", MemoryLimitOverheadEnv, v)
	}
	return n, nil
}

// residentFileBytes is how much of this process's resident memory is
// file-backed (RssFile in /proc/self/status: the binary's pages), which
// the Go runtime's memory limit does not count; 0 where unknown.
func residentFileBytes() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "RssFile:"); ok {
			if fields := strings.Fields(rest); len(fields) > 0 {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}

// DefaultBudget is the memory tier's default size: a quarter of the memory
// this process may use — its cgroup's limit (v2 or v1) where one is set,
// else the machine's — so the function sharing the instance keeps the rest.
func DefaultBudget() int64 {
	limit := memoryLimit()
	b := limit / 4
	if b < 64<<20 {
		b = 64 << 20
	}
	return b
}

// memoryLimit reads the cgroup memory limit, falling back to MemTotal.
func memoryLimit() int64 {
	total := memTotal()
	for _, p := range []string{
		"/sys/fs/cgroup/memory.max",                   // v2
		"/sys/fs/cgroup/memory/memory.limit_in_bytes", // v1
	} {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(data))
		if s == "max" {
			continue
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && (total == 0 || n < total) {
			return n
		}
	}
	if total == 0 {
		return 1 << 30
	}
	return total
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			fields := strings.Fields(rest)
			if len(fields) > 0 {
				if kb, err := strconv.ParseInt(fields[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
