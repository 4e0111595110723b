// Package inprocess runs sidecars inside a test's process, assembled as
// every sidecar is (sidecar.Assemble), over masters the test gives: the
// one in-process assembly of the tests, the benchmarks and the examples.
package inprocess

import (
	"context"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/sidecar"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// Options vary what Start assembles.
type Options struct {
	Nodes  []redlock.Node       // the masters (nil: three in-memory ones)
	Config func(*config.Config) // adjusts the settings table's defaults
	Checks bool                 // run the health rounds in the background
	// RestartGuard keeps cfg's restart probation; without it the masters
	// count from the start.
	RestartGuard bool
	Sidecar      []sidecar.Option // further options of the assembly
}

// Start assembles a sidecar in this process as every sidecar is
// assembled (sidecar.Assemble: quorum group, health checker, lease
// manager, watch hub, metrics, handlers), over o.Nodes, with the settings
// table's defaults as o.Config leaves them. It is closed, its leases
// ended, when the test ends; the nodes given stay the caller's to close.
func Start(t testing.TB, o Options) *sidecar.Core {
	t.Helper()
	nodes := o.Nodes
	if nodes == nil {
		nodes = []redlock.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
		t.Cleanup(func() {
			for _, n := range nodes {
				_ = n.Close()
			}
		})
	}
	cfg := config.Defaults()
	cfg.ShutdownTimeout = 10 * time.Second
	if o.Config != nil {
		o.Config(&cfg)
	}
	opts := []sidecar.Option{sidecar.WithNodes(nodes...)}
	if !o.RestartGuard {
		opts = append(opts, sidecar.WithoutRestartGuard())
	}
	opts = append(opts, o.Sidecar...)
	core, err := sidecar.Assemble(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if o.Checks {
			core.RunChecks(ctx)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = core.Close()
	})
	return core
}
