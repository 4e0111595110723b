package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

func Example() {
	nodes := []redlock.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	locker, err := redlock.New(nodes, redlock.Config{})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()

	grant, err := locker.Acquire(ctx, "orders/42", "value-of-worker-1", 10*time.Second)
	fmt.Println("worker 1 acquired:", err == nil, "valid for more than 9s:", time.Until(grant.ValidUntil) > 9*time.Second)

	_, err = locker.Acquire(ctx, "orders/42", "value-of-worker-2", 10*time.Second)
	fmt.Println("worker 2 sees it held:", errors.Is(err, redlock.ErrLockHeld))

	fmt.Println("worker 1 released:", locker.Release(ctx, "orders/42", "value-of-worker-1") == nil)
	// Output:
	// worker 1 acquired: true valid for more than 9s: true
	// worker 2 sees it held: true
	// worker 1 released: true
}
