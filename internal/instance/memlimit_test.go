package instance

import (
	"strings"
	"testing"
)

// $HOARD_MEMORY_LIMIT_OVERHEAD fills in the cachelet's memory limit
// overhead; a value in the config wins; a bad value is an error.
func TestMemoryLimitOverheadFromEnv(t *testing.T) {
	t.Setenv(MemoryLimitOverheadEnv, "")
	c := baseConfig()
	if err := c.Validate(); err != nil || c.Cachelet.MemoryLimitOverhead != 0 {
		t.Fatalf("unset: %v, overhead %d", err, c.Cachelet.MemoryLimitOverhead)
	}
	t.Setenv(MemoryLimitOverheadEnv, "48MiB")
	c = baseConfig()
	if err := c.Validate(); err != nil || c.Cachelet.MemoryLimitOverhead != 48<<20 {
		t.Fatalf("48MiB: %v, overhead %d", err, c.Cachelet.MemoryLimitOverhead)
	}
	c = baseConfig()
	c.Cachelet.MemoryLimitOverhead = 1 << 20
	if err := c.Validate(); err != nil || c.Cachelet.MemoryLimitOverhead != 1<<20 {
		t.Fatalf("set in the config: %v, overhead %d", err, c.Cachelet.MemoryLimitOverhead)
	}
	t.Setenv(MemoryLimitOverheadEnv, "lots")
	c = baseConfig()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), MemoryLimitOverheadEnv) {
		t.Fatalf("bad value: %v", err)
	}
}
