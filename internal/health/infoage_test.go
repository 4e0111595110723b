package health_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// countingNode is a memnode master that counts server info reads and pings
// and, like redisnode, the connections it opened (redlock.ConnectionCounter).
// redialOnPing makes the next ping open a connection, as a pooled
// connection broken by a restart does.
type countingNode struct {
	infoNode
	infos, pings, opened atomic.Int64
	redialOnPing         atomic.Bool
}

func (n *countingNode) ServerInfo(ctx context.Context) (redlock.ServerInfo, error) {
	n.infos.Add(1)
	return n.infoNode.ServerInfo(ctx)
}

func (n *countingNode) Ping(ctx context.Context) error {
	n.pings.Add(1)
	if n.redialOnPing.Swap(false) {
		n.opened.Add(1)
	}
	return n.infoNode.Ping(ctx)
}

func (n *countingNode) ConnectionsOpened() uint64 { return uint64(n.opened.Load()) }

// reads is "infos/pings" since the last call, for compact assertions.
func (n *countingNode) reads() string {
	return fmt.Sprintf("%d/%d", n.infos.Swap(0), n.pings.Swap(0))
}

type ageFixture struct {
	*fixture
	nodes []*countingNode
}

// newAgeFixture is newFixture with counting masters, up for an hour.
func newAgeFixture(t *testing.T, n int, cfg health.Config) *ageFixture {
	t.Helper()
	f := &ageFixture{}
	f.fixture = startFixture(t, n, time.Hour, cfg, func(m *memnode.Node) redlock.Node {
		c := &countingNode{infoNode: infoNode{m}}
		f.nodes = append(f.nodes, c)
		return c
	})
	return f
}

// round advances the clock by a second and runs a round.
func (f *ageFixture) round() health.Report {
	f.clock.Advance(time.Second)
	return f.check()
}

// While no connection is opened, rounds only ping, and the info is read
// again once it is InfoMaxAge old; the report's uptime keeps counting.
func TestRoundsPingWhileTheServerInfoIsCurrent(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: 5 * time.Second})
	// A master not seen before is returning: its info read, and a ping
	// (the other connection pool).
	if r := f.check(); eligible(r) != "EEE" || f.nodes[0].reads() != "1/1" {
		t.Fatalf("first round: %+v", r)
	}
	// The verdict names the server it judged, for connections opened
	// since (redlock.ServerTracker).
	if v, r := f.quorum.Verdict(0), f.checker.Report(); v.RunID == "" || v.RunID != r.Nodes[0].RunID {
		t.Fatalf("verdict on run id %q, report %q", v.RunID, r.Nodes[0].RunID)
	}
	for range 4 {
		r := f.round()
		if got := f.nodes[0].reads(); got != "0/1" || eligible(r) != "EEE" {
			t.Fatalf("round within the max age: infos/pings %s, %+v", got, r)
		}
	}
	if up := f.checker.Report().Nodes[0].Uptime; up != health.Duration(time.Hour+4*time.Second) {
		t.Fatalf("uptime %v, want 1h0m4s", time.Duration(up))
	}
	if f.round(); f.nodes[0].reads() != "1/0" {
		t.Fatal("info not read again at the max age")
	}
}

// A restart behind a new connection is caught by the next round even
// though the info is young: it reads the info and starts a probation.
func TestANewConnectionMakesTheRoundReadTheServerInfo(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: time.Hour})
	f.check()
	f.round()
	f.nodes[0].reads()

	f.mem[0].Restart()
	f.nodes[0].opened.Add(1) // a lock call reached the restarted server first
	r := f.round()
	if got := f.nodes[0].reads(); got != "1/0" {
		t.Fatalf("infos/pings %s, want the info read", got)
	}
	if eligible(r) != "-EE" || !strings.Contains(r.Nodes[0].Problem, "restarted") {
		t.Fatalf("after a restart behind a new connection: %+v", r.Nodes[0])
	}
}

// The ping of a round finds the pooled connection broken and opens one:
// the same round reads the info and catches the restart, and reads it once
// more over connections all opened before, so that its verdict covers the
// new connection (a later round need not judge it again).
func TestAPingThatReconnectsReadsTheServerInfoInTheSameRound(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: time.Hour})
	f.check()
	f.nodes[0].reads()

	f.mem[0].Restart()
	f.nodes[0].redialOnPing.Store(true)
	r := f.round()
	if got := f.nodes[0].reads(); got != "2/1" {
		t.Fatalf("infos/pings %s, want a ping, then the info twice", got)
	}
	if eligible(r) != "-EE" || !strings.Contains(r.Nodes[0].Problem, "restarted") {
		t.Fatalf("after a restart found by the ping: %+v", r.Nodes[0])
	}
	if judged := f.quorum.Verdict(0).JudgedAt; judged != 1 {
		t.Fatalf("the verdict covers the connections up to %d, want 1 (the one the ping opened)", judged)
	}
	if f.round(); f.nodes[0].reads() != "0/1" {
		t.Fatal("the round after the re-read does not go back to pinging")
	}
}

// A master that missed a round has its info read when it answers again.
func TestAMasterThatWasDownHasItsInfoReadAgain(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: time.Hour})
	f.check()
	f.nodes[0].reads()
	f.mem[0].SetDown(true)
	if r := f.round(); r.Nodes[0].Up {
		t.Fatal("down master reported up")
	}
	f.nodes[0].reads()
	f.mem[0].SetDown(false)
	if f.round(); f.nodes[0].reads() != "1/1" {
		t.Fatal("info (and a ping) not read after a missed round")
	}
}

// What InfoMaxAge gives up (documented): a restart that opens no new
// connection, as behind a proxy that keeps client connections, goes
// unnoticed until the info is re-read.
func TestARestartWithoutANewConnectionWaitsForTheMaxAge(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: 3 * time.Second})
	f.check()
	f.mem[0].Restart()
	for range 2 {
		if r := f.round(); eligible(r) != "EEE" {
			t.Fatalf("restart noticed without a re-read: %+v", r.Nodes[0])
		}
	}
	if r := f.round(); eligible(r) != "-EE" || !strings.Contains(r.Nodes[0].Problem, "restarted") {
		t.Fatalf("restart not noticed at the max age: %+v", r.Nodes[0])
	}
}

// InfoMaxAge 0 and nodes that do not count connections read every round.
func TestServerInfoIsReadEveryRoundWithoutAMaxAgeOrACounter(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard})
	f.check()
	f.nodes[1].reads()
	for range 3 {
		if f.round(); f.nodes[1].reads() != "1/0" {
			t.Fatal("InfoMaxAge 0: info not read every round")
		}
	}
	g := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard, InfoMaxAge: time.Hour})
	g.check()
	g.mem[0].Restart()
	g.clock.Advance(time.Second)
	if r := g.check(); eligible(r) != "-EE" {
		t.Fatalf("a node without a connection count must have its info read every round: %+v", r.Nodes[0])
	}
}

func TestNegativeInfoMaxAgeIsRefused(t *testing.T) {
	_, err := health.New(one(t, memnode.New("m")), health.Config{InfoMaxAge: -time.Second})
	if err == nil {
		t.Fatal("accepted")
	}
}
