//go:build linux

package spec

import (
	"strings"
	"testing"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/sidecartest"
)

// binaryEnv names a prebuilt sidecar to check instead of building
// cmd/sidelock from this tree: how the spec is checked against another
// commit's binary (git archive of it, go build, point here).
const binaryEnv = "SIDELOCK_SPEC_BIN"

// buildSidecar builds cmd/sidelock (or takes the binary named by
// SIDELOCK_SPEC_BIN): the answers checked against the spec are those of
// the binary a pod runs.
func buildSidecar(t *testing.T) string {
	t.Helper()
	return sidecartest.PrebuiltOrBuild(t, binaryEnv)
}

// startMasters starts three durable masters: durable so that a fresh
// sidecar counts them at once (no restart probation).
func startMasters(t *testing.T) []*redistest.Server {
	t.Helper()
	return redistest.StartN(t, 3, redistest.WithAppendOnly())
}

// sidecar is one running sidelock process.
type sidecar struct {
	api, admin string               // http://127.0.0.1:port
	proc       *sidecartest.Process // for a signal of the test's own
}

// startSidecar runs bin over masters with only the environment given here
// (a SIDELOCK_* variable of the caller's shell must not change what is
// checked) and waits until /readyz answers 200.
func startSidecar(t *testing.T, bin string, masters []*redistest.Server, extra ...string) *sidecar {
	t.Helper()
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = m.Addr()
	}
	env := append([]string{"SIDELOCK_REDIS_ADDRS=" + strings.Join(addrs, ","),
		"SIDELOCK_LOG_FORMAT=json", "SIDELOCK_LOG_LEVEL=info"}, extra...)
	p := sidecartest.Start(t, bin, env, sidecartest.Options{})
	return &sidecar{api: p.API(), admin: p.Admin(), proc: p}
}
