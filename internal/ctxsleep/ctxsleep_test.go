package ctxsleep_test

import (
	"context"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
)

func TestForEndsWithItsContext(t *testing.T) {
	if !ctxsleep.For(context.Background(), time.Millisecond) || !ctxsleep.For(context.Background(), 0) {
		t.Fatal("a live context's sleep reported it ended")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if ctxsleep.For(ctx, time.Hour) || ctxsleep.For(ctx, 0) || ctxsleep.Until(ctx, time.Now().Add(time.Hour)) {
		t.Fatal("an ended context's sleep reported it live")
	}
	if time.Since(start) > time.Minute {
		t.Fatal("an ended context's sleep waited")
	}
}
