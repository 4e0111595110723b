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
# `helm package` is the real Helm CLI at the version test/deploy already tests the chart with.
HELM_VERSION ?= $(shell cd test/deploy && $(GO) list -m -f '{{.Version}}' helm.sh/helm/v3)
HELM := $(GO) run helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)
# Deterministic archives: names sorted, root-owned, stamped with the commit's time.
RELEASE_TAR := tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH)

.PHONY: release release-bin release-chart release-image image-test release-tools image-test-tools

## release: everything a GitHub release holds, into dist/: static binaries (linux amd64/arm64, the
## CLI for darwin amd64/arm64) as tar.gz, the packaged Helm chart, the OCI image (dist/oci, a
## multi-arch layout) with a `docker load` tarball per platform, and SHA256SUMS over the files.
release: release-bin release-chart release-image
	cd $(DIST) && sha256sum sidelock_$(VERSION)_*.tar.gz sidelock_$(VERSION)_image_*.tar sidelock-*.tgz > SHA256SUMS
	@echo "dist/: $$(cd $(DIST) && ls -m sidelock* SHA256SUMS)"

# release-bin: each platform's static binary in dist/build/OS_ARCH/, and its archive.
release-bin:
	@set -e; for p in $(sort $(RELEASE_PLATFORMS) $(IMAGE_PLATFORMS)); do \
		os=$${p%/*}; arch=$${p#*/}; out=$(DIST)/build/$${os}_$${arch}; \
		echo "go build $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $$out/sidelock ./cmd/sidelock; \
		$(RELEASE_TAR) -C $$out -cf - sidelock | gzip -n > $(DIST)/sidelock_$(VERSION)_$${os}_$${arch}.tar.gz; \
	done

# release-chart: `helm package`, with the release's version as the chart's appVersion (the
# sidecar's default image tag).
release-chart:
	@mkdir -p $(DIST) && rm -f $(DIST)/sidelock-*.tgz
	$(HELM) package charts/sidelock --app-version $(VERSION) --destination $(DIST)

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

# image-test-tools installs Debian's runc when missing.
image-test-tools:
	$(call need-deb,runc,runc)

## image-test: the image of this machine's platform built as in `make release`, run as a real
## container with runc (installed from Debian when missing) over 3 real masters: /healthz, /readyz,
## a lock from outside, uid 65532, read-only root, exit 0 on SIGTERM (test/container).
image-test: redis-server image-test-tools
	$(MAKE) --no-print-directory release-image DIST=$(IMAGE_TEST_DIST) RELEASE_PLATFORMS= IMAGE_PLATFORMS=linux/$(RELEASE_HOST_ARCH)
	cd $(TOOLS) && $(GO) test -count=1 ./imagebuild
	cd test/container && SIDELOCK_IMAGE_TEST=$(CURDIR)/$(IMAGE_TEST_DIST)/oci SIDELOCK_IMAGE_REF=$(VERSION) \
		$(GO) test -count=1 -timeout 5m ./...
