package instance

import (
	"context"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/membership/memory"
)

func baseConfig() Config {
	c := Config{AccessKey: "ak", SecretKey: "sk"}
	c.Store.Endpoint, c.Store.AccessKey, c.Store.SecretKey = "http://127.0.0.1:1", "sak", "ssk"
	c.Cachelet.Cache.Budget = 64 << 20
	return c
}

func TestValidateCooperation(t *testing.T) {
	reg, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()

	// Without a registry the cooperation fields stay unset.
	c := baseConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.App != "" || c.ID != "" || c.PeerListen != "" {
		t.Errorf("without a registry: App %q, ID %q, PeerListen %q; want all empty", c.App, c.ID, c.PeerListen)
	}

	c = baseConfig()
	c.Registry, c.Secret = reg, []byte("0123456789abcdef")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.App != "default" || !strings.HasPrefix(c.ID, "default-") || len(c.ID) != len("default-")+8 || c.PeerListen != "127.0.0.1:0" {
		t.Errorf("defaults: App %q, ID %q, PeerListen %q", c.App, c.ID, c.PeerListen)
	}

	for name, mutate := range map[string]func(*Config){
		"no secret":    func(c *Config) { c.Secret = nil },
		"short secret": func(c *Config) { c.Secret = []byte("short") },
		"bad app":      func(c *Config) { c.App = "a/b" },
		"bad id":       func(c *Config) { c.ID = "has space" },
	} {
		c := baseConfig()
		c.Registry, c.Secret = reg, []byte("0123456789abcdef")
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate succeeded", name)
		}
	}
}

// A cooperative instance that cannot join (a closed registry) releases
// what it started and reports why.
func TestStartJoinFails(t *testing.T) {
	reg, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	_ = reg.Close()
	c := baseConfig()
	c.MetricsListen = "off"
	c.Registry, c.Secret = reg, []byte("0123456789abcdef")
	in, err := Start(context.Background(), c, nil)
	if err == nil {
		_ = in.Close(context.Background())
		t.Fatal("Start succeeded with a closed registry")
	}
	if !strings.Contains(err.Error(), "closed") {
		t.Errorf("Start: %v, want a closed-registry error", err)
	}
}
