#!/usr/bin/env bash
# Builds etcd and kube-apiserver for the end-to-end tests from the Go module
# proxy (no release downloads) into test/k8s-e2e/.cache/bin, with a build
# cache of their own in test/k8s-e2e/.cache/go-build (both git-ignored).
# The versions are this module's go.mod: k8s.io/kubernetes with its staging
# modules pinned by `replace`, and the etcd it requires.
# Cold: ~12 minutes on 2 cores; warm: seconds (linking only).
# With the argument `node`, also the controller manager, scheduler, kubelet
# and kube-proxy, and CoreDNS (coredns/, a module of its own).
set -euo pipefail
cd "$(dirname "$0")"
out=$PWD/../.cache/bin
mkdir -p "$out"
export GOCACHE="${SIDELOCK_E2E_GOCACHE:-$PWD/../.cache/go-build}"
export CGO_ENABLED=0

k8s=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)      # v1.37.0
minor=$(echo "$k8s" | cut -d. -f2)
# Version stamps: clients and envtest parse the server's /version.
ver=k8s.io/component-base/version
cgo=k8s.io/client-go/pkg/version
ldflags="-s -w"
for pkg in "$ver" "$cgo"; do
	ldflags+=" -X $pkg.gitVersion=$k8s -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

build() { # name, package, ldflags
	local start=$SECONDS
	go build -trimpath -ldflags "$3" -o "$out/$1" "$2"
	echo "built $out/$1 in $((SECONDS - start))s"
}
build etcd ./etcd "-s -w"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$ldflags"
"$out/kube-apiserver" --version
# make e2e-node (test/k8s-e2e/node) also runs a node: the rest of the control
# plane and the kubelet, same version, same build cache.
if [ "${1:-}" = node ]; then
	for c in kube-controller-manager kube-scheduler kubelet kube-proxy; do
		build "$c" "k8s.io/kubernetes/cmd/$c" "$ldflags"
	done
	# Cluster DNS: CoreDNS with the plugins the node needs (its own module).
	(cd coredns && build coredns . "-s -w")
	"$out/kubelet" --version
fi
