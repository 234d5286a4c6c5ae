package rig

import (
	"net"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/hostnet"
)

func TestNodesConfigValidate(t *testing.T) {
	ok := NodesConfig{Net: hostnet.Config{Nodes: 3}, Dir: "/tmp/x", StoreAccessKey: "k", StoreSecretKey: "secret123",
		ControllerToken: "0123456789abcdef", AgentToken: "0123456789abcdef"}
	for _, tc := range []struct {
		name string
		edit func(*NodesConfig)
		ok   bool
	}{
		{"valid", func(*NodesConfig) {}, true},
		{"no nodes", func(c *NodesConfig) { c.Net.Nodes = 0 }, false},
		{"no dir", func(c *NodesConfig) { c.Dir = "" }, false},
		{"no store keys", func(c *NodesConfig) { c.StoreSecretKey = "" }, false},
		{"short token", func(c *NodesConfig) { c.AgentToken = "short" }, false},
		{"port", func(c *NodesConfig) { c.AgentPort = 70000 }, false},
	} {
		c := ok
		tc.edit(&c)
		if err := c.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v", tc.name, err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ok := Config{Controller: true, ControllerListener: ln, Agent: true, Dir: t.TempDir(),
		EtcdEndpoints: []string{"http://127.0.0.1:2379"}, StoreEndpoint: "http://127.0.0.1:9000", StoreIdentities: "minio"}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"valid", func(*Config) {}, ""},
		{"nothing to run", func(c *Config) { c.Controller, c.Agent = false, false }, "nothing to run"},
		{"controller without listener", func(c *Config) { c.ControllerListener = nil }, "listener"},
		{"agent without dir", func(c *Config) { c.Dir = "" }, "Dir"},
		{"controller without identities", func(c *Config) { c.StoreIdentities = "" }, "StoreIdentities"},
		{"agent without identities", func(c *Config) { c.Controller, c.StoreIdentities = false, "" }, ""},
		{"no etcd", func(c *Config) { c.EtcdEndpoints = nil }, "EtcdEndpoints"},
		{"no store", func(c *Config) { c.StoreEndpoint = "" }, "StoreEndpoint"},
	} {
		c := ok
		tc.edit(&c)
		err := c.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		case tc.want == "" && c.Region != "us-east-1":
			t.Errorf("%s: region %q, want the default us-east-1", tc.name, c.Region)
		}
	}
}
