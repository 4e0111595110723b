// Command sidelock is a sidecar that gives the processes of a pod
// distributed locks over localhost HTTP, running Redlock against N
// independent Redis masters.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	os.Exit(exitStatus(err, os.Stderr))
}

// exitStatus prints err (if it says anything) and picks the exit code:
// the one an *exitCode carries (sidelock exec), else 1 for any error.
func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	code := 1
	var ec *exitCode
	if errors.As(err, &ec) {
		code = ec.code
		err = ec.err
	}
	if err != nil {
		fmt.Fprintf(stderr, "sidelock: %v\n", err)
	}
	return code
}
