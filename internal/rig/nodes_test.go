package rig

import (
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
