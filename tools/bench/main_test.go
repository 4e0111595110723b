package bench

import (
	"os"
	"testing"

	"github.com/sidelock/sidelock/internal/redistest"
)

// TestMain silences go-redis's own log lines (a connection closed under a
// release still in flight as a benchmark ends, say): written to the same
// output as the benchmark lines, they can split one, and its figures are
// then lost to tools/report.
func TestMain(m *testing.M) {
	redistest.SilenceClientLogs()
	os.Exit(m.Run())
}
