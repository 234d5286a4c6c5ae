# hoard's build, tools, tests and the local default.
#
#   make up     build what is missing, run MinIO, a cachelet and the platform with the examples, demo
#   make test   the whole suite: unit, integration (MinIO and versitygw), e2e
#   make lint   gofmt, go vet, staticcheck, ruff
#   make bench  hoard bench access (Redis baseline installed on first use)
#
# Every external part is pinned here and built or installed into the
# project: Go tools into .tools/bin, Python packages into .venv.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

ROOT      := $(abspath .)
TOOLS     := $(ROOT)/.tools/bin
VENV      := $(ROOT)/.venv
BIN       := $(ROOT)/bin/hoard
GO        ?= go
PYTHON    ?= python3
export GOFLAGS := -buildvcs=false

# Pinned versions of everything the project builds or installs.
MINIO_VERSION       := v0.0.0-20260212201848-7aac2a2c5b7c
VERSITYGW_VERSION   := v1.8.0
STATICCHECK_VERSION := v0.8.2
TOXIPROXY_VERSION   := v2.12.0
HELM_VERSION        := v3.22.0
KUBERNETES_VERSION  := v1.37.2

export HOARD_MINIO_BIN     := $(TOOLS)/minio
export HOARD_VERSITYGW_BIN := $(TOOLS)/versitygw
export HOARD_TOXIPROXY_BIN := $(TOOLS)/toxiproxy-server
export HOARD_BIN           := $(BIN)
export HOARD_HELM_BIN      := $(TOOLS)/helm
export HOARD_KUBE_APISERVER_BIN := $(TOOLS)/kube-apiserver

GO_SOURCES := $(shell find cmd internal -name '*.go' 2>/dev/null) go.mod go.sum

.PHONY: build up down test test-unit test-integration test-e2e test-bench-smoke lint bench tools venv redis chromium clean fuzz
.PHONY: helm kube-apiserver kubelet images helm-lint test-kube test-cluster

build: $(BIN)

$(BIN): $(GO_SOURCES)
	@mkdir -p $(dir $@)
	$(GO) build -o $@ ./cmd/hoard

# --- tools ------------------------------------------------------------------

$(TOOLS)/minio:
	@mkdir -p $(TOOLS)
	@echo ">> building MinIO $(MINIO_VERSION) into $(TOOLS) (once; takes a few minutes)"
	cd /tmp && GOBIN=$(TOOLS) $(GO) install github.com/minio/minio@$(MINIO_VERSION)

$(TOOLS)/versitygw:
	@mkdir -p $(TOOLS)
	@echo ">> building versitygw $(VERSITYGW_VERSION) into $(TOOLS) (once)"
	cd /tmp && GOBIN=$(TOOLS) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

$(TOOLS)/staticcheck:
	@mkdir -p $(TOOLS)
	cd /tmp && GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

# Toxiproxy shapes the network of the benchmarks (internal/netshape). go
# install names the binary after its package directory (server), so it is
# built into a scratch directory beside its place and renamed.
$(TOOLS)/toxiproxy-server:
	@mkdir -p $(TOOLS)
	@echo ">> building toxiproxy $(TOXIPROXY_VERSION) into $(TOOLS) (once)"
	tmp=$$(mktemp -d $(TOOLS)/.toxiproxy.XXXXXX) && trap 'rm -rf "$$tmp"' EXIT && \
	  cd /tmp && GOBIN=$$tmp $(GO) install \
	    -ldflags '-X github.com/Shopify/toxiproxy/v2.Version=$(TOXIPROXY_VERSION)' \
	    github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION) && \
	  mv "$$tmp/server" $@

tools: $(TOOLS)/minio $(TOOLS)/versitygw $(TOOLS)/toxiproxy-server

# --- Kubernetes (docs/kubernetes.md, ADR 25) ----------------------------------

# helm renders and lints the chart (deploy/helm/hoard). Its ldflags are
# those of helm's own release build: its version, and the Kubernetes
# version helm template assumes without a cluster.
HELM_LDFLAGS := -s -w -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37
$(TOOLS)/helm:
	@mkdir -p $(TOOLS)
	@echo ">> building helm $(HELM_VERSION) into $(TOOLS) (once)"
	cd /tmp && GOBIN=$(TOOLS) $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# kube-apiserver, built from the pinned Kubernetes source (the module in
# deploy/k8s pins its staging modules); rebuilt when that module changes.
# About 4 minutes of CPU, once.
KUBE_LDFLAGS := -s -w -X k8s.io/component-base/version.gitVersion=$(KUBERNETES_VERSION) \
  -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37
$(TOOLS)/kube-apiserver: deploy/k8s/go.mod deploy/k8s/go.sum
	@mkdir -p $(TOOLS)
	@echo ">> building kube-apiserver $(KUBERNETES_VERSION) into $(TOOLS) (once; takes a few minutes)"
	cd deploy/k8s && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/kube-apiserver

# The single-node cluster's other parts, from the same module.
$(TOOLS)/kubelet $(TOOLS)/kube-controller-manager $(TOOLS)/kube-scheduler: deploy/k8s/go.mod deploy/k8s/go.sum
	@mkdir -p $(TOOLS)
	@echo ">> building $(notdir $@) $(KUBERNETES_VERSION) into $(TOOLS) (once; takes a few minutes)"
	cd deploy/k8s && $(GO) build -trimpath -ldflags '$(KUBE_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$(notdir $@)

# containerd, runc and the CNI plugins from Debian for the single-node
# cluster, unpacked into .tools/debian (nothing installed, no service).
CLUSTER_DEBS := containerd=1.6.20~ds1-1+deb12u3 runc=1.1.5+ds1-1+deb12u1 containernetworking-plugins=1.1.1+ds1-3+b5
DEBIAN_ROOT  := $(abspath $(TOOLS)/../debian)
$(DEBIAN_ROOT)/.stamp:
	@mkdir -p $(DEBIAN_ROOT)/debs
	cd $(DEBIAN_ROOT)/debs && apt-get download -qq -o APT::Sandbox::User=root $(CLUSTER_DEBS)
	for d in $(DEBIAN_ROOT)/debs/*.deb; do dpkg-deb -x "$$d" $(DEBIAN_ROOT)/root; done
	@touch $@

helm: $(TOOLS)/helm
kube-apiserver: $(TOOLS)/kube-apiserver
kubelet: $(TOOLS)/kubelet

# The images, as OCI archives in out/images (deploy/images/build.sh):
# hoard (static) and hoard-worker (Debian's python3, boto3, the agent).
# IMAGE_TAG and IMAGE_REPO name them; SOURCE_DATE_EPOCH dates them.
images: venv
	GO=$(GO) PIP=$(VENV)/bin/pip deploy/images/build.sh $(ROOT)/out/images

helm-lint: $(TOOLS)/helm
	$(TOOLS)/helm lint --strict deploy/helm/hoard
	$(TOOLS)/helm lint --strict deploy/helm/hoard -f deploy/helm/hoard/ci/platform-values.yaml
	$(TOOLS)/helm lint --strict deploy/helm/hoard -f deploy/helm/hoard/ci/sidecar-values.yaml
	$(TOOLS)/helm lint --strict deploy/helm/hoard -f deploy/helm/hoard/ci/platform-tls-values.yaml

# The chart on a real control plane: etcd and kube-apiserver, every
# object applied server-side with dry-run (deploy/kubetest); and the
# controller and an agent run as the chart renders them with TLS.
test-kube: helm-lint $(TOOLS)/kube-apiserver $(BIN)
	$(GO) test -tags kube -count=1 -timeout 5m -run 'TestChart' ./deploy/kubetest
	cd deploy/images && $(GO) test -count=1 ./...

# A single-node cluster (docs/kubernetes.md): etcd, kube-apiserver, kubelet,
# containerd and runc, the images imported from out/images; a pod of both
# images runs to completion, the node agent starts jailed in a pod, is
# killed and comes back; then the chart's controller and agents run with
# the controller-manager and scheduler. Needs root; not part of make test.
test-cluster: $(BIN) $(TOOLS)/helm $(TOOLS)/kube-apiserver $(TOOLS)/kubelet $(TOOLS)/kube-controller-manager $(TOOLS)/kube-scheduler \
  $(TOOLS)/minio $(DEBIAN_ROOT)/.stamp images
	HOARD_KUBELET_BIN=$(TOOLS)/kubelet HOARD_KUBE_CONTROLLER_MANAGER_BIN=$(TOOLS)/kube-controller-manager \
	  HOARD_KUBE_SCHEDULER_BIN=$(TOOLS)/kube-scheduler HOARD_DEBIAN_ROOT=$(DEBIAN_ROOT)/root HOARD_IMAGES=$(ROOT)/out/images \
	  $(GO) test -tags kube -count=1 -timeout 8m -run 'TestCluster' -v ./deploy/kubetest

# Redis is the in-memory baseline of the benchmarks.
redis:
	@command -v redis-server >/dev/null || { \
	  echo ">> installing redis-server with apt-get"; \
	  if [ "$$(id -u)" -ne 0 ]; then echo "redis-server is missing and installing it needs root: sudo apt-get install redis-server" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; }

# Headless Chromium loads the benchmark report in the e2e suite
# (python/tests/test_report.py) to check that every plot renders.
chromium:
	@command -v chromium >/dev/null || { \
	  echo ">> installing chromium and chromium-driver with apt-get"; \
	  if [ "$$(id -u)" -ne 0 ]; then echo "chromium is missing and installing it needs root: sudo apt-get install chromium chromium-driver" >&2; exit 1; fi; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# --- python -----------------------------------------------------------------

$(VENV)/.stamp: python/requirements.txt
	@echo ">> installing Python packages into $(VENV)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r python/requirements.txt
	@touch $@

venv: $(VENV)/.stamp

# --- the local default --------------------------------------------------------

up: $(BIN) $(TOOLS)/minio venv
	$(BIN) up --demo

down: $(BIN)
	$(BIN) down

# --- tests --------------------------------------------------------------------

test: test-unit test-integration test-e2e test-bench-smoke test-kube

test-unit:
	$(GO) test -race -count=1 ./...

test-integration: $(BIN) $(TOOLS)/minio $(TOOLS)/versitygw $(TOOLS)/toxiproxy-server chromium
	$(GO) test -tags integration -count=1 -timeout 15m ./...

test-e2e: $(BIN) $(TOOLS)/minio $(TOOLS)/versitygw venv chromium
	HOARD_E2E_STORE=minio     $(VENV)/bin/pytest -q python/tests
	HOARD_E2E_STORE=versitygw $(VENV)/bin/pytest -q python/tests

# The benchmark harness runs end to end (tiny sizes; Redis left out so
# the suite needs no root). Figures from this run mean nothing. The
# pipelines experiment runs the platform (the store behind toxiproxy).
test-bench-smoke: $(BIN) $(TOOLS)/minio $(TOOLS)/toxiproxy-server venv
	$(BIN) bench access --quick --sizes 4KiB,1MiB --targets store,store-304,store-http,store-304-http,cold,warm,warm-local,remote-hit,remote-miss,owner-hit,owner-remote-hit,tcp --boto3=false >/dev/null
	$(BIN) bench consistency --increments 50 >/dev/null
	$(BIN) bench disk --objects 6 --size 256KiB --passes 1 --preset local >/dev/null
	$(BIN) bench changes --writes 3 --reads 20 >/dev/null
	$(BIN) bench writes --sizes 4KiB,1MiB --writes 5 >/dev/null
	$(BIN) bench durable --duration 3s --kill-every 1s --keys 6 --only durable >/dev/null
	$(BIN) bench ranges --min-size 12MiB --max-size 16MiB --ranges 4 --max-range 4MiB --max-object 8MiB >/dev/null
	$(BIN) bench throughput --connections 4 --duration 200ms --warmup 50ms --targets bare-http,bare-http-proc,minio,hoard-local,hoard-strong-hot,hoard-strong-many >/dev/null
	tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	  { $(BIN) bench all --quick --only consistency,pipelines --report "$$tmp/report" >"$$tmp/log" 2>&1 || { cat "$$tmp/log"; exit 1; }; } && \
	  test -s "$$tmp/report/index.html" && test -s "$$tmp/report/report.md" && ls "$$tmp"/report/plots/*.png >/dev/null && \
	  ls "$$tmp"/report/plots/pipelines-*.png >/dev/null && grep -q "Data-transfer time per stage" "$$tmp/report/report.md"

# Short fuzzing of the request parsers, the block format, the disk tier's files, function-tree
# states and media headers, beyond their seed corpora (the block format's inputs are large:
# minimizing each new one for the default 60 s would use the time).
fuzz:
	$(GO) test -run XXX -fuzz FuzzChunkedDecoder -fuzztime 30s ./internal/s3auth
	$(GO) test -run XXX -fuzz FuzzParseRange -fuzztime 30s ./internal/s3api
	$(GO) test -run XXX -fuzz FuzzServeHTTP -fuzztime 60s ./internal/s3api
	$(GO) test -run XXX -fuzz FuzzVerify -fuzztime 30s ./internal/s3auth
	$(GO) test -run XXX -fuzz FuzzReader -fuzztime 30s -fuzzminimizetime 2s ./internal/blockfmt
	$(GO) test -run XXX -fuzz FuzzParse -fuzztime 15s ./internal/ftree
	$(GO) test -run XXX -fuzz FuzzOpen -fuzztime 30s ./internal/disktier
	$(GO) test -run XXX -fuzz FuzzOpen -fuzztime 30s ./internal/writelog
	$(GO) test -run XXX -fuzz FuzzSniff -fuzztime 30s ./internal/media

lint: $(TOOLS)/staticcheck venv helm-lint
	@out=$$(gofmt -l cmd internal deploy); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags integration ./...
	$(GO) vet -tags kube ./deploy/kubetest
	$(TOOLS)/staticcheck ./...
	$(TOOLS)/staticcheck -tags kube ./deploy/kubetest
	cd deploy/images && $(GO) vet ./... && $(TOOLS)/staticcheck ./...
	$(VENV)/bin/ruff check python examples
	$(VENV)/bin/ruff format --check python examples

bench: $(BIN) $(TOOLS)/minio $(TOOLS)/toxiproxy-server redis venv
	$(BIN) bench access

clean:
	rm -rf bin
