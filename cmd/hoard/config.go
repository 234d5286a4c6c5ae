package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A configuration file (hoard up --config FILE, hoard serve --config
// FILE) is one YAML document of settings, each a flag of the command:
// the key is the flag's name with '_' for '-', inside the section
// configKeys names for it (cache.budget is --budget), at the top level
// otherwise (cachelets is --cachelets). A flag given on the command line
// wins over the file; a setting the file leaves out keeps the flag's
// default. docs/configuration.md lists every key.

// configKeys is the key of each flag that lives in a section.
var configKeys = map[string]string{
	"listen":                "cachelet.listen",
	"metrics-listen":        "cachelet.metrics_listen",
	"access-key":            "cachelet.access_key",
	"secret-key":            "cachelet.secret_key",
	"domains":               "cachelet.domains",
	"bandwidth-policy":      "cachelet.bandwidth_policy",
	"notify-url":            "cachelet.notify_url",
	"notify-token":          "cachelet.notify_token",
	"platform-url":          "cachelet.platform_url",
	"budget":                "cache.budget",
	"max-object-size":       "cache.max_object_size",
	"memory-overhead":       "cache.memory_overhead",
	"buffer-pool":           "cache.buffer_pool",
	"erasure":               "erasure.shards",
	"erasure-threshold":     "erasure.threshold",
	"erasure-memory":        "erasure.memory",
	"erasure-chunk":         "erasure.chunk",
	"erasure-warmup":        "erasure.warm_up",
	"erasure-backup":        "erasure.backup",
	"erasure-backup-memory": "erasure.backup_memory",
	"page-size":             "cache.page_size",
	"read-mode":             "cache.read_mode",
	"no-write-cache":        "cache.no_write_cache",
	"eviction":              "cache.eviction",
	"ttl":                   "cache.ttl",
	"sweep":                 "cache.sweep",
	"consistency":           "cache.consistency",
	"store-endpoint":        "store.endpoint",
	"store-access-key":      "store.access_key",
	"store-secret-key":      "store.secret_key",
	"store-region":          "store.region",
	"store-call-timeout":    "store.call_timeout",
	"store-idle-timeout":    "store.idle_timeout",
	"body-idle-timeout":     "cachelet.body_idle_timeout",
	"body-min-rate":         "cachelet.body_min_rate",
	"body-rate-grace":       "cachelet.body_rate_grace",
	"store-listen":          "store.listen",
	"app":                   "membership.app",
	"id":                    "membership.id",
	"node":                  "membership.node",
	"etcd-endpoints":        "membership.etcd_endpoints",
	"peer-listen":           "peer.listen",
	"peer-advertise":        "peer.advertise",
	"peer-secret":           "peer.secret",
	"controller-listen":     "platform.controller_listen",
	"examples":              "platform.examples",
	"no-platform":           "platform.off",
	"insecure-sandbox":      "platform.insecure_sandbox",
	"log-level":             "log.level",
	"log-json":              "log.json",

	"serve-stale-if-error": "cache.serve_stale_if_error",
	"sweep-min-reads":      "cache.sweep_min_reads",
	"sweep-idle":           "cache.sweep_idle",
	"final-outputs":        "cache.final_outputs",
	"migrate":              "cache.migrate",
	"migrate-hot-reads":    "cache.migrate_hot_reads",
	"migrate-hot-idle":     "cache.migrate_hot_idle",
	"migrate-max-objects":  "cache.migrate_max_objects",
	"migrate-max-bytes":    "cache.migrate_max_bytes",
	"migrate-timeout":      "cache.migrate_timeout",

	"store-changes":           "cache.store_changes",
	"store-changes-heartbeat": "cache.store_changes_heartbeat",
	"store-changes-probe":     "cache.store_changes_probe",

	"disk-dir":             "disk.dir",
	"disk-budget":          "disk.budget",
	"disk-min-object-size": "disk.min_object_size",
	"disk-max-age":         "disk.max_age",
	"disk-clean-interval":  "disk.clean_interval",
	"disk-fsync":           "disk.fsync",
	"durable-writes":       "cache.durable_writes",
	"durable-log-bytes":    "cache.durable_log_bytes",
	"durable-shadow":       "cache.durable_shadow",

	"durable-backup-max-bytes": "cache.durable_backup_max_bytes",
	"durable-backup-timeout":   "cache.durable_backup_timeout",

	"tls":           "tls.local_ca",
	"tls-cert":      "tls.cert",
	"tls-key":       "tls.key",
	"tls-ca":        "tls.ca",
	"tls-client-ca": "tls.client_ca",
}

// notInConfig are the flags a file cannot set: --config itself; --detach,
// which the detached process must not see again; and serve's --document,
// the node agent's hand-over, read before the flags are.
var notInConfig = map[string]bool{"config": true, "detach": true, "document": true}

// configKey is the file's key for a flag.
func configKey(flagName string) string {
	if k, ok := configKeys[flagName]; ok {
		return k
	}
	return strings.ReplaceAll(flagName, "-", "_")
}

// configFlag registers --config.
func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", "", "read settings from this YAML file (docs/configuration.md); flags given on the command line override it")
}

// setting is one key of a configuration file, its value as a flag would
// take it (a list joined with commas) and its line.
type setting struct {
	key, value string
	line       int
}

// applyConfig sets, from the configuration file at path, every flag of fs
// that the command line did not set. fs must have been parsed. Every
// error names the file (and the key and line): a key no flag of fs has,
// a value the flag refuses (even one the command line overrides); the
// caller then stops before starting anything.
func applyConfig(fs *flag.FlagSet, path string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	settings, err := parseConfig(data)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", errUsage, path, err)
	}
	flags := map[string]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) {
		if !notInConfig[f.Name] {
			flags[configKey(f.Name)] = f
		}
	})
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, s := range settings {
		if flags[s.key] == nil {
			return fmt.Errorf("%w: %s: line %d: unknown key %q for hoard %s (docs/configuration.md lists the keys)", errUsage, path, s.line, s.key, fs.Name())
		}
	}
	for _, s := range settings {
		f := flags[s.key]
		// A flag the command line gave keeps its value, but the file's is
		// checked all the same: a bad file is an error.
		was := f.Value.String()
		err := f.Value.Set(s.value)
		if given[f.Name] {
			_ = f.Value.Set(was)
		}
		if err != nil {
			return fmt.Errorf("%w: %s: line %d: %s: bad value %q: %v", errUsage, path, s.line, s.key, s.value, err)
		}
	}
	return nil
}

// parseConfig reads one YAML document of settings: a mapping whose values
// are scalars, lists of scalars, or mappings of the same (sections). A
// key given twice is an error; a null value is no setting.
func parseConfig(data []byte) ([]setting, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil // empty
		}
		return nil, err
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil // comments only
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of settings (key: value)", root.Line)
	}
	var out []setting
	var walk func(prefix string, m *yaml.Node) error
	walk = func(prefix string, m *yaml.Node) error {
		seen := map[string]bool{}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := prefix + k.Value
			if k.Kind != yaml.ScalarNode || k.Value == "" {
				return fmt.Errorf("line %d: want a key", k.Line)
			}
			if strings.Contains(k.Value, ".") {
				return fmt.Errorf("line %d: key %q: write sections as mappings (cache: {budget: 1GiB}, not cache.budget: 1GiB)", k.Line, key)
			}
			if seen[k.Value] {
				return fmt.Errorf("line %d: %s given twice", k.Line, key)
			}
			seen[k.Value] = true
			switch v.Kind {
			case yaml.MappingNode:
				if err := walk(key+".", v); err != nil {
					return err
				}
			case yaml.ScalarNode:
				if v.Tag != "!!null" {
					out = append(out, setting{key: key, value: v.Value, line: k.Line})
				}
			case yaml.SequenceNode:
				var items []string
				for _, it := range v.Content {
					if it.Kind != yaml.ScalarNode {
						return fmt.Errorf("line %d: %s: want a list of plain values", it.Line, key)
					}
					items = append(items, it.Value)
				}
				out = append(out, setting{key: key, value: strings.Join(items, ","), line: k.Line})
			default:
				return fmt.Errorf("line %d: %s: want a value, a list or a section", k.Line, key)
			}
		}
		return nil
	}
	return out, walk("", root)
}
