// Package ctxsleep waits for a while unless a context ends first: the one
// home of the sleep that the health rounds, the simulator and the test
// harnesses share.
package ctxsleep

import (
	"context"
	"time"
)

// For waits d (nothing when d <= 0) and reports whether ctx is still live.
func For(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Until waits until t (nothing when it has passed) and reports whether ctx
// is still live.
func Until(ctx context.Context, t time.Time) bool { return For(ctx, time.Until(t)) }
