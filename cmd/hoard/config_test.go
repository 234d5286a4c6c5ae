package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "hoard.yaml")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// testFlags is a flag set of each kind of flag up and serve have, the
// cache flags their own.
type testFlags struct {
	listen, etcd string
	cachelets    int
	demo, bw     bool
	scale        float64
	cache        cacheFlags
}

func newTestFlags() (*flag.FlagSet, *testFlags, *string) {
	fs := flag.NewFlagSet("up", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var f testFlags
	fs.StringVar(&f.listen, "listen", "127.0.0.1:9200", "")
	fs.StringVar(&f.etcd, "etcd-endpoints", "", "")
	fs.IntVar(&f.cachelets, "cachelets", 1, "")
	fs.BoolVar(&f.demo, "demo", false, "")
	fs.BoolVar(&f.bw, "bandwidth-policy", true, "")
	fs.Float64Var(&f.scale, "demo-scale", 1, "")
	fs.Bool("detach", false, "")
	f.cache.register(fs)
	return fs, &f, configFlag(fs)
}

// TestConfigPrecedence: a flag given on the command line wins over the
// file; a setting the file gives wins over the default; neither leaves
// the default.
func TestConfigPrecedence(t *testing.T) {
	const file = `
cachelets: 3
demo: true
demo_scale: 0.25
cachelet:
  listen: 127.0.0.1:7000
  bandwidth_policy: false
membership:
  etcd_endpoints: [http://a:2379, http://b:2379]
cache:
  budget: 512MiB
  ttl: 10m
  eviction: ttl
  migrate_max_bytes: 8MiB
  consistency:          # null: not set
`
	defaults := testFlags{listen: "127.0.0.1:9200", cachelets: 1, bw: true, scale: 1,
		cache: cacheFlags{eviction: "owner-lru", migrate: migrateFlags{on: true}}}
	fromFile := testFlags{listen: "127.0.0.1:7000", etcd: "http://a:2379,http://b:2379", cachelets: 3, demo: true, scale: 0.25,
		cache: cacheFlags{budget: 512 << 20, eviction: "ttl", ttl: 10 * time.Minute, migrate: migrateFlags{on: true, maxBytes: 8 << 20}}}
	for _, tc := range []struct {
		name string
		file string // "" for no --config
		args []string
		want func(f *testFlags)
	}{
		{"neither", "", nil, func(f *testFlags) { *f = defaults }},
		{"flags only", "", []string{"--cachelets", "2", "--budget", "1GiB"}, func(f *testFlags) {
			*f = defaults
			f.cachelets, f.cache.budget = 2, 1<<30
		}},
		{"file only", file, nil, func(f *testFlags) { *f = fromFile }},
		{"flags win", file, []string{"--cachelets", "5", "--listen", "127.0.0.1:1", "--demo=false", "--bandwidth-policy", "--eviction", "size-aware", "--ttl", "0s", "--migrate=false"}, func(f *testFlags) {
			*f = fromFile
			f.cachelets, f.listen, f.demo, f.bw, f.cache.eviction, f.cache.ttl = 5, "127.0.0.1:1", false, true, "size-aware", 0
			f.cache.migrate.on = false
		}},
		{"a flag at its default still wins", file, []string{"--cachelets", "1"}, func(f *testFlags) {
			*f = fromFile
			f.cachelets = 1
		}},
		{"empty file", "# nothing\n", []string{"--demo"}, func(f *testFlags) {
			*f = defaults
			f.demo = true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, got, config := newTestFlags()
			args := tc.args
			if tc.file != "" {
				args = append([]string{"--config", writeConfig(t, tc.file)}, args...)
			}
			if err := fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			if err := applyConfig(fs, *config); err != nil {
				t.Fatal(err)
			}
			var want testFlags
			tc.want(&want)
			if *got != want {
				t.Errorf("got  %+v\nwant %+v", *got, want)
			}
		})
	}
}

// TestConfigErrors: unknown keys and bad values are errors naming the
// file, the line and the key, and leave the flags as the command line
// set them.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"unknown key", "cachelets: 2\ncache:\n  budgte: 1GiB\n", `line 3: unknown key "cache.budgte" for hoard up`},
		{"unknown section", "cahce: {budget: 1GiB}\n", `unknown key "cahce.budget"`},
		{"dotted key", "cache.budget: 1GiB\n", `key "cache.budget": write sections as mappings`},
		{"section as value", "cache: 5\n", `unknown key "cache"`},
		{"top-level flag in a section", "cache: {cachelets: 2}\n", `unknown key "cache.cachelets"`},
		{"dashes", "demo-scale: 2\n", `unknown key "demo-scale"`},
		{"detach", "detach: true\n", `unknown key "detach"`},
		{"config", "config: other.yaml\n", `unknown key "config"`},
		{"document", "document: doc.json\n", `unknown key "document"`},
		{"bad size", "cache:\n  budget: lots\n", `line 2: cache.budget: bad value "lots"`},
		{"bad int, overridden", "cachelets: many\n", `line 1: cachelets: bad value "many"`},
		{"bad bool", "demo: yes please\n", `demo: bad value "yes please"`},
		{"bad duration", "cache: {ttl: soon}\n", `cache.ttl: bad value "soon"`},
		{"twice", "cachelets: 2\ncachelets: 3\n", "line 2: cachelets given twice"},
		{"not a mapping", "- cachelets\n", "want a mapping"},
		{"two documents", "cachelets: 2\n---\ndemo: true\n", "more than one YAML document"},
		{"nested list", "membership: {etcd_endpoints: [[a]]}\n", "want a list of plain values"},
		{"bad yaml", "cachelets: [\n", "line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, got, config := newTestFlags()
			path := writeConfig(t, tc.file)
			if err := fs.Parse([]string{"--config", path, "--cachelets", "4"}); err != nil {
				t.Fatal(err)
			}
			err := applyConfig(fs, *config)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want one naming %s and saying %q", err, path, tc.want)
			}
			if got.cachelets != 4 {
				t.Errorf("cachelets = %d after the error; the command line said 4", got.cachelets)
			}
		})
	}
	fs, _, config := newTestFlags()
	fs.Parse([]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")})
	if err := applyConfig(fs, *config); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: err = %v", err)
	}
}

// TestConfigCommands: up and serve read --config before they check or
// start anything; the example files are valid; the keys of one command
// are unknown to the other.
func TestConfigCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		// The example parses: the command gets as far as its own checks.
		{[]string{"up", "--config", "../../docs/hoard.example.yaml", "--cachelets", "0"}, 2, "--cachelets must be at least 1"},
		{[]string{"serve", "--config", "../../docs/serve.example.yaml", "--log-level", "loud"}, 2, "bad log level"},
		{[]string{"serve", "--config", "../../docs/serve.example.yaml"}, 2, "--etcd-endpoints needs the application's --peer-secret"},
		{[]string{"up", "--config", "FILE"}, 2, "--cachelets must be at least 1"},
		{[]string{"up", "--config", "FILE", "--log-level", "warn"}, 2, "--cachelets must be at least 1"},
		{[]string{"up", "--config", "BAD"}, 2, `unknown key "store.endpoint" for hoard up`},
		{[]string{"serve", "--config", "BAD"}, 2, `unknown key "cachelets" for hoard serve`},
		{[]string{"serve", "--config", "FILE"}, 2, `unknown key "cachelets" for hoard serve`},
	} {
		dir := t.TempDir()
		file, bad := filepath.Join(dir, "file.yaml"), filepath.Join(dir, "bad.yaml")
		os.WriteFile(file, []byte("cachelets: 0\nlog: {level: loud}\n"), 0o600)
		os.WriteFile(bad, []byte("store: {endpoint: http://x}\ncachelets: 2\n"), 0o600)
		args := append([]string(nil), tc.args...)
		for i, a := range args {
			args[i] = map[string]string{"FILE": file, "BAD": bad}[a] + map[bool]string{true: a}[a != "FILE" && a != "BAD"]
		}
		t.Setenv("HOARD_ACCESS_KEY", "")
		t.Setenv("HOARD_SECRET_KEY", "")
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if code != tc.code || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("hoard %v: exit %d, %q; want exit %d saying %q", args, code, errOut.String(), tc.code, tc.want)
		}
	}
}

// TestConfigServePrecedence runs hoard serve: the ready file says which of
// command line, file, environment and default decided the application
// and the member ID.
func TestConfigServePrecedence(t *testing.T) {
	for _, tc := range []struct {
		name, file, env string
		args            []string
		app, id         string
	}{
		{"default", "", "", nil, "default", ""},
		{"environment", "", "envapp", nil, "envapp", ""},
		{"file over environment", "membership: {app: fileapp, id: file-1}\n", "envapp", nil, "fileapp", "file-1"},
		{"flag over file", "membership: {app: fileapp, id: file-1}\n", "envapp", []string{"--app", "flagapp"}, "flagapp", "file-1"},
		{"flags over file", "membership: {app: fileapp, id: file-1}\n", "", []string{"--id", "flag-1", "--app", "flagapp"}, "flagapp", "flag-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("HOARD_APP", tc.env)
			if tc.env == "" {
				os.Unsetenv("HOARD_APP")
			}
			args := append(baseServeArgs(t, "bkt"), tc.args...)
			if tc.file != "" {
				args = append(args, "--config", writeConfig(t, tc.file))
			}
			info, _ := serving(t, args...)
			if info.App != tc.app || info.ID != tc.id {
				t.Errorf("app %q, id %q; want %q, %q", info.App, info.ID, tc.app, tc.id)
			}
		})
	}
}

// TestConfigDocumented: every key of up and serve is in
// docs/configuration.md.
func TestConfigDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	flagRE := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)
	for _, cmd := range []string{"up", "serve"} {
		var out, errOut bytes.Buffer
		run(context.Background(), []string{cmd, "-h"}, &out, &errOut)
		names := flagRE.FindAllStringSubmatch(errOut.String(), -1)
		if len(names) < 10 {
			t.Fatalf("hoard %s -h lists %d flags:\n%s", cmd, len(names), errOut.String())
		}
		for _, m := range names {
			if notInConfig[m[1]] {
				continue
			}
			if key := configKey(m[1]); !bytes.Contains(doc, []byte("| `"+key+"` | `--"+m[1]+"`")) {
				t.Errorf("docs/configuration.md has no row for %s's key %s (--%s)", cmd, key, m[1])
			}
		}
	}
}
