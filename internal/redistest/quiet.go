package redistest

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// SilenceClientLogs discards go-redis's own log lines for the rest of the
// process; a TestMain calls it. They say what the tests assert on through
// the errors returned (a failed dial a test provokes on purpose), and in a
// benchmark's output they can split a result line.
func SilenceClientLogs() { redis.SetLogger(discardLogger{}) }

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}
