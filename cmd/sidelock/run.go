package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/config"
	assembly "github.com/sidelock/sidelock/internal/sidecar" // the package; cmd/sidelock's tests have a type sidecar
)

// run is the whole program; main only supplies the process's context,
// arguments, environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := dispatch(ctx, args[1:], getenv, stdout, stderr)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

// dispatch runs the verb args name; without one (no arguments, or flags
// first) it serves, as `sidelock [-dev]` always has.
func dispatch(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return runServe(ctx, args, getenv, stdout, stderr)
	}
	switch first := args[0]; {
	case first == "-h" || first == "-help" || first == "--help":
		return writeOverview(stdout)
	case first == execGuardCommand: // hidden: runs an exec's command (exec_guard.go)
		return runExecGuard(args[1:])
	case strings.HasPrefix(first, "-"):
		return runServe(ctx, args, getenv, stdout, stderr)
	}
	v, ok := lookupVerb(args[0])
	if !ok {
		return usageError("", "unknown verb %q", args[0])
	}
	return v.run(ctx, args[1:], getenv, stdout, stderr)
}

// serveOptions are serve's flags.
type serveOptions struct {
	dev, version bool
}

func serveFlags() (*flag.FlagSet, *serveOptions) {
	fs, o := newFlags("serve"), &serveOptions{}
	fs.BoolVar(&o.dev, "dev", false, "run with 3 in-memory masters (same as SIDELOCK_DEV=true)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit (as 'sidelock version')")
	return fs, o
}

// runServe is `sidelock [serve] [-dev]`: the sidecar, configured by the
// environment.
func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs, o := serveFlags()
	if err := parseFlags(fs, "serve", args, stdout); err != nil {
		return err
	}
	if o.version {
		return runVersion(ctx, nil, getenv, stdout, stderr)
	}
	if fs.NArg() > 0 {
		return usageError("serve", "serve takes no arguments, got %q", fs.Args())
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.Dev = cfg.Dev || o.dev
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	return serve(ctx, cfg, getenv, stdout, stderr)
}

// serve runs the sidecar until ctx ends, then ends every held lease.
func serve(ctx context.Context, cfg config.Config, getenv func(string) string, stdout, stderr io.Writer) error {
	log := newLogger(cfg, getenv, stderr)
	redis.SetLogger(redisLogger{log}) // go-redis logs globally; route it through slog
	s, err := assembly.New(ctx, cfg, assembly.WithLogger(log), assembly.WithVersion(version))
	if err != nil {
		return err
	}
	defer s.Close()
	if cfg.Dev {
		printQuickStart(stdout, s.APIAddr())
	}
	return s.Run(ctx)
}

func newLogger(cfg config.Config, getenv func(string) string, w io.Writer) *slog.Logger {
	level, _ := config.ParseLevel(cfg.LogLevel) // validated already
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
	}
	return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !colourful(w, getenv)}))
}

// colourful is true for a terminal, unless NO_COLOR is set.
func colourful(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func printQuickStart(w io.Writer, apiAddr string) {
	base := "http://" + apiAddr
	fmt.Fprintf(w, "sidelock dev mode: 3 in-memory masters, lock API on %s. Try (the README walks further):\n", base)
	fmt.Fprintf(w, "  token=$(curl -s -X POST '%s/locks/demo?ttl=30s' | sed -E 's/.*\"token\":\"([0-9a-f]+)\".*/\\1/'); echo \"$token\"\n", base)
	fmt.Fprintf(w, "  curl -i -X DELETE -H \"Lock-Token: $token\" %s/locks/demo\n", base)
}

// redisLogger sends go-redis's own messages (failed dials, pool events) to
// slog at debug level: the health checker already reports masters that are
// down, once per round, at the right level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
