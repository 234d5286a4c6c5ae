package main

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hoard-io/hoard/internal/cacheconfig"
)

// --sweep (and cache.sweep in a configuration file): OFC's 300 s unless
// set; off or 0 turn it off; anything else is refused, saying what is
// wanted.
func TestSweepFlag(t *testing.T) {
	parse := func(args []string, config string) (cacheconfig.Settings, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		var cf cacheFlags
		cf.register(fs)
		if err := fs.Parse(args); err != nil {
			return cacheconfig.Settings{}, err
		}
		if config != "" {
			if err := applyConfig(fs, writeConfig(t, config)); err != nil {
				return cacheconfig.Settings{}, err
			}
		}
		s, err := cf.settings()
		if err != nil {
			return s, err
		}
		return s, s.Validate()
	}
	for _, tc := range []struct {
		args   []string
		config string
		off    bool
		every  time.Duration
	}{
		{nil, "", false, 0}, // the cachelet's default: 300 s
		{[]string{"--sweep", "off"}, "", true, 0},
		{[]string{"--sweep", "0"}, "", true, 0},
		{[]string{"--sweep", "60s"}, "", false, time.Minute},
		{nil, "cache: {sweep: off}\n", true, 0},
		{nil, "cache: {sweep: 10m}\n", false, 10 * time.Minute},
		{[]string{"--sweep", "120s"}, "cache: {sweep: off}\n", false, 2 * time.Minute}, // the command line wins
	} {
		s, err := parse(tc.args, tc.config)
		if err != nil || s.SweepOff != tc.off || s.SweepInterval.D() != tc.every {
			t.Errorf("%v %q: off %v, every %s, %v; want off %v, every %s", tc.args, tc.config, s.SweepOff, s.SweepInterval.D(), err, tc.off, tc.every)
		}
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	var cf cacheFlags
	cf.register(fs)
	if def := fs.Lookup("sweep").DefValue; def != "5m0s" {
		t.Errorf("--sweep's default shows as %q, want 5m0s", def)
	}
	for _, tc := range []struct {
		args   []string
		config string
		want   string
	}{
		{[]string{"--sweep", "-5s"}, "", "want a positive duration such as 300s, or off"},
		{[]string{"--sweep", "often"}, "", "want a positive duration such as 300s, or off"},
		{[]string{"--sweep", "off", "--sweep-min-reads", "3"}, "", "sweep is off"},
		{nil, "cache: {sweep: sometimes}\n", "cache.sweep"},
	} {
		if _, err := parse(tc.args, tc.config); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %q: %v, want an error saying %q", tc.args, tc.config, err, tc.want)
		}
	}
}
