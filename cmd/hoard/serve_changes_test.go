package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/instance"
)

// --store-changes takes off, listen (alone, or true, as before it had
// modes), relay or auto; a document's store_changes is its default; relay
// needs the controller; auto is relay with one, listen without.
func TestStoreChangesFlag(t *testing.T) {
	for _, tc := range []struct {
		def       cacheconfig.ChangesMode
		args      []string
		url, tok  string
		on, relay bool
		err       string
	}{
		{args: nil},
		{args: []string{"--store-changes"}, on: true},
		{args: []string{"--store-changes=true"}, on: true},
		{args: []string{"--store-changes=listen"}, on: true},
		{args: []string{"--store-changes=off"}},
		{args: []string{"--store-changes=relay"}, url: "http://c", tok: "t", on: true, relay: true},
		{args: []string{"--store-changes=relay"}, err: "needs the controller"},
		{args: []string{"--store-changes=relay", "--store-changes-probe"}, url: "http://c", tok: "t", err: "--store-changes-probe is for"},
		{args: []string{"--store-changes=auto"}, on: true},
		{args: []string{"--store-changes=auto"}, url: "http://c", tok: "t", on: true, relay: true},
		{args: []string{"--store-changes=sometimes"}, err: `"sometimes": want off, listen, relay or auto`},
		{args: []string{"--store-changes", "--store-changes-heartbeat=1s"}, err: "at least 3s"},
		{def: cacheconfig.ChangesRelay, url: "http://c", tok: "t", on: true, relay: true},
		{def: cacheconfig.ChangesAuto, on: true},
		{def: cacheconfig.ChangesRelay, args: []string{"--store-changes=off"}, url: "http://c", tok: "t"},
	} {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(new(strings.Builder))
		var c changeFlags
		c.register(fs, tc.def)
		err := fs.Parse(tc.args)
		var cfg instance.Config
		cfg.PlatformURL, cfg.PlatformToken = tc.url, tc.tok
		if err == nil {
			err = c.apply(&cfg)
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %v: %v, want %q", tc.def, tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || (cfg.Cachelet.External != nil) != tc.on || cfg.ChangesRelay != tc.relay {
			t.Errorf("%q %v: following %v, relay %v, %v; want %v, %v", tc.def, tc.args, cfg.Cachelet.External != nil, cfg.ChangesRelay, err, tc.on, tc.relay)
		}
	}
}
