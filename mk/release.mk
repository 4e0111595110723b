# Release artifacts and the container image, built here without Docker (issue 16, finding 1).
# Everything lands in $(DIST) (git-ignored); docs/install.md says what a maintainer publishes.

DIST := dist
# REVISION and SOURCE_DATE_EPOCH stamp the image (labels, creation time): the same commit gives
# the same image digests.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
# The CLI runs on developers' Macs (sidelock exec); the image and the sidecar are Linux only.
RELEASE_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
RELEASE_HOST_ARCH = $(shell $(GO) env GOARCH)
# `helm package` is the real Helm CLI at the version test/deploy already tests the chart with, built
# with the flags Helm's own release builds set: without them (a plain `go install` or `go run` of
# helm) `helm template` and `helm lint` assume Kubernetes v1.20.0 and refuse this chart (kubeVersion
# >=1.29). Helm's Makefile derives the version from its client-go: v0.N is Kubernetes 1.N.
HELM_VERSION ?= $(shell cd test/deploy && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM_K8S_MINOR = $(shell cd test/deploy && $(GO) list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2)
HELM_LDFLAGS = -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) -X helm.sh/helm/v3/internal/version.metadata= \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$(HELM_K8S_MINOR) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(HELM_K8S_MINOR)
HELM = $(GO) run -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
# Deterministic archives: names sorted, root-owned, stamped with the commit's time.
RELEASE_TAR := tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH)

# The version as each artifact spells it: the chart and npm without the v; Python as PEP 440
# (v1.0.0-rc.1 is 1.0.0rc1). tools/release (Version) is the reference; release-verify checks them.
SEMVER = $(patsubst v%,%,$(VERSION))
PEP440 = $(subst -rc.,rc,$(subst -beta.,b,$(subst -alpha.,a,$(SEMVER))))
CHART_TGZ = sidelock-$(SEMVER).tgz
PY_SDIST = sidelock-$(PEP440).tar.gz
PY_WHEEL = sidelock-$(PEP440)-py3-none-any.whl
NPM_TGZ = sidelock-node-$(SEMVER).tgz
# STAGE holds copies of the chart and the clients with LICENSE added and the version stamped: the
# packages are built from them, never from the tree.
STAGE = $(DIST)/stage
comma := ,
space := $(subst ,, )

.PHONY: release release-bin release-chart release-clients release-verify release-install-test release-image \
	image-test image-test-tools release-tools clients-dist-test clients-dist-tools install-test helm version

## version: write VERSION=vX.Y.Z into VERSION and every copy of it (the chart's version and appVersion,
## both clients, the docs); `make test` fails while one disagrees (tools/release, TestVersionsAgree).
version:
	cd $(TOOLS) && $(GO) run ./release stamp -version $(VERSION)

## release: everything a GitHub release holds, into dist/, all of VERSION (make release VERSION=vX.Y.Z;
## default: the file VERSION), each with LICENSE: static binaries (linux amd64/arm64, the CLI for
## darwin amd64/arm64) as tar.gz, the packaged Helm chart, the OCI image (dist/oci, a multi-arch
## layout) with a `docker load` tarball per platform, the Python sdist and wheel, the npm tarball, and
## SHA256SUMS over the files; then release-verify checks every one of them.
release: release-bin release-chart release-image release-clients
	cd $(DIST) && sha256sum sidelock_$(VERSION)_*.tar.gz sidelock_$(VERSION)_image_*.tar $(CHART_TGZ) \
		$(PY_SDIST) $(PY_WHEEL) $(NPM_TGZ) > SHA256SUMS
	@$(MAKE) --no-print-directory release-verify
	@echo "dist/: $$(cd $(DIST) && ls -m sidelock* SHA256SUMS)"

## release-verify: every artifact of dist/ holds LICENSE and says VERSION (binaries, chart, image
## labels, Python and npm packages), SHA256SUMS lists them, the packaged chart lints and renders with
## its defaults, and the packages install into a clean virtualenv (no index) and an empty npm project
## and run their example against this platform's released binary (release-install-test).
release-verify: release-install-test
	cd $(TOOLS) && $(GO) run ./release verify -dist $(CURDIR)/$(DIST) -version $(VERSION) \
		-platforms $(subst $(space),$(comma),$(sort $(RELEASE_PLATFORMS) $(IMAGE_PLATFORMS))) \
		-images $(subst $(space),$(comma),$(IMAGE_PLATFORMS)) -chart -clients -sums
	$(HELM) lint $(DIST)/$(CHART_TGZ)
	$(HELM) template sidelock $(DIST)/$(CHART_TGZ) > /dev/null

# release-install-test: the install test on dist/'s packages, with the sidecar binary from this
# platform's release archive.
release-install-test: redis-server clients-tools
	rm -rf $(DIST)/install-bin && mkdir -p $(DIST)/install-bin
	tar -xzf $(DIST)/sidelock_$(VERSION)_linux_$(RELEASE_HOST_ARCH).tar.gz -C $(DIST)/install-bin sidelock
	$(MAKE) --no-print-directory install-test PACKAGES=$(DIST) SIDELOCK_BIN=$(CURDIR)/$(DIST)/install-bin/sidelock

# release-bin: each platform's static binary in dist/build/OS_ARCH/, and its archive (with LICENSE).
release-bin:
	@set -e; for p in $(sort $(RELEASE_PLATFORMS) $(IMAGE_PLATFORMS)); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(DIST)/build/$${os}_$${arch}; \
		echo "go build $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$out/sidelock ./cmd/sidelock; \
		cp LICENSE $$out/LICENSE; \
		$(RELEASE_TAR) -C $$out -cf - LICENSE sidelock | gzip -n > $(DIST)/sidelock_$(VERSION)_$${os}_$${arch}.tar.gz; \
	done

# release-chart: `helm package` of a staged copy with LICENSE, the release's version as the chart's
# version and appVersion (the sidecar's default image tag).
release-chart:
	rm -rf $(STAGE)/charts $(DIST)/$(CHART_TGZ) && mkdir -p $(STAGE)/charts
	cp -R charts/sidelock $(STAGE)/charts/ && cp LICENSE $(STAGE)/charts/sidelock/
	$(HELM) package $(STAGE)/charts/sidelock --version $(SEMVER) --app-version $(VERSION) --destination $(DIST)

## release-clients: the Python sdist and wheel (clients/python's own backend, standard library only)
## and the npm tarball, into dist/, built from staged copies with LICENSE and VERSION stamped.
release-clients: clients-tools
	rm -rf $(STAGE)/clients $(STAGE)/npm && mkdir -p $(STAGE)/clients $(STAGE)/npm $(DIST)
	tar -C clients --exclude=__pycache__ --exclude=node_modules --exclude=test --exclude=tests --exclude='*.tgz' \
		-cf - python node | tar -C $(STAGE)/clients -xf -
	cp LICENSE $(STAGE)/clients/python/ && cp LICENSE $(STAGE)/clients/node/
	cd $(TOOLS) && $(GO) run ./release stamp -root $(CURDIR)/$(STAGE) -version $(VERSION)
	cd $(STAGE)/clients/python && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) python3 backend/sidelock_build.py $(CURDIR)/$(DIST)
	cd $(STAGE)/clients/node && npm pack --silent --pack-destination $(CURDIR)/$(STAGE)/npm > /dev/null
	mv $(STAGE)/npm/sidelock-$(SEMVER).tgz $(DIST)/$(NPM_TGZ)

# CLIENTS_TEST_DIST is where make test builds the client packages (never a release's files).
CLIENTS_TEST_DIST := $(DIST)/clients-test

## clients-dist-test: the Python sdist and wheel and the npm tarball built as make release builds
## them, checked (LICENSE, VERSION) and installed into a fresh virtualenv with no package index and
## an empty npm project, each running its example against a real sidecar (~30 s; in make test).
clients-dist-test: redis-server clients-tools
	$(MAKE) --no-print-directory release-clients DIST=$(CLIENTS_TEST_DIST)
	cd $(TOOLS) && $(GO) run ./release verify -dist $(CURDIR)/$(CLIENTS_TEST_DIST) -version $(VERSION) -clients
	$(MAKE) --no-print-directory install-test PACKAGES=$(CLIENTS_TEST_DIST)

TEST_MORE += clients-dist-test
TEST_TOOLS += clients-dist-tools

# clients-dist-tools installs what install-test needs (Debian's python3-venv) when missing.
clients-dist-tools:
	$(call need-deb,/usr/share/doc/python3-venv,python3-venv)

# install-test: TestInstalledPackages on PACKAGES (a dir with the sdist, the wheel and the npm
# tarball), over 3 real masters and SIDELOCK_BIN (default: built from the tree).
install-test:
	$(call need-deb,/usr/share/doc/python3-venv,python3-venv)
	set -o pipefail; SIDELOCK_PACKAGES=$(CURDIR)/$(PACKAGES) $(if $(SIDELOCK_BIN),SIDELOCK_BIN=$(SIDELOCK_BIN)) \
		$(GO) test -count=1 -timeout 5m -v -run '^TestInstalledPackages$$' ./clients 2>&1 | \
		grep -vE '^\s*(=== RUN|--- PASS)|redis-server .* log tail|^\s+[0-9]+:[CM] '

## helm: a Helm CLI in bin/ built as make release builds it (the official builds' Kubernetes version
## flags), for rendering the chart by hand: bin/helm template sidelock charts/sidelock.
helm:
	GOBIN=$(CURDIR)/bin $(GO) install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

# release-image: the OCI image from the linux binaries (tools/imagebuild; user, entrypoint, ports
# and labels come from the Dockerfile's runtime stage).
release-image: release-bin release-tools
	cd $(TOOLS) && $(GO) run ./imagebuild -dockerfile ../Dockerfile -version $(VERSION) -revision $(REVISION) \
		-source-date-epoch $(SOURCE_DATE_EPOCH) $(foreach p,$(IMAGE_PLATFORMS),-bin $(p)=$(CURDIR)/$(DIST)/build/$(subst /,_,$(p))/sidelock) \
		-oci $(CURDIR)/$(DIST)/oci -archive '$(CURDIR)/$(DIST)/sidelock_$(VERSION)_image_%s_%s.tar' -tag $(IMAGE)

# release-tools: Debian's CA certificates, copied into the image.
release-tools:
	$(call need-deb,/etc/ssl/certs/ca-certificates.crt,ca-certificates)

# image-test builds into a directory of its own, so it never changes a release's files.
IMAGE_TEST_DIST := $(DIST)/image-test
# image-test takes ~20 s with a warm Go cache (~5.5 min cold), so it runs in make test.
TEST_MORE += image-test
TEST_TOOLS += image-test-tools

# image-test-tools installs Debian's runc (and the image's CA certificates) when missing.
image-test-tools: release-tools
	$(call need-deb,runc,runc)

## image-test: the image of this machine's platform built as in `make release`, run as a real
## container with runc (installed from Debian when missing) over 3 real masters: /healthz, /readyz,
## a lock from outside, uid 65532, read-only root, exit 0 on SIGTERM (test/container).
image-test: redis-server image-test-tools
	$(MAKE) --no-print-directory release-image DIST=$(IMAGE_TEST_DIST) RELEASE_PLATFORMS= IMAGE_PLATFORMS=linux/$(RELEASE_HOST_ARCH)
	cd $(TOOLS) && $(GO) test -count=1 ./imagebuild
	cd test/container && SIDELOCK_IMAGE_TEST=$(CURDIR)/$(IMAGE_TEST_DIST)/oci SIDELOCK_IMAGE_REF=$(VERSION) \
		$(GO) test -count=1 -timeout 5m ./...
