package redistest_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/redistest"
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

// Each server binds a loopback address of its own, never the shared
// 127.0.0.1, on a port the kernel does not hand out by itself: no other
// process can take it while the server is down between Kill and Restart.
func TestServersGetLoopbackAddressesOfTheirOwn(t *testing.T) {
	servers := redistest.StartN(t, 3)
	hosts := map[string]bool{}
	lo, hi := ephemeralRange(t)
	for _, srv := range servers {
		host, portText, err := net.SplitHostPort(srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		ip := net.ParseIP(host).To4()
		if ip == nil || !ip.IsLoopback() {
			t.Fatalf("Addr() = %s: not an IPv4 loopback address", srv.Addr())
		}
		if host == "127.0.0.1" {
			t.Errorf("Addr() = %s: the shared 127.0.0.1, want an address of its own", srv.Addr())
		}
		if ip[3] == 0 || ip[3] == 255 {
			t.Errorf("Addr() = %s: last octet 0 or 255", srv.Addr())
		}
		if hosts[host] {
			t.Errorf("address %s used by two servers", host)
		}
		hosts[host] = true
		if port, _ := strconv.Atoi(portText); lo > 0 && port >= lo && port <= hi {
			t.Errorf("Addr() = %s: port in the kernel's ephemeral range %d-%d", srv.Addr(), lo, hi)
		}
		if srv.TLSAddr() != "" {
			t.Errorf("TLSAddr() = %q without WithTLS", srv.TLSAddr())
		}
	}
}

// ephemeralRange is the kernel's ip_local_port_range, or 0, 0 if unknown.
func ephemeralRange(t *testing.T) (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	lo, _ = strconv.Atoi(f[0])
	hi, _ = strconv.Atoi(f[1])
	return lo, hi
}

func TestWithHostBindsTheGivenAddress(t *testing.T) {
	srv := redistest.Start(t, redistest.WithHost("127.0.0.1"))
	if host, _, _ := net.SplitHostPort(srv.Addr()); host != "127.0.0.1" {
		t.Fatalf("Addr() = %s, want host 127.0.0.1", srv.Addr())
	}
	if err := ping(t, srv); err != nil {
		t.Fatalf("PING %s: %v", srv.Addr(), err)
	}
}

// While something else holds the server's address, a restart fails
// clearly and within its bound (it does not hang, and does not move to
// another port); once the address is free again, it comes back there.
func TestRestartOnATakenAddressFailsClearlyThenSucceeds(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Kill()
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("taking %s: %v", addr, err)
	}
	began := time.Now()
	err = srv.TryRestart()
	took := time.Since(began)
	_ = squatter.Close()
	if err == nil {
		t.Fatal("TryRestart succeeded while another socket held the address")
	}
	if !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "another socket holds the address") {
		t.Errorf("TryRestart error does not name the address and the cause: %v", err)
	}
	if took > 20*time.Second {
		t.Errorf("TryRestart took %v to give up", took)
	}
	t.Logf("TryRestart gave up after %v: %s", took.Round(time.Millisecond), strings.SplitN(err.Error(), "\n", 2)[0])
	srv.Restart(t)
	if srv.Addr() != addr {
		t.Fatalf("Addr() = %s after Restart, want %s", srv.Addr(), addr)
	}
	if err := ping(t, srv); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}

// A restart retries while the address is briefly taken (the predecessor's
// socket, a stray listener), and succeeds on the same address.
func TestRestartRetriesWhileTheAddressIsBrieflyTaken(t *testing.T) {
	srv := redistest.Start(t, redistest.WithAppendOnly())
	addr := srv.Addr()
	srv.Kill()
	squatter, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("taking %s: %v", addr, err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond)
		_ = squatter.Close()
	})
	if err := srv.TryRestart(); err != nil {
		t.Fatalf("TryRestart: %v", err)
	}
	if srv.Addr() != addr {
		t.Fatalf("Addr() = %s after Restart, want %s", srv.Addr(), addr)
	}
	if err := ping(t, srv); err != nil {
		t.Fatalf("PING after Restart: %v", err)
	}
}
