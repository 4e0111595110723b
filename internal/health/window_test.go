package health_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// windowed is the window these tests give DownAfter.
const windowed = time.Second

// newWindowFixture is newFixture with masters up for an hour, pings of
// 20ms, and DownAfter set to windowed.
func newWindowFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard, Timeout: 20 * time.Millisecond, DownAfter: windowed})
	if r := f.check(); eligible(r) != "EEE" || !r.Ready {
		t.Fatalf("first round: %+v", r)
	}
	return f
}

// roundAfter advances the clock by d and runs a round.
func (f *fixture) roundAfter(d time.Duration) health.Report {
	f.t.Helper()
	f.clock.Advance(d)
	return f.check()
}

// A master that stops answering in time keeps its verdict, up and counted,
// until its rounds have timed out for DownAfter; the report says it is
// failing meanwhile. Then it is down.
func TestAMasterIsCalledDownOnlyAfterItsTimeoutsSpanTheWindow(t *testing.T) {
	f := newWindowFixture(t)
	f.mem[0].SetDelay(time.Second)
	f.mem[1].SetDelay(time.Second)
	for _, after := range []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, 249 * time.Millisecond} {
		r := f.roundAfter(after)
		if !r.Ready || eligible(r) != "EEE" || !r.Nodes[0].Up || !r.Nodes[1].Up {
			t.Fatalf("%v into the window: %+v", after, r)
		}
		if !strings.Contains(r.Nodes[0].Error, "called down after 1s") {
			t.Fatalf("the report does not say the master is failing: %q", r.Nodes[0].Error)
		}
	}
	if r := f.roundAfter(time.Millisecond); r.Ready || r.Nodes[0].Up || r.Nodes[1].Up || eligible(r) != "--E" {
		t.Fatalf("timeouts for the whole window: %+v", r)
	}
}

// One answer in time ends the window: the next timeout starts it again.
func TestAnAnswerInTimeRestartsTheWindow(t *testing.T) {
	f := newWindowFixture(t)
	f.mem[0].SetDelay(time.Second)
	f.roundAfter(0)
	f.roundAfter(900 * time.Millisecond)
	f.mem[0].SetDelay(0)
	if r := f.roundAfter(50 * time.Millisecond); !r.Nodes[0].Up || r.Nodes[0].Error != "" {
		t.Fatalf("answered in time: %+v", r.Nodes[0])
	}
	f.mem[0].SetDelay(time.Second)
	for _, after := range []time.Duration{50 * time.Millisecond, 900 * time.Millisecond} {
		if r := f.roundAfter(after); !r.Nodes[0].Up {
			t.Fatalf("down %v after the window began again: %+v", after, r.Nodes[0])
		}
	}
	if r := f.roundAfter(100 * time.Millisecond); r.Nodes[0].Up {
		t.Fatalf("still up after timeouts for the whole window: %+v", r.Nodes[0])
	}
}

// A refusal is an answer, not a missed ping: the master is down at once.
func TestARefusingMasterIsDownAtOnce(t *testing.T) {
	f := newWindowFixture(t)
	f.mem[0].SetDown(true)
	f.mem[1].SetDown(true)
	if r := f.roundAfter(0); r.Ready || r.Nodes[0].Up || r.Nodes[1].Up {
		t.Fatalf("refused connections: %+v", r)
	}
}

// A timeout within the window keeps the verdict only over the connections
// it was made with (as a starved round does), and has the master's server
// info read when it answers again, as for a master that missed a round: a
// restart behind it is caught even when no new connection shows it.
func TestAMasterWithinTheWindowIsJudgedAgainWhenItAnswers(t *testing.T) {
	f := newAgeFixture(t, 3, health.Config{RestartGuard: guard, InfoMaxAge: time.Hour, Timeout: 20 * time.Millisecond, DownAfter: windowed})
	f.check()
	f.round()
	f.nodes[0].reads()
	f.mem[0].SetDelay(time.Second)
	if r := f.roundAfter(0); !r.Nodes[0].Up || eligible(r) != "EEE" {
		t.Fatalf("within the window: %+v", r.Nodes[0])
	}
	f.nodes[0].reads()
	f.mem[0].SetDelay(0)
	f.mem[0].Restart()
	r := f.roundAfter(100 * time.Millisecond)
	if got := f.nodes[0].reads(); got != "1/1" {
		t.Fatalf("infos/pings %s after a missed ping, want the info read again (and a ping)", got)
	}
	if eligible(r) != "-EE" || !strings.Contains(r.Nodes[0].Problem, "restarted") {
		t.Fatalf("a restart behind a missed ping: %+v", r.Nodes[0])
	}
}

// QuorumLost, which a try-once acquire fails on at once, holds only once
// the rounds have found no quorum for an interval: a lock call's own round
// may still refute a younger verdict.
func TestQuorumLostOnlyOnceTheVerdictIsARoundOld(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard, Interval: time.Second})
	if f.checker.QuorumLost() {
		t.Fatal("lost before the first round")
	}
	f.check()
	f.mem[0].SetDown(true)
	f.mem[1].SetDown(true)
	if r := f.roundAfter(0); r.Ready || f.checker.QuorumLost() {
		t.Fatalf("a verdict of no quorum just found: ready %v, lost %v", r.Ready, f.checker.QuorumLost())
	}
	f.clock.Advance(999 * time.Millisecond)
	if f.roundAfter(0); f.checker.QuorumLost() {
		t.Fatal("lost before the verdict is a round old")
	}
	f.clock.Advance(time.Millisecond)
	if !f.checker.QuorumLost() {
		t.Fatal("not lost a round after the verdict")
	}
	f.mem[1].SetDown(false)
	if f.roundAfter(0); f.checker.QuorumLost() {
		t.Fatal("lost with a quorum again")
	}
}

// While a master's timeouts are within the window, Run checks it every
// quarter of the window rather than every interval, so a master that
// stays silent is called down about the window after its first timeout.
func TestRunSettlesAFailingMasterWithinTheWindow(t *testing.T) {
	mem := []*memnode.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	c, err := health.New(one(t, mem[0], mem[1], mem[2]), health.Config{
		Interval: time.Hour, Timeout: 20 * time.Millisecond, DownAfter: 400 * time.Millisecond,
		StarvedDuring: func() func() bool { return func() bool { return false } },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Check(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, m := range mem[:2] {
		m.SetDelay(time.Hour)
	}
	start := time.Now()
	go c.Run(ctx)
	for c.Report().Ready {
		if time.Since(start) > 10*time.Second {
			t.Fatal("a silent majority not called down within 10s, with an interval of an hour")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("called down after %v, within the 400ms window", took)
	}
}
