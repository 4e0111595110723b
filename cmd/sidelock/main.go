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
	"runtime/debug"
	"strings"
	"syscall"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	version = releaseVersion(version, debug.ReadBuildInfo)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitStatus(err, os.Stderr))
}

// releaseVersion is the stamped version, or else the module version the Go
// command recorded: `go install …/cmd/sidelock@v1.2.3` stamps nothing, and
// its binary should still say v1.2.3 (in -version and sidelock_build_info).
func releaseVersion(stamped string, buildInfo func() (*debug.BuildInfo, bool)) string {
	if stamped != "dev" {
		return stamped
	}
	if bi, ok := buildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return stamped
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
		fmt.Fprintf(stderr, "sidelock: %s\n", withoutInnerPrefix(err.Error()))
	}
	return code
}

// withoutInnerPrefix drops the "sidelock: " that pkg/client's errors begin
// with (as a library's errors should) where the CLI wraps one in a message
// of its own, so that a line says "sidelock:" once.
func withoutInnerPrefix(msg string) string {
	return strings.ReplaceAll(strings.TrimPrefix(msg, "sidelock: "), ": sidelock: ", ": ")
}
