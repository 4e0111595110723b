# syntax=docker/dockerfile:1

# sidelock container image.
#   docker build --build-arg VERSION=$(cat VERSION) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t sidelock .
# Needs BuildKit (cache/bind mounts); the result is a static binary on distroless.

# Keep in step with the `go` directive of go.mod (test/deploy checks this).
ARG GO_VERSION=1.26

# The builder runs natively and cross-compiles (CGO is off), so multi-arch
# builds do not go through QEMU.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src

# Fetch modules in their own step: it only re-runs when go.mod/go.sum change,
# and the cache mount keeps downloads across builds without bloating layers.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=bind,source=go.mod,target=go.mod \
    --mount=type=bind,source=go.sum,target=go.sum \
    go mod download

ARG TARGETOS
ARG TARGETARCH
# Stamped into main.version; shown by the binary and its metrics.
ARG VERSION=dev

# The source is bind-mounted rather than copied, so no layer holds it.
# CGO_ENABLED=0: distroless/static has no libc. -trimpath: reproducible, no
# local paths in the binary. -s -w: strip symbols and DWARF.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    --mount=type=bind,target=. \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
        -o /out/sidelock ./cmd/sidelock

# distroless/static: CA certificates and tzdata, no shell or package manager.
# `make release` builds the same image without Docker (tools/imagebuild): it
# reads USER, EXPOSE, ENTRYPOINT and LABEL from this stage, so keep the
# stage to those, ARG and the one COPY.
FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title=sidelock \
      org.opencontainers.image.source=https://github.com/sidelock/sidelock \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.licenses=Apache-2.0 \
      org.opencontainers.image.revision=${REVISION}
COPY --from=build /out/sidelock /sidelock
# Numeric so that runAsNonRoot can be verified by the kubelet
# (it cannot resolve user names).
USER 65532:65532
# 7420: lock API (binds 127.0.0.1 by default, only reachable from inside the
# pod); 7421: admin (/healthz, /readyz, /metrics).
EXPOSE 7420 7421
ENTRYPOINT ["/sidelock"]
