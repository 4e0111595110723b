package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/config"
	assembly "github.com/sidelock/sidelock/internal/sidecar" // the package; cmd/sidelock's tests have a type sidecar
)

// run is the whole program; main only supplies the process's context,
// arguments, environment and streams.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dev := fs.Bool("dev", false, "run with 3 in-memory masters (same as SIDELOCK_DEV=true)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(fs, stderr) }
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *showVersion {
		fmt.Fprintln(stdout, "sidelock", version)
		return nil
	}
	switch sub := fs.Arg(0); sub {
	case "", "serve":
	case "exec":
		return runExec(ctx, fs.Args()[1:], getenv, stdout, stderr)
	case execGuardCommand: // hidden: runs an exec's command (exec_guard.go)
		return runExecGuard(fs.Args()[1:])
	case "injector":
		return runInjector(ctx, fs.Args()[1:], getenv, stdout, stderr)
	default:
		return fmt.Errorf("unknown command %q (commands: serve, exec, injector)", sub)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.Dev = cfg.Dev || *dev
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration:\n%w", err)
	}
	return serve(ctx, cfg, getenv, stdout, stderr)
}

func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "usage: sidelock [-dev] [serve]\n       sidelock exec [flags] NAME -- COMMAND [ARGS...]   (sidelock exec -h)\n       sidelock injector [flags]   (sidelock injector -h)\n\nflags:\n")
	fs.PrintDefaults()
	fmt.Fprintf(w, "\nconfiguration (environment):\n")
	_ = config.Usage(w)
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
	fmt.Fprintf(w, "sidelock dev mode: 3 in-memory masters, lock API on %s. Try:\n", base)
	fmt.Fprintf(w, "  curl -s -X POST '%s/locks/demo?ttl=30s'\n", base)
	fmt.Fprintf(w, "  curl -i -X DELETE -H 'Lock-Token: <token from above>' %s/locks/demo\n", base)
}

// redisLogger sends go-redis's own messages (failed dials, pool events) to
// slog at debug level: the health checker already reports masters that are
// down, once per round, at the right level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "component", "go-redis")
}
