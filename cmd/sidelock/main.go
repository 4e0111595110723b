// Command sidelock is a sidecar that gives the processes of a pod
// distributed locks over localhost HTTP, running Redlock against N
// independent Redis masters.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "sidelock: %v\n", err)
		os.Exit(1)
	}
}
