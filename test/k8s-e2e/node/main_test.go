// Package node runs the chart on a real single-node cluster (package
// cluster: a kubelet on containerd and runc, the control plane built from
// the Go module proxy) and checks what only a running node shows: the
// webhook through its Service, the native sidecar's start order and probes,
// readiness in EndpointSlices, termination order, master restarts, a rolling
// update under contention, helm test and helm upgrade.
//
// It runs with `make e2e-node` (SIDELOCK_E2E_NODE=1, as root); otherwise it
// skips.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sidelock/sidelock/test/k8s-e2e/node/cluster"
	"github.com/sidelock/sidelock/test/k8s-e2e/node/images"
)

// env is what every scenario shares: one cluster and one release of the
// chart, started once by TestMain.
type env struct {
	cluster  *cluster.Cluster
	tools    string // the tools image's reference (masters, apps, helm test)
	sidecar  string // the sidelock image's repository
	tag      string // and its tag
	started  time.Duration
	helmTime time.Duration
}

var e2e *env

func TestMain(m *testing.M) {
	if os.Getenv("SIDELOCK_E2E_NODE") == "" {
		fmt.Fprintln(os.Stderr, "SKIP: the real-node tests run with `make e2e-node` (SIDELOCK_E2E_NODE=1, as root)")
		os.Exit(0)
	}
	code, err := runWithCluster(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e-node:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func runWithCluster(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	archive, ref := os.Getenv("SIDELOCK_E2E_NODE_IMAGE"), os.Getenv("SIDELOCK_E2E_NODE_IMAGE_REF")
	if archive == "" || ref == "" {
		return 0, fmt.Errorf("SIDELOCK_E2E_NODE_IMAGE (the sidelock image's archive) and SIDELOCK_E2E_NODE_IMAGE_REF (its reference) must be set; make e2e-node sets them")
	}
	repo, tag, err := splitRef(ref)
	if err != nil {
		return 0, err
	}
	dir, err := os.MkdirTemp("", "sidelock-e2e-images-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	began := time.Now()
	pause, err := images.Pause(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("pause image: %w", err)
	}
	tools, err := images.Tools(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("tools image: %w", err)
	}
	fmt.Fprintf(os.Stderr, "images built in %v\n", time.Since(began).Round(time.Millisecond))
	bin, err := filepath.Abs("../.cache/bin")
	if err != nil {
		return 0, err
	}
	began = time.Now()
	cl, err := cluster.Start(ctx, cluster.Options{
		BinDir: bin,
		Images: []string{pause.Path, tools.Path, archive},
		Pause:  pause.Ref,
		Logf:   func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	if err != nil {
		return 0, err
	}
	defer cl.Stop()
	e2e = &env{cluster: cl, tools: tools.Ref, sidecar: repo, tag: tag, started: time.Since(began)}
	if err := installReleases(ctx); err != nil {
		return 0, err
	}
	fmt.Fprintf(os.Stderr, "releases installed (helm install --wait) in %v\n", e2e.helmTime.Round(time.Millisecond))
	return m.Run(), nil
}

// splitRef splits repository:tag.
func splitRef(ref string) (string, string, error) {
	for i := len(ref) - 1; i >= 0 && ref[i] != '/'; i-- {
		if ref[i] == ':' {
			return ref[:i], ref[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("image reference %q has no tag", ref)
}
