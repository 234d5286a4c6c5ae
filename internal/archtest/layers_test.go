package archtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/hoard-io/hoard/"

// The layers, lowest first. A package may depend on packages of its own
// layer and below, never above. docs/ARCHITECTURE.md explains them; a new
// package must be given one here.
var layers = []struct {
	name     string
	packages []string
}{
	// Pure cores and contracts: no I/O, no goroutines of their own
	// (checked below), nothing of the module above them.
	{"core", []string{
		"internal/bytesize", "internal/ring", "internal/cache", "internal/keepalive",
		"internal/prewarm", "internal/scaling", "internal/store", "internal/membership",
		"internal/checksum", "internal/loadgen", "internal/clock", "internal/cachelet/keystate", "internal/cacheconfig",
		"internal/grant", "internal/sim", "internal/blockfmt", "internal/ftree", "internal/diskindex", "internal/erasure",
		"internal/predict", "internal/admission", "internal/media", "internal/media/mediatest",
	}},
	// The parts: adapters to the outside (stores, etcd, the kernel), the
	// data plane of one cachelet, the platform's wire contract.
	{"parts", []string{
		"internal/etcdauth",
		"internal/appspec", "internal/api",
		"internal/store/s3", "internal/store/memstore", "internal/store/storetest",
		"internal/membership/etcd", "internal/membership/memory", "internal/membership/membershiptest",
		"internal/etcdembed", "internal/etcdembed/zapslog", "internal/localstore", "internal/netshape",
		"internal/peer", "internal/cluster", "internal/writeback", "internal/writelog", "internal/notify", "internal/changerelay",
		"internal/s3auth", "internal/s3api", "internal/cachelet", "internal/sandbox", "internal/worker",
		"internal/hostnet", "internal/control", "internal/scripttest", "internal/testaddr", "internal/pki", "internal/dashboard",
		"internal/disktier", "internal/lazyfs", "internal/onewrite", "internal/onewrite/onewritetest",
		"internal/httpfetch",
	}},
	// One instance's composition: store client, cachelet, listeners.
	{"instance", []string{"internal/instance"}},
	// The deployable roles.
	{"roles", []string{"internal/agent", "internal/controller"}},
	// Assemblies of the roles: the platform on one machine (and several
	// nodes), the benchmarks.
	{"assembly", []string{"internal/rig", "internal/bench"}},
	{"binary", []string{"cmd/hoard"}},
}

// noIO are imports a core package must not have.
var noIO = []string{"os", "os/exec", "net", "net/http", "syscall", "io/ioutil"}

// ioAllowed are the core packages that may use noIO imports for their
// types (checksum names HTTP headers), never for I/O.
var ioAllowed = map[string][]string{"internal/checksum": {"net/http"}}

// roles may be imported only by these.
var roleImporters = []string{"internal/rig", "internal/bench", "cmd/hoard"}

// dataPlane is what the roles must not compile in: the controller talks
// to agents, and an agent to its cachelets, over their APIs (api, control).
var dataPlane = []string{"internal/cachelet", "internal/instance", "internal/s3api", "internal/peer"}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "../../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]pkg{}
	dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(out)))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs[p.ImportPath] = p
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	return pkgs
}

func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	layerOf := map[string]int{}
	for i, l := range layers {
		for _, p := range l.packages {
			if _, dup := layerOf[p]; dup {
				t.Errorf("%s is in two layers", p)
			}
			layerOf[p] = i
			if _, ok := pkgs[p]; !ok {
				t.Errorf("layer %s names %s, which is not a package of the module", l.name, p)
			}
		}
	}
	for path, p := range pkgs {
		if path == "internal/archtest" {
			continue
		}
		li, ok := layerOf[path]
		if !ok {
			t.Errorf("%s has no layer: add it to the table in internal/archtest and docs/ARCHITECTURE.md", path)
			continue
		}
		for _, d := range p.Deps {
			dep, ours := strings.CutPrefix(d, module)
			if !ours {
				continue
			}
			if dl, ok := layerOf[dep]; ok && dl > li {
				t.Errorf("%s (layer %s) depends on %s (layer %s, above it)", path, layers[li].name, dep, layers[dl].name)
			}
		}
	}
}

func TestCoresDoNoIO(t *testing.T) {
	pkgs := listPackages(t)
	for _, path := range layers[0].packages {
		for _, imp := range pkgs[path].Imports {
			if slices.Contains(noIO, imp) && !slices.Contains(ioAllowed[path], imp) {
				t.Errorf("core package %s imports %s", path, imp)
			}
		}
	}
}

func TestRolesStandApart(t *testing.T) {
	pkgs := listPackages(t)
	for path, p := range pkgs {
		for _, d := range p.Deps {
			dep, _ := strings.CutPrefix(d, module)
			if dep != "internal/agent" && dep != "internal/controller" {
				continue
			}
			if !slices.Contains(roleImporters, path) {
				t.Errorf("%s depends on the role package %s; only %v may", path, dep, roleImporters)
			}
		}
	}
	for _, role := range []string{"internal/controller", "internal/agent"} {
		for _, d := range pkgs[role].Deps {
			if dep, _ := strings.CutPrefix(d, module); slices.Contains(dataPlane, dep) {
				t.Errorf("%s depends on %s: a role must not compile in the data plane", role, dep)
			}
		}
	}
}
