# meshlet — build, test, lint. Everything runs as root on Debian/Ubuntu; the
# kernel tests (network namespaces, fd passing) need it.

GO            ?= go
CACHE_DIR     ?= $(HOME)/.cache/meshlet
PROTOC_GEN_GO_VERSION := v1.36.12
STATICCHECK_VERSION   := v0.8.2
GOVULNCHECK_VERSION   := v1.9.0
BENCHSTAT_VERSION     := v0.0.0-20260908200009-22c9c6c9d4da
# The vulnerability database: golang.org/x/vulndb's OSV files at this
# version (the module proxy serves it), indexed for govulncheck.
VULNDB_VERSION        := v0.0.0-20261105234957-e22db6528018
PROTOC_GEN_GO := $(CACHE_DIR)/tools/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)/protoc-gen-go
STATICCHECK   := $(CACHE_DIR)/tools/staticcheck-$(STATICCHECK_VERSION)/staticcheck
GOVULNCHECK   := $(CACHE_DIR)/tools/govulncheck-$(GOVULNCHECK_VERSION)/govulncheck
BENCHSTAT     := $(CACHE_DIR)/tools/benchstat-$(BENCHSTAT_VERSION)/benchstat
# make bench's figures on this machine, committed: bench.txt is compared
# with them.
BENCH_BASELINE := test/bench/baseline.txt
VULNDB        := $(CACHE_DIR)/tools/vulndb-$(VULNDB_VERSION)
CHART         := deploy/charts/meshlet
HELM_PROFILES := containerd k3s
BIN           := bin
# The build tags of every meshlet binary (internal/buildflags.Tags, which
# the image and the tests build with; TestMakefileBuildTags checks the two
# agree).
GO_TAGS       := grpcnotrace
# The version images and binaries are stamped with: the tag on HEAD, else dev.
VERSION       ?= $(shell git describe --tags --exact-match 2>/dev/null || echo dev)
# A cold machine builds the image inside the image test and meshlet inside
# the end-to-end tests, beside each other: more than go test's default 10
# minutes each. go test's own vet pass is off: make lint runs go vet whole.
TEST_FLAGS    ?= -race -count=1 -timeout 60m -vet=off
# The runtime make demo runs (containerd, containerd-1.7, crio) and the
# installer variable of the one it builds besides containerd 2.x.
DEMO_RUNTIME  ?= containerd
DEMO_RUNTIME_BIN_VAR = $(if $(filter crio,$(DEMO_RUNTIME)),MESHLET_CRIO_BIN,$(if $(filter containerd-1.7,$(DEMO_RUNTIME)),MESHLET_CONTAINERD17_BIN))
# The image's architecture make test builds and checks: the host's, if the
# image has it (else amd64; each other one is a cold cross-build of meshlet
# of several CPU-minutes); make image-test builds and checks every one, the
# others under qemu.
HOST_ARCH     := $(shell $(GO) env GOARCH)
IMAGE_TEST_PLATFORMS ?= linux/$(if $(filter amd64 arm64,$(HOST_ARCH)),$(HOST_ARCH),amd64)
PROTOS        := agent/zds/zdspb/zds.proto

.PHONY: all build version image image-test test bench bench-baseline soak fuzz lint generate verify-generated manifests docs deps demo demo-dra demo-cni clean

all: build

## build: compile every package, the daemon, meshlet-cni and meshlet-gate
## (which it installs from next to itself: the CNI plugin in CNI mode, the
## mesh device's container hook with DRA), and the kubectl plugin
## kubectl-meshlet (docs/kubectl-plugin.md) into bin/
build:
	$(GO) build ./...
	$(GO) build -tags $(GO_TAGS) -o $(BIN)/meshlet ./cmd/meshlet
	CGO_ENABLED=0 $(GO) build -tags $(GO_TAGS) -trimpath -ldflags '-s -w' -o $(BIN)/meshlet-cni ./cmd/meshlet-cni
	CGO_ENABLED=0 $(GO) build -tags $(GO_TAGS) -trimpath -ldflags '-s -w' -o $(BIN)/meshlet-gate ./cmd/meshlet-gate
	CGO_ENABLED=0 $(GO) build -tags $(GO_TAGS) -trimpath -ldflags '-X github.com/meshlet/meshlet/internal/version.Version=$(VERSION)' -o $(BIN)/kubectl-meshlet ./cmd/kubectl-meshlet

## version: print the version make image tags and stamps (git describe
## --tags --exact-match, else dev; VERSION=... overrides)
version:
	@echo $(VERSION)

## image: meshlet's multi-arch (linux/amd64, linux/arm64) OCI image, built
## without Docker by hack/mkimage: bin/meshlet-image.tar, named
## localhost/meshlet/meshlet:$(VERSION) (ctr -n k8s.io images import it);
## reproducible (SOURCE_DATE_EPOCH, else the commit time). Needs a Debian
## host for the iptables layer (MKIMAGE_FLAGS=-iptables=false without it)
image:
	$(GO) run ./hack/mkimage -version $(VERSION) -o $(BIN)/meshlet-image.tar $(MKIMAGE_FLAGS)

## deps: install the system packages and Go tools the tests and lint need
deps:
	./hack/install-deps.sh

## test: every test tier (unit, kernel, end to end on real runtimes:
## containerd 2.x, containerd 1.7 and CRI-O, a real single-node cluster); as
## root nothing is skipped. hack/test.sh builds the third-party binaries the
## tests run and runs the tests in phases: the end-to-end tests that need
## only containerd while the control plane, the kubelet and helm, then the
## other runtimes, build beside them; then the rest of the end-to-end
## tests, with every other package (the image's build for the host among
## them) and the tests every runtime runs beside them
test: deps
	MESHLET_IMAGE_TEST_PLATFORMS="$(IMAGE_TEST_PLATFORMS)" GO=$(GO) ./hack/test.sh $(TEST_FLAGS)

## image-test: the image test for every architecture the image has (make
## test checks the host's): cross-built, assembled twice to the same bytes,
## each architecture's commands run in a chroot of it (qemu-user-static for
## the others), the archive imported into a real containerd
image-test: deps
	MESHLET_E2E_BIN="$$(test/env/install-runtime.sh | tail -n 1)" && export MESHLET_E2E_BIN && \
	  MESHLET_IMAGE_TEST_PLATFORMS= $(GO) test -count=1 -timeout 60m ./hack/mkimage/

## bench: every benchmark with a latency or cost target, repeated for
## benchstat (bench.txt); then the headline figures against their goals
## (hack/benchfigures) and benchstat against the committed baseline
## (BENCH_BASELINE; make bench-baseline replaces it with bench.txt)
# A benchmark that fails fails make bench, through the pipe into tee too.
bench: SHELL := /bin/bash
bench: .SHELLFLAGS := -o pipefail -c
bench: deps $(BENCHSTAT)
	env="$$(./hack/install-test-bins.sh)" && eval "$$env" && \
	istiorules="$$(test/env/install-istio-rules.sh | tail -n 1)" && { \
	  $(GO) test -run '^$$' -bench . -benchmem -count 10 ./agent/enroll/ ./agent/zds/ && \
	  $(GO) test -run '^$$' -bench . -benchtime 100x -count 3 ./cnifallback/chaintest/ && \
	  $(GO) test -run '^$$' -bench . -benchtime 300x -count 6 ./agent/redirect/ && \
	  "$$istiorules" -n 300 -count 6 && \
	  $(GO) test -run '^$$' -bench EnrollSerial -benchtime 1000x -count 3 ./agent/ && \
	  $(GO) test -run '^$$' -bench SynchronizeAdopts -benchtime 3x -count 3 ./agent/ && \
	  $(GO) test -run '^$$' -bench . -benchtime 200x -count 6 ./agent/kube/ && \
	  $(GO) test -run '^$$' -bench RunPodSandbox -benchtime 100x -count 6 ./test/e2e/ && \
	  $(GO) test -run '^$$' -bench 'DRA|GateContainerStart' -benchtime 20x -count 2 ./test/e2e/ && \
	  $(GO) test -run '^$$' -bench 'MeshletMemory/.*/pods=100$$' -benchtime 1x -count 6 ./test/e2e/ && \
	  $(GO) test -run '^$$' -bench 'MeshletMemory/.*/pods=1000$$' -benchtime 1x -count 1 ./test/e2e/ && \
	  $(GO) test -run '^$$' -bench Soak -benchtime 20x -count 1 ./test/e2e/ && \
	  CGO_ENABLED=0 $(GO) build -tags $(GO_TAGS) -trimpath -ldflags '-s -w' -o $(BIN)/meshlet-stripped ./cmd/meshlet && \
	  echo "BenchmarkStrippedBinary/meshlet 1 $$(stat -c %s $(BIN)/meshlet-stripped) bytes" ; } | tee bench.txt
	$(GO) run ./hack/benchfigures bench.txt
	$(BENCHSTAT) $(BENCH_BASELINE) bench.txt

## bench-baseline: bench.txt becomes the committed baseline
bench-baseline:
	cp bench.txt $(BENCH_BASELINE)

## soak: 2,000 pod create/delete cycles on the real runtime (SOAK_CYCLES);
## meshlet's memory, goroutines, descriptors, probe SNAT entries and pods
## are printed as a series and must stay flat (about 15 minutes)
SOAK_CYCLES ?= 2000
soak: deps
	MESHLET_E2E_BIN="$$(test/env/install-runtime.sh | tail -n 1)" && export MESHLET_E2E_BIN && \
	  $(GO) test -run '^$$' -bench BenchmarkSoak -benchtime $(SOAK_CYCLES)x -timeout 90m -v ./test/e2e/

## fuzz: every Go fuzz target, FUZZTIME each (default 30s), on top of its
## committed seeds; prints each target's executions (CI: 10s each)
fuzz:
	./hack/fuzz.sh

## lint: formatting, vet, staticcheck, generated code up to date;
## govulncheck (fails on a known vulnerability the code reaches in a
## required module, warns on the standard library's); the Helm chart
## linted with each profile, and its rendering (the manifests in deploy/
## and the golden files) checked: up to date, every object decoded strictly
## with the Kubernetes API types, bad values refused
lint: deps $(STATICCHECK) $(GOVULNCHECK) $(VULNDB)/index/db.json verify-generated
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	$(STATICCHECK) ./...
	@mkdir -p $(BIN)
	$(GOVULNCHECK) -db file://$(VULNDB) -format json ./... > $(BIN)/govulncheck.json
	$(GO) run ./hack/vulnreport < $(BIN)/govulncheck.json
	MESHLET_HELM="$$(hack/install-helm.sh | tail -n 1)" && export MESHLET_HELM && \
	  for profile in $(HELM_PROFILES); do "$$MESHLET_HELM/helm" lint --strict $(CHART) --set profile=$$profile || exit 1; done && \
	  $(GO) test -count=1 ./internal/helmchart/

## manifests: render deploy/*.yaml and the chart's golden files
## (deploy/charts/meshlet/testdata) from the Helm chart
manifests:
	MESHLET_HELM="$$(hack/install-helm.sh | tail -n 1)" $(GO) run ./hack/manifests

## docs: rewrite docs/flags.md from the flags meshlet registers (a test
## fails while it differs)
docs:
	$(GO) test -count=1 -run '^TestFlagReference$$' ./cmd/meshlet -update

## generate: regenerate Go code from the .proto files
generate: deps $(PROTOC_GEN_GO)
	protoc --plugin=protoc-gen-go=$(PROTOC_GEN_GO) --go_out=. --go_opt=paths=source_relative $(PROTOS)

## verify-generated: fail if the committed generated code is stale
verify-generated: generate
	@git diff --exit-code -- $(PROTOS:.proto=.pb.go) || { echo "generated code is stale: run make generate and commit"; exit 1; }

$(PROTOC_GEN_GO):
	GOBIN=$(dir $@) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(STATICCHECK):
	GOBIN=$(dir $@) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

$(BENCHSTAT):
	GOBIN=$(dir $@) $(GO) install golang.org/x/perf/cmd/benchstat@$(BENCHSTAT_VERSION)

$(GOVULNCHECK):
	GOBIN=$(dir $@) $(GO) install golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION)

$(VULNDB)/index/db.json:
	GO=$(GO) ./hack/build-vulndb.sh $(VULNDB_VERSION) $(VULNDB)

## demo: a real containerd with NRI (DEMO_RUNTIME=containerd-1.7 or
## DEMO_RUNTIME=crio: that runtime), meshlet and a ztunnel stand-in; a mesh
## pod and a plain pod; an account of what happened; then clean up
demo: deps
	env="$$(./hack/install-test-bins.sh MESHLET_E2E_BIN $(DEMO_RUNTIME_BIN_VAR))" && eval "$$env" && \
	  $(GO) run ./examples/demo --runtime $(DEMO_RUNTIME)

## demo-dra: the same runtime under a single-node cluster; meshlet as the DRA
## driver mesh.meshlet.dev; a pod asking for mesh.meshlet.dev/mesh: 1; the
## slice, the claim, ztunnel's Add and the pod's rules explained; then clean up
demo-dra: deps
	MESHLET_E2E_BIN="$$(test/env/install-runtime.sh | tail -n 1)" && export MESHLET_E2E_BIN && \
	MESHLET_CLUSTER_BIN="$$(test/env/install-cluster.sh | tail -n 1)" && export MESHLET_CLUSTER_BIN && \
	  $(GO) run ./examples/demo-dra

## demo-cni: CNI mode: containerd with NRI disabled and a real API server;
## meshlet (--mode auto) chains meshlet-cni, enrolls a mesh pod, re-asserts a
## rewritten conflist, and a mesh pod is refused while meshlet is away
demo-cni: deps
	MESHLET_E2E_BIN="$$(test/env/install-runtime.sh | tail -n 1)" && export MESHLET_E2E_BIN && \
	MESHLET_KUBE_BIN="$$(test/env/install-kube.sh | tail -n 1)" && export MESHLET_KUBE_BIN && \
	  $(GO) run ./examples/demo-cni

clean:
	rm -rf $(BIN) bench.txt
