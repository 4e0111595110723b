package health_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/redisnode"
)

func redisMasters(t *testing.T, servers []*redistest.Server) []redlock.Node {
	t.Helper()
	nodes := make([]redlock.Node, len(servers))
	for i, s := range servers {
		n := redisnode.New(redisnode.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = n.Close() })
		nodes[i] = n
	}
	return nodes
}

// checkUntil runs rounds every 20ms until cond holds, and returns how long
// that took.
func checkUntil(t *testing.T, c *health.Checker, within time.Duration, what string, cond func(health.Report) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		r := c.Check(context.Background())
		if cond(r) {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("not within %v: %s; last report %+v", within, what, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A real master killed and restarted empty sits out the restart guard,
// measured from its restart, while the other two keep the quorum.
func TestRealMasterRestartIsKeptOutForTheGuard(t *testing.T) {
	const restartGuard = time.Second
	servers := redistest.StartN(t, 3)
	quorum := quorumView{one(t, redisMasters(t, servers)...)}
	c, err := health.New(quorum.groups, health.Config{RestartGuard: restartGuard, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Fresh servers are on probation too: nothing tells them from restarted ones.
	took := checkUntil(t, c, 5*time.Second, "fresh masters eligible", func(r health.Report) bool { return eligible(r) == "EEE" })
	t.Logf("fresh masters eligible after %v", took)

	before := c.Report().GuardEvents.RestartProbation
	restartBegan := time.Now()
	servers[0].Restart(t)
	r := c.Check(context.Background())
	if eligible(r) != "-EE" || !r.Ready || quorum.Get(0) || !strings.Contains(r.Nodes[0].Problem, "restart probation") ||
		r.Nodes[0].ProbationRemaining <= 0 {
		t.Fatalf("just after the restart: %+v", r.Nodes[0])
	}
	checkUntil(t, c, 5*time.Second, "restarted master eligible", func(r health.Report) bool { return r.Nodes[0].Eligible })
	out := time.Since(restartBegan)
	t.Logf("restarted master kept out for %v (restart guard %v)", out, restartGuard)
	if out < restartGuard {
		t.Fatalf("eligible %v after the restart, before the %v guard", out, restartGuard)
	}
	if r := c.Report(); r.GuardEvents.RestartProbation != before+1 || !quorum.Get(0) {
		t.Fatalf("after the probation: %+v", r)
	}
}

// With a long InfoMaxAge, rounds over real masters only ping; a master
// killed and restarted empty breaks the connection, so the next round
// that reaches it reads its info, and it is never counted in between.
func TestRealMasterRestartIsCaughtWhileRoundsOnlyPing(t *testing.T) {
	servers := redistest.StartN(t, 3)
	c, err := health.New(one(t, redisMasters(t, servers)...), health.Config{RestartGuard: time.Second, Timeout: time.Second, InfoMaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	checkUntil(t, c, 5*time.Second, "fresh masters eligible", func(r health.Report) bool { return eligible(r) == "EEE" })
	admin := redis.NewClient(&redis.Options{Addr: servers[0].Addr()})
	defer admin.Close()
	if err := admin.ConfigResetStat(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		c.Check(context.Background())
	}
	stats, err := admin.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	infos, pings := redistest.CommandCalls(stats, "info"), redistest.CommandCalls(stats, "ping")
	if infos != 0 || pings != 5 { // Redis counts this INFO only once it has run
		t.Fatalf("5 rounds sent %d INFO and %d PING, want 0 and 5", infos, pings)
	}

	servers[0].Restart(t)
	for round := 1; ; round++ {
		r := c.Check(context.Background())
		if r.Nodes[0].Eligible {
			t.Fatalf("round %d after the restart counts the restarted master: %+v", round, r.Nodes[0])
		}
		if strings.Contains(r.Nodes[0].Problem, "restart probation") {
			t.Logf("restart caught by round %d: %s", round, r.Nodes[0].Problem)
			break
		}
		if round == 3 {
			t.Fatalf("restart not caught in 3 rounds: %+v", r.Nodes[0])
		}
	}
}

// Kleppmann's scenario against real masters: A holds the lock on {m0, m1}
// (m2 missed it); m1 is killed and restarts empty; B asks before any round
// has judged it again. m1's answer comes over a connection no round has
// judged, so B must not win {m1, m2}. Then, with rounds running only when
// woken, a new connection wakes a round at once, which puts the restarted
// master on probation, and B's error says so.
func TestRealRestartedMasterIsNotCountedBeforeARoundJudgesIt(t *testing.T) {
	servers := redistest.StartN(t, 3)
	nodes := redisMasters(t, servers)
	locker, err := redlock.New(nodes, redlock.Config{NodeTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c, err := health.New([]*redlock.Locker{locker}, health.Config{
		Interval: time.Hour, RestartGuard: time.Second, Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkUntil(t, c, 10*time.Second, "fresh masters eligible", func(r health.Report) bool { return eligible(r) == "EEE" })
	ctx := t.Context()
	for _, s := range servers[:2] { // A's keys, as its grant left them
		if err := rawClient(t, s).Set(ctx, "k", "A", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	servers[1].Kill()
	servers[1].Restart(t)
	if _, err := locker.Acquire(ctx, "k", "B", time.Minute); err == nil {
		t.Fatal("B was granted the lock over the restarted master while A still held it")
	} else {
		t.Logf("B before any round: %v", err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	checkUntilReport(t, c, 5*time.Second, func(r health.Report) bool { return r.Nodes[1].ProbationRemaining > 0 })

	servers[2].Kill()
	servers[2].Restart(t)
	began := time.Now()
	_, _ = locker.Acquire(ctx, "k", "B", time.Minute) // reconnects to m2, which wakes a round
	checkUntilReport(t, c, 5*time.Second, func(r health.Report) bool { return r.Nodes[2].ProbationRemaining > 0 })
	t.Logf("a round judged the reconnected m2 %v after the call began (rounds every hour otherwise)", time.Since(began))
	_, err = locker.Acquire(ctx, "k", "B", time.Minute)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		t.Fatalf("B with two masters on probation: %v, want a QuorumError", err)
	}
	if !strings.Contains(err.Error(), "probation") || qe.RetryAfter <= 0 {
		t.Errorf("error %q (retry after %v) does not name the probation and its end", err, qe.RetryAfter)
	}
}

// checkUntilReport polls the last report (without running rounds itself).
func checkUntilReport(t *testing.T, c *health.Checker, within time.Duration, cond func(health.Report) bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond(c.Report()) {
		if time.Since(start) > within {
			t.Fatalf("not within %v; last report %+v", within, c.Report())
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

func rawClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}
