package memnode_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

func Example() {
	ctx := context.Background()
	node := memnode.New("dev-0")
	defer node.Close()

	acquired, _, _ := node.Acquire(ctx, "jobs/nightly", "owner-1", 30*time.Second)
	fmt.Println("owner-1 acquired:", acquired)

	acquired, holderTTL, _ := node.Acquire(ctx, "jobs/nightly", "owner-2", 30*time.Second)
	fmt.Println("owner-2 acquired:", acquired, "holder has ttl left:", holderTTL > 0)

	released, _ := node.Release(ctx, "jobs/nightly", "owner-1")
	fmt.Println("owner-1 released:", released)

	node.SetDown(true)
	fmt.Println(node.Ping(ctx))

	// Output:
	// owner-1 acquired: true
	// owner-2 acquired: false holder has ttl left: true
	// owner-1 released: true
	// memnode dev-0: ping: node is down
}
