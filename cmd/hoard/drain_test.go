package main

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

// TestServeDrainLog: a document with drain_log makes `hoard serve` a
// drain of that instance's durable log, which exits at once when the log
// holds nothing (no listener, no ring: the etcd endpoints are never
// dialled), and refuses a document without durable writes.
func TestServeDrainLog(t *testing.T) {
	dir := t.TempDir()
	doc := &control.Document{
		Version: control.DocumentVersion, App: "app", ID: "app-1-dead",
		EtcdEndpoints: []string{"http://127.0.0.1:1"}, AccessKey: "ak", SecretKey: "sk", PeerSecret: "the-application-secret",
		Store: control.Store{Endpoint: "http://127.0.0.1:1", AccessKey: "sak", SecretKey: "ssk"},
		Cache: cacheconfig.Settings{Consistency: "owner", Budget: 16 << 20, DurableWrites: cacheconfig.DurableLog},
		Disk:  &control.Disk{Dir: filepath.Join(dir, "disk"), Budget: 16 << 20}, DrainLog: true, LogLevel: "warn",
	}
	docPath := filepath.Join(dir, "drain.json")
	if err := control.WriteDocument(docPath, doc); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := runServe(t.Context(), []string{"--document", docPath}, &out, io.Discard); err != nil || !strings.Contains(out.String(), "app-1-dead drained: 0 writes") {
		t.Fatalf("drain of an empty log: %v, %q", err, out.String())
	}
	doc.Cache.DurableWrites = cacheconfig.DurableOff
	if err := control.WriteDocument(docPath, doc); err != nil {
		t.Fatal(err)
	}
	if err := runServe(t.Context(), []string{"--document", docPath}, io.Discard, io.Discard); err == nil || !strings.Contains(err.Error(), "DurableWrites") {
		t.Fatalf("drain without durable writes: %v, want a refusal", err)
	}
}
