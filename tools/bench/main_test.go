package bench

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestMain silences go-redis's own log lines (a connection closed under a
// release still in flight as a benchmark ends, say): written to the same
// output as the benchmark lines, they can split one, and its figures are
// then lost to tools/report.
func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{})
	os.Exit(m.Run())
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
