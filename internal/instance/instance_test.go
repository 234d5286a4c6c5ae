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
		"no secret":              func(c *Config) { c.Secret = nil },
		"short secret":           func(c *Config) { c.Secret = []byte("short") },
		"bad app":                func(c *Config) { c.App = "a/b" },
		"bad id":                 func(c *Config) { c.ID = "has space" },
		"advertise without port": func(c *Config) { c.PeerAdvertise = "10.0.0.7" },
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

func TestValidatePeerAdvertise(t *testing.T) {
	reg, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, tt := range []struct {
		addr string
		ok   bool
	}{
		{"10.0.0.7:7000", true},
		{"hoard-2.hoard.default.svc.cluster.local:7000", true},
		{"[fd00::7]:7000", true},
		{"localhost:65535", true},
		{"10.0.0.7", false},
		{":7000", false},
		{"10.0.0.7:0", false},
		{"10.0.0.7:65536", false},
		{"10.0.0.7:http", false},
		{"10.0.0.7:07000", false},
		{"0.0.0.0:7000", false},
		{"[::]:7000", false},
		{"http://10.0.0.7:7000", false},
		{"user@host:7000", false},
		{"host/path:7000", false},
		{"fd00::7:7000", false},
	} {
		c := baseConfig()
		c.Registry, c.Secret = reg, []byte("0123456789abcdef")
		c.PeerAdvertise = tt.addr
		if err := c.Validate(); (err == nil) != tt.ok {
			t.Errorf("PeerAdvertise %q: Validate = %v, want ok=%v", tt.addr, err, tt.ok)
		}
	}
}

// The ring publishes the advertised peer address, not the listener's, and
// by default the listener's.
func TestStartPeerAdvertise(t *testing.T) {
	reg, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	ctx := context.Background()
	for _, adv := range []string{"", "peer-proxy.example:7443"} {
		c := baseConfig()
		c.MetricsListen = "off"
		c.Registry, c.Secret = reg, []byte("0123456789abcdef")
		c.ID = "adv-test"
		c.PeerAdvertise = adv
		in, err := Start(ctx, c, nil)
		if err != nil {
			t.Fatalf("advertise %q: Start: %v", adv, err)
		}
		want := adv
		if want == "" {
			want = in.PeerListenAddr()
		}
		if in.PeerListenAddr() == "" || in.PeerAddr() != want {
			t.Errorf("advertise %q: PeerAddr %q, PeerListenAddr %q; want PeerAddr %q", adv, in.PeerAddr(), in.PeerListenAddr(), want)
		}
		if mem := in.Cluster().Members(); len(mem) != 1 || mem[0].PeerAddr != want {
			t.Errorf("advertise %q: the ring lists %+v, want peer address %q", adv, mem, want)
		}
		if addr, self := in.Cluster().Owner("b", "k"); !self || addr != want {
			t.Errorf("advertise %q: Owner = %q, %v; want %q, self", adv, addr, self, want)
		}
		if err := in.Close(ctx); err != nil {
			t.Fatalf("advertise %q: Close: %v", adv, err)
		}
	}
}
