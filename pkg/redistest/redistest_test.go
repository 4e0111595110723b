package redistest_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redistest"
)

func TestMain(m *testing.M) {
	redis.SetLogger(discardLogger{}) // the kill tests provoke dial errors on purpose
	os.Exit(m.Run())
}

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

func client(t *testing.T, srv *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: srv.Addr(), Protocol: 2, DisableIdentity: true,
		// Fail fast and within the context, so frozen or dead servers cost
		// the test milliseconds rather than go-redis's default seconds.
		ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func ping(t *testing.T, srv *redistest.Server) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	return client(t, srv).Ping(ctx).Err()
}

func TestStartNRunsIndependentServers(t *testing.T) {
	servers := redistest.StartN(t, 3)
	seen := map[string]bool{}
	for _, srv := range servers {
		if seen[srv.Addr()] {
			t.Fatalf("address %s used twice", srv.Addr())
		}
		seen[srv.Addr()] = true
		if err := ping(t, srv); err != nil {
			t.Fatalf("PING %s: %v", srv.Addr(), err)
		}
		if srv.Pid() <= 0 {
			t.Errorf("Pid() = %d", srv.Pid())
		}
	}
}

func TestKillAndRestartKeepAddressButNotData(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv)
	ctx := t.Context()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, pid := srv.Addr(), srv.Pid()

	srv.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d still exists after Kill (signal 0: %v)", pid, err)
	}
	if err := ping(t, srv); err == nil {
		t.Fatal("PING succeeded after Kill")
	}

	srv.Restart(t)
	if srv.Addr() != addr || srv.Pid() == pid {
		t.Fatalf("after Restart: addr %s pid %d, want addr %s and a new pid (old %d)", srv.Addr(), srv.Pid(), addr, pid)
	}
	if err := client(t, srv).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after restart without AOF: err = %v, want redis.Nil", err)
	}
}

func TestAppendOnlyDataSurvivesKill(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAppendOnly())
	ctx := t.Context()
	if err := client(t, srv).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart(t)
	if got, err := client(t, srv).Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after restart with AOF = %q, %v; want v", got, err)
	}
}

func TestStopFreezesUntilCont(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if err := client(t, srv).Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered by a stopped server")
	}
	srv.Cont()
	if err := ping(t, srv); err != nil {
		t.Fatalf("PING after Cont: %v", err)
	}
}

func TestWithArgsPassesThrough(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--requirepass", "s3cret"))
	err := ping(t, srv)
	if err == nil {
		t.Fatal("PING without AUTH succeeded; --requirepass was not applied")
	}
}

func TestMissingBinarySkipsOnlyWhenAsked(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("SIDELOCK_SKIP_REDIS", "1")
	var skipped bool
	t.Run("start", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		redistest.Start(t)
	})
	if !skipped {
		t.Fatal("Start did not skip with SIDELOCK_SKIP_REDIS=1 and no redis-server on PATH")
	}
}
