package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sidelock/sidelock/pkg/client"
)

// lockOptions are the flags and argument of `sidelock lock`.
type lockOptions struct {
	sidecar  sidecarFlags
	opts     client.Options
	conflict int // the exit code of a lock held by another
	name     string
}

func parseLock(args []string, getenv func(string) string, stdout io.Writer) (lockOptions, error) {
	var o lockOptions
	fs := newFlags("lock")
	o.sidecar.addAPI(fs, getenv)
	addAcquireFlags(fs, &o.opts)
	addConflictFlag(fs, &o.conflict)
	if err := parseFlags(fs, "lock", args, stdout); err != nil {
		return o, err
	}
	if err := checkConflictCode("lock", o.conflict); err != nil {
		return o, err
	}
	if fs.NArg() != 1 {
		return o, usageError("lock", "lock needs one NAME, got %d arguments", fs.NArg())
	}
	o.name = fs.Arg(0)
	if err := checkName("lock", o.name); err != nil {
		return o, err
	}
	defaultOwner(&o.opts)
	return o, nil
}

// runLock is `sidelock lock NAME`: it holds the lock as exec does (one
// connection, hold=true: the sidecar releases it the moment the
// connection closes, however this process ends), without a command, until
// ctx ends (SIGINT, SIGTERM) or the lock ends on its own.
func runLock(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	o, err := parseLock(args, getenv, stdout)
	if err != nil {
		return err
	}
	held, err := o.sidecar.client(getenv).Hold(ctx, o.name, o.opts)
	if err != nil {
		return withConflictCode(acquireFailed(ctx, "lock", o.name, o.opts, o.sidecar.api, err), o.conflict)
	}
	defer held.Release()
	if err := json.NewEncoder(stdout).Encode(held.Lease); err != nil {
		return exitWith(exitUnavailable, "printing the lease: %v", err) // released on return
	}
	return holdUntil(ctx, held, stderr)
}

// holdUntil keeps the lock until ctx ends, then releases it (nil: exit
// 0), or until the lock ends without being asked to (exit 79). It warns
// on stderr when renewals keep failing.
func holdUntil(ctx context.Context, held *client.Held, stderr io.Writer) error {
	name, events := held.Lease.Name, held.Events()
	for {
		select {
		case <-ctx.Done():
			held.Release()
			fmt.Fprintf(stderr, "sidelock lock: lock %q released\n", name)
			return nil
		case e, ok := <-events:
			if !ok {
				end := held.End()
				return exitWith(exitLockLost, "lock %q ended without being released by this process (%s)", name, lostReason(end))
			}
			if e.Kind == "expiring" {
				fmt.Fprintf(stderr, "sidelock lock: lock %q expiring: renewals keep failing; valid until %s unless one succeeds\n",
					name, e.ValidUntil.Format(time.RFC3339Nano))
			}
		}
	}
}
