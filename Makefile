# sidelock — the two commands a newcomer needs are `make run` and `make test`.
SHELL := /bin/bash
GO ?= go
# Build paths are trimmed (as in the release builds), so Go's build cache serves a fresh clone in any
# directory: without it every clone recompiles the race-instrumented product (~2 min of CPU here).
export GOFLAGS := $(strip $(GOFLAGS) -trimpath)
PKGS := ./...
# VERSION is the one version of the binary, the image, the chart and both clients (the file
# VERSION; `make version VERSION=vX.Y.Z` rewrites every copy, `make release VERSION=vX.Y.Z` stamps them).
VERSION ?= $(file < VERSION)
LDFLAGS := -s -w -X main.version=$(VERSION)
FUZZTIME ?= 10s
BENCHTIME ?= 1s
BENCHCOUNT ?= 3
GOLANGCI_VERSION ?= v2.6.2
GOLANGCI := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)
# TOOLS is the module of the benchmarks, the report and the cost model (tools/go.mod), kept out of
# the product's go.mod; its targets run inside it, with paths relative to it. TOOLS_UNIT are its
# quick unit tests (test-unit); its benchmarks run in bench-smoke, bench and scale-sim.
TOOLS := tools
TOOLS_UNIT := ./scale-model ./report ./scale ./benchread ./floor/... ./release
# Each mk/*.mk owns one area's targets (release and image, spec, clients, monitoring); a target that
# belongs in `make test` adds itself to TEST_MORE there, and the target installing what it needs
# (apt-get, npm) to TEST_TOOLS, which `make test` runs first, one at a time.
TEST_MORE :=
TEST_TOOLS :=

# need-deb COMMAND,PACKAGE: install Debian's PACKAGE when COMMAND (a command, or a path) is missing:
# as root with apt-get, else with password-less sudo, else stop with the command to run. The one
# install rule of every target that needs a tool (redis-server, runc, nodejs, promtool, ...).
define need-deb
	@if command -v $(1) >/dev/null 2>&1 || [ -e $(1) ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "$(1) is missing: installing Debian's $(2) package"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
		echo "$(1) is missing: installing Debian's $(2) package with sudo"; \
		sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(2) >/dev/null; \
	else \
		echo "$(1) is missing and cannot be installed here: run 'sudo apt-get install $(2)' (Debian/Ubuntu) and try again" >&2; exit 1; \
	fi; \
	command -v $(1) >/dev/null 2>&1 || [ -e $(1) ] || { echo "$(1) still missing after installing Debian's $(2)" >&2; exit 1; }
endef

include $(sort $(wildcard mk/*.mk))

.PHONY: help docs-config run test test-unit test-load bench-smoke fuzz-smoke sim chaos chaos-ci soak abuse vulncheck build check-fmt vet lint bench scale-sim fuzz cover image e2e e2e-node helm-lint k8s-validate test-deploy redis-server clean

## help: this list: every target with a `##` comment.
help:
	@awk '/^## / { line = $$0; sub(/^## /, "", line); \
	       if (prev !~ /^## / && match(line, /^[a-z0-9, -]+:/)) printf "  %-12s %s\n", substr(line, 1, RLENGTH - 1), substr(line, RLENGTH + 2); \
	       else if (prev ~ /^## /) printf "  %-12s %s\n", "", line } \
	     { prev = $$0 }' $(MAKEFILE_LIST)

## run: sidelock in dev mode (3 in-memory masters), nothing to install.
run:
	$(GO) run ./cmd/sidelock -dev

## test: formatting, vet, and every test with the race detector, against real redis-server processes:
## the steps that judge no timing side by side (TEST_JOBS at a time; each one's output in one piece
## when it ends), then test-load and chaos-ci, which judge the sidecar's speed, each alone.
TEST_JOBS ?= 8
TEST_SIDE_BY_SIDE := test-unit test-deploy bench-smoke fuzz-smoke $(TEST_MORE)
test: redis-server check-fmt vet $(TEST_TOOLS)
	$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target $(TEST_SIDE_BY_SIDE)
	$(MAKE) --no-print-directory test-load
	$(MAKE) --no-print-directory chaos-ci

# test-unit leaves ./clients to clients-test (mk/clients.mk), which requires python3 and node; the
# README's walkthrough (TestReadmeWalkthrough) runs with curl.
test-unit:
	$(call need-deb,curl,curl)
	$(GO) test -race -count=1 -timeout 10m $$($(GO) list $(PKGS) | grep -v '/clients$$')
	cd $(TOOLS) && $(GO) test -race -count=1 -timeout 5m $(TOOLS_UNIT)

# test-load runs the tests that judge the sidecar's own speed under a burst (overload answered 429, never
# no_quorum; heartbeats kept) and under a CPU quota (no healthy master called down): without the race
# detector, which slows the sidecar about tenfold.
test-load:
	$(GO) test -count=1 -timeout 5m -run 'TestBurstOfTryOnceIsOverloadNotNoQuorum|TestMastersDownIsNoQuorumNotOverload' ./httpapi
	$(GO) test -count=1 -timeout 5m -run '^TestStarvedSidecarCallsNoHealthyMasterDown$$' ./cmd/sidelock

# bench-smoke runs every benchmark of tools/bench once so they keep working; figures come from `make bench`.
# -short cuts their measurement windows and settling pauses to a tenth (tools/bench: measured).
# (BenchmarkScaleSim, minutes long, runs in `make scale-sim`; `make vet` compiles it.)
bench-smoke:
	cd $(TOOLS) && $(GO) test -short -run '^$$' -bench . -benchtime 1x ./bench

# fuzz-smoke runs each HTTP fuzz target briefly; the corpus lives in testdata/. The budget is a count
# of executions, not a duration: with a duration, Go before 1.27 can fail a target with a bare "context
# deadline exceeded" as the time runs out (golang/go#75804; seen here in CI on FuzzDurationGrammar).
fuzz-smoke:
	$(MAKE) --no-print-directory fuzz FUZZTIME=3000x

GOVULNCHECK_VERSION ?= v1.8.0
SOAKTIME ?= 10m
SIMBUDGET ?= 10m
SIMTIME ?= 5m
## sim: the seeded simulation (test/sim: the real lease manager, renewer, queue, locker, health and
## guards over simulated masters with injected faults, in virtual time) on random seeds for SIMBUDGET
## of wall time, SIMTIME of virtual time each, from a fresh base seed (SIM_BASE=N to choose it).
## A failing seed prints its trace and the line that replays it. `make test` runs a 50s budget from seed 1.
sim:
	set -o pipefail; SIM_BASE=$${SIM_BASE:-$$(date +%s)} SIM_BUDGET=$(SIMBUDGET) SIM_TIME=$(SIMTIME) \
	  $(GO) test -count=1 -timeout 0 -run '^TestSim$$' -v ./test/sim 2>&1 | grep -vE '^\s*(=== RUN|--- PASS)'

## chaos: every fault scenario against 5 real masters and 3 sidecar processes (~4 min);
## prints the results table and writes test/chaos/results.md.
chaos: redis-server
	SIDELOCK_CHAOS=full $(GO) test -count=1 -timeout 30m -run TestChaos -v ./test/chaos

## chaos-ci: the CI subset of the chaos suite (~95 s), run on its own (CPU contention looks like faults).
chaos-ci: redis-server
	SIDELOCK_CHAOS=ci $(GO) test -count=1 -timeout 10m -run TestChaos ./test/chaos

## soak: steady mixed load for SOAKTIME, RSS and goroutines over time (not CI); writes test/chaos/soak.md.
soak: redis-server
	SIDELOCK_SOAK=$(SOAKTIME) $(GO) test -count=1 -timeout 40m -run TestSoak -v ./test/chaos

## abuse: load abuse of the built binary over 3 real masters, loopback only (~1 min, not CI): a flood of
## idle connections (ABUSE_CONNS, default 3000) under /healthz probes and heartbeats, RSS per held stream,
## waiter and idle connection against the chart's memory limit, bursts of 1,000 try-once acquires; prints
## the figures and checks, writes test/abuse/results.md. SIDELOCK_ABUSE_BIN=path measures another binary.
abuse: redis-server
	set -o pipefail; SIDELOCK_ABUSE=1 $(if $(ABUSE_CONNS),SIDELOCK_ABUSE_CONNS=$(ABUSE_CONNS)) \
	  $(GO) test -count=1 -timeout 10m -run '^TestAbuse$$' -v ./test/abuse 2>&1 | grep -vE '^\s*(=== RUN|--- PASS)|redis-server .* log tail|^\s+[0-9]+:[CM] '

## vulncheck: known vulnerabilities reachable from the code (needs vuln.go.dev, not reachable here).
vulncheck:
	$(GO) run golang.org/x/vuln/cmd/govulncheck@$(GOVULNCHECK_VERSION) ./...

## build: a static binary in bin/.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/sidelock ./cmd/sidelock

check-fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# vet covers the product, tools/ and the test modules that only make targets run (test/spec,
# test/container); test/deploy and test/k8s-e2e are vetted by their own go test runs.
vet:
	$(GO) vet $(PKGS)
	cd $(TOOLS) && $(GO) vet ./...
	cd test/spec && $(GO) vet ./...
	cd test/container && $(GO) vet ./...

## lint: golangci-lint with .golangci.yml over the product and tools/ (built from the module proxy on first use).
lint:
	$(GOLANGCI) run $(PKGS)
	cd $(TOOLS) && $(GOLANGCI) run --config ../.golangci.yml ./...
	cd test/k8s-e2e && $(GOLANGCI) run --config ../../.golangci.yml ./...

## bench: HTTP and engine benchmarks against real redis-server masters into tools/results/latest.txt,
## benchstat over them (benchstat.txt) and the table of targets (table.md), which also becomes the
## generated section of BENCH_DOCS. A failed run stops before the table, so the docs keep the last good one.
BENCH_DOCS := ../docs/performance.md,../README.md
bench: redis-server
	set -o pipefail; cd $(TOOLS) && $(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count $(BENCHCOUNT) -timeout 30m ./bench | tee results/latest.txt
	cd $(TOOLS) && $(GO) tool benchstat results/latest.txt > results/benchstat.txt
	set -o pipefail; cd $(TOOLS) && $(GO) run ./report -update $(BENCH_DOCS) results/latest.txt | tee results/table.md

## scale-sim: the fleet cost model (docs/scale.md) against a simulated fleet (~4 min): the model's
## inputs (BenchmarkCostModel, 3 runs) into tools/results/model.txt, 10, 100 and 500 in-process
## sidecars over 3 real masters into tools/results/scale.txt, then docs/scale/table.md and scale.png.
## The model takes the inputs measured in the same run, next to the simulation it is checked against.
scale-sim: redis-server
	set -o pipefail; cd $(TOOLS) && $(GO) test -run '^$$' -bench BenchmarkCostModel -benchtime 1s -count 3 -timeout 15m ./bench | tee results/model.txt
	set -o pipefail; cd $(TOOLS) && $(GO) test -run '^$$' -bench BenchmarkScaleSim -benchtime 1x -count 1 -timeout 15m ./scale | tee results/scale.txt
	cd $(TOOLS) && $(GO) run ./scale-model -inputs results/model.txt,results/latest.txt -sim results/scale.txt -png ../docs/scale/scale.png -table ../docs/scale/table.md

## docs-config: regenerate docs/configuration.md from the settings table (internal/config/settings.go);
## a test in make test fails while it is stale.
docs-config:
	UPDATE_GOLDEN=1 $(GO) test -count=1 -run '^TestConfigurationReference$$' ./internal/config

## fuzz: each fuzz target for FUZZTIME (default 10s).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzAcquireParams$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzSemaphoreParams$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzRWLockParams$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzLockSetParams$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzInspectQuery$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzTokenParams$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzHeaders$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzDurationGrammar$$' -fuzztime $(FUZZTIME) ./httpapi
	$(GO) test -run '^$$' -fuzz '^FuzzScanner$$' -fuzztime $(FUZZTIME) ./internal/framing
	$(GO) test -run '^$$' -fuzz '^FuzzValidateName$$' -fuzztime $(FUZZTIME) ./internal/lease
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeReview$$' -fuzztime $(FUZZTIME) ./internal/injector

cover:
	$(GO) test -count=1 -coverprofile=cover.out $(PKGS) && $(GO) tool cover -func=cover.out | tail -1

IMAGE ?= ghcr.io/sidelock/sidelock:$(VERSION)
## image: the container image without Docker (tools/imagebuild, mk/release.mk): dist/oci (linux amd64
## and arm64) and a `docker load` tarball per platform; `docker build .` is the alternative (docs/install.md).
image: release-image

## e2e: the injector and every rendered manifest against a real etcd + kube-apiserver built from the
## Go module proxy into test/k8s-e2e/.cache (git-ignored): ~16 min the first time on 2 cores, ~20 s after.
## Not part of `make test` (too long cold for the default suite).
e2e:
	test/k8s-e2e/tools/build.sh
	cd test/k8s-e2e && $(GO) test -count=1 -timeout 15m ./...

E2E_NODE_DIST := $(DIST)/e2e-node
E2E_NODE_IMAGE := ghcr.io/sidelock/sidelock:e2e-node
## e2e-node: the chart on a real single-node cluster (test/k8s-e2e/node): a kubelet on Debian's
## containerd and runc, the control plane, kube-proxy and CoreDNS built from the Go module proxy,
## this tree's image; scenarios 1-6 of docs/kubernetes.md#tested-on-a-real-node. As root. Not in
## `make test` (a fresh clone takes 10-16 min, mostly building the components).
e2e-node:
	@[ "$$(id -u)" = 0 ] || { echo "make e2e-node runs a kubelet and containerd, which need root" >&2; exit 1; }
	$(call need-deb,containerd,containerd)
	$(call need-deb,/usr/sbin/runc,runc)
	$(call need-deb,/usr/lib/cni/bridge,containernetworking-plugins)
	$(call need-deb,iptables,iptables)
	$(call need-deb,ip,iproute2)
	$(call need-deb,/bin/busybox,busybox-static)
	$(call need-deb,redis-cli,redis-tools)
	$(call need-deb,curl,curl)
	test/k8s-e2e/tools/build.sh node
	$(MAKE) --no-print-directory release-image DIST=$(E2E_NODE_DIST) RELEASE_PLATFORMS= IMAGE_PLATFORMS=linux/$(RELEASE_HOST_ARCH) \
		VERSION=e2e-node IMAGE=$(E2E_NODE_IMAGE)
	cd test/k8s-e2e && SIDELOCK_E2E_NODE=1 SIDELOCK_E2E_NODE_IMAGE_REF=$(E2E_NODE_IMAGE) \
		SIDELOCK_E2E_NODE_IMAGE=$(CURDIR)/$(E2E_NODE_DIST)/sidelock_e2e-node_image_linux_$(RELEASE_HOST_ARCH).tar \
		$(GO) test -count=1 -timeout 30m -v ./node/...

## helm-lint, k8s-validate, test-deploy: the chart, manifests, Dockerfile and skaffold.yaml, rendered
## with the Helm Go SDK / kustomize and strictly decoded into the Kubernetes API types (separate
## module in test/deploy, so the Kubernetes libraries stay out of the binary's go.mod).
helm-lint:
	cd test/deploy && $(GO) test -count=1 -run 'TestChart|TestValues|TestSidecarEnv|TestInject' ./...

k8s-validate:
	cd test/deploy && $(GO) test -count=1 -run 'TestManifests|TestDockerfile|TestDockerignore|TestSkaffold' ./...

test-deploy:
	cd test/deploy && $(GO) test -count=1 ./...

## redis-server: tests start real masters; install Debian's package when missing.
redis-server:
	$(call need-deb,redis-server,redis-server)

clean:
	rm -rf bin dist cover.out
