// Command example locks from Go through the sidecar with pkg/client:
// a heartbeat lease, then a lock held over a connection.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

func main() {
	addr := os.Getenv("SIDELOCK_ADDR")
	if addr == "" {
		addr = client.DefaultAddr
	}
	c := client.New(addr, nil)
	ctx := context.Background()

	// Heartbeat lease: acquire, extend while working, release.
	lease, err := c.Acquire(ctx, "orders/42", client.Options{TTL: 30 * time.Second, Wait: 10 * time.Second, Owner: "go-example"})
	if errors.Is(err, client.ErrLockHeld) {
		log.Fatal("someone else holds orders/42")
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("holding %s with fence %d until at least %v\n", lease.Name, lease.Fence, lease.ValidUntil)
	if lease, err = c.Extend(ctx, lease.Name, lease.Token, 0); errors.Is(err, client.ErrLeaseGone) {
		log.Fatal("lock lost: stop working")
	}
	if err := c.Release(ctx, lease.Name, lease.Token); err != nil {
		log.Fatal(err)
	}

	// Held lock: no heartbeats; released when Release closes the stream
	// or when this process dies.
	if err := holdWhileWorking(ctx, c); err != nil {
		log.Fatal(err)
	}
}

// holdWhileWorking holds a lock for as long as the work runs, stopping at
// once if the lock is lost.
func holdWhileWorking(ctx context.Context, c *client.Client) error {
	held, err := c.Hold(ctx, "reports/nightly", client.Options{Wait: 10 * time.Second})
	if err != nil {
		return err
	}
	defer held.Release()
	fmt.Printf("holding %s with fence %d\n", held.Lease.Name, held.Lease.Fence)
	select {
	case <-time.After(3 * time.Second): // the work
		return nil
	case <-held.Done(): // lost: stop at once
		return fmt.Errorf("lock lost: %+v", held.End())
	}
}
