package agent

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/hoard-io/hoard/internal/api"
	"github.com/hoard-io/hoard/internal/appspec"
	"github.com/hoard-io/hoard/internal/cacheconfig"
	"github.com/hoard-io/hoard/internal/control"
)

// An application's durable_writes reaches its cachelets' document, with
// the node's disk tier its log lives in; a node without one refuses to
// load the application rather than run it without the log.
func TestDocumentDurableWrites(t *testing.T) {
	for _, mode := range []string{"on", "replicated"} {
		spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner, durable_writes: " + mode + "}\nfunctions: {f: {handler: m.h}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		a := &Agent{cfg: Config{ID: "node-a", DiskBudget: 1 << 30, DiskDir: dir}}
		in := &Instance{agent: a, spec: spec, req: api.StartRequest{App: "app", ID: "app-1-abcdef",
			Credentials: api.Credentials{AccessKey: "ak", SecretKey: "sk", PeerSecret: "0123456789abcdef"}}}
		disk, gid, err := in.appDisk("app")
		if err != nil || disk == nil || gid != 0 || disk.Dir != filepath.Join(dir, "app") {
			t.Fatalf("%s: disk %+v, group %d, %v; want the application's directory", mode, disk, gid, err)
		}
		in.disk = disk
		d := in.document(control.Endpoint{}, nil)
		want, _ := cacheconfig.ParseDurableMode(mode)
		if d.Cache.DurableWrites != want || d.Disk == nil || d.Disk.Dir != disk.Dir || d.ID != "app-1-abcdef" {
			t.Errorf("%s: document's durable_writes %q, disk %+v, id %q", mode, d.Cache.DurableWrites, d.Disk, d.ID)
		}
		if err := d.Cache.Validate(); err != nil {
			t.Errorf("%s: %v", mode, err)
		}

		// No disk tier on the node: refused, saying why.
		in.agent = &Agent{cfg: Config{ID: "node-b", DiskDir: t.TempDir()}}
		if disk, _, err := in.appDisk("app"); err == nil || disk != nil || !strings.Contains(err.Error(), "durable_writes") ||
			!strings.Contains(err.Error(), "node-b has none") {
			t.Errorf("%s without a disk tier: %+v, %v; want an error", mode, disk, err)
		}
	}
	// Off: no disk tier is no matter.
	spec, err := appspec.Parse([]byte("name: app\ncache: {consistency: owner}\nfunctions: {f: {handler: m.h}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in := &Instance{agent: &Agent{cfg: Config{ID: "node-b"}}, spec: spec}
	if disk, _, err := in.appDisk("app"); err != nil || disk != nil {
		t.Errorf("off without a disk tier: %+v, %v", disk, err)
	}
}
