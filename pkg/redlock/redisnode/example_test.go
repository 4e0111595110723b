package redisnode_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

// New connects lazily, so this example compiles and documents usage but has
// no output check: it needs a Redis master at the address.
func ExampleNew() {
	node := redisnode.New(redisnode.Options{
		Addr:     "127.0.0.1:6379",
		Password: "s3cret",
	})
	defer node.Close()

	// The algorithm gives every call a short per-node budget.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()

	acquired, holderTTL, err := node.Acquire(ctx, "jobs/nightly", "owner-1", 30*time.Second)
	if err != nil {
		fmt.Println("node unavailable:", err)
		return
	}
	if !acquired {
		fmt.Println("held by someone else for another", holderTTL)
		return
	}
	fmt.Println("acquired on", node.Addr())
}
