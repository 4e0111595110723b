package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

func TestReadyOnlyWithAQuorum(t *testing.T) {
	mem := []*memnode.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	nodes := []redlock.Node{mem[0], mem[1], mem[2]}
	var changes []string
	c, err := health.New(one(t, nodes...), health.Config{OnChange: func(prev, cur health.Report) {
		changes = append(changes, fmt.Sprintf("%d->%d", prev.Up, cur.Up))
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Report().Ready {
		t.Fatal("ready before the first check")
	}
	steps := []struct {
		down  []int
		ready bool
		up    int
	}{
		{nil, true, 3},
		{[]int{0}, true, 2},
		{[]int{0, 1}, false, 1},
		{[]int{0, 1, 2}, false, 0},
		{nil, true, 3},
	}
	for _, s := range steps {
		for i, m := range mem {
			m.SetDown(false)
			for _, d := range s.down {
				if d == i {
					m.SetDown(true)
				}
			}
		}
		r := c.Check(context.Background())
		if r.Ready != s.ready || r.Up != s.up || c.Report().Ready != s.ready {
			t.Fatalf("down=%v: %+v, want ready=%v up=%d", s.down, r, s.ready, s.up)
		}
		for i, n := range r.Nodes {
			if n.Addr != mem[i].Addr() || (n.Error != "") == n.Up {
				t.Fatalf("node %d state %+v", i, n)
			}
		}
	}
	if want := "[0->3 3->2 2->1 1->0 0->3]"; fmt.Sprint(changes) != want {
		t.Fatalf("changes %v, want %v", changes, want)
	}
}

func TestAHangingMasterIsDownWithinTheTimeout(t *testing.T) {
	slow := memnode.New("slow")
	slow.SetDelay(10 * time.Second)
	c, _ := health.New(one(t, slow), health.Config{Timeout: 50 * time.Millisecond})
	start := time.Now()
	if r := c.Check(context.Background()); r.Ready {
		t.Fatal("a hanging master counted as up")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("check took %v", took)
	}
}

func TestNewRejectsNoGroup(t *testing.T) {
	if _, err := health.New(nil, health.Config{}); err == nil {
		t.Fatal("no quorum group accepted")
	}
}

// A round in which this sidecar was starved of CPU does not judge a master
// that did not answer in time: it keeps the last conclusive verdict, so a
// burst of requests cannot mark healthy masters down (which made every
// acquisition "no quorum" and cost held locks their renewals). A master
// that times out while the sidecar is not starved is down as always, and
// so is one that refuses connections while it is.
func TestAStarvedRoundDoesNotJudgeMastersThatTimedOut(t *testing.T) {
	mem := []*memnode.Node{memnode.New("a"), memnode.New("b"), memnode.New("c")}
	nodes := []redlock.Node{mem[0], mem[1], mem[2]}
	starved := false
	q := quorumView{one(t, nodes...)}
	eligible := func() []bool { return []bool{q.Get(0), q.Get(1), q.Get(2)} }
	c, err := health.New(q.groups, health.Config{
		Timeout:       20 * time.Millisecond,
		StarvedDuring: func() func() bool { return func() bool { return starved } },
	})
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Check(context.Background()); !r.Ready || r.Up != 3 {
		t.Fatalf("first round: %+v", r)
	}
	for _, m := range mem {
		m.SetDelay(time.Second) // every ping times out
	}
	starved = true
	if r := c.Check(context.Background()); !r.Ready || r.Up != 3 || !q.Get(0) || !q.Get(1) || !q.Get(2) {
		t.Fatalf("a starved round marked masters that timed out down: %+v, eligible %v", r, eligible())
	}
	mem[2].SetDelay(0)
	mem[2].SetDown(true) // refuses: that is an answer, starved or not
	if r := c.Check(context.Background()); r.Up != 2 || r.Nodes[2].Up {
		t.Fatalf("a master that refuses stayed up in a starved round: %+v", r)
	}
	starved = false
	if r := c.Check(context.Background()); r.Ready || r.Up != 0 {
		t.Fatalf("masters that time out while the sidecar is not starved stayed up: %+v", r)
	}
}

// A starved round that repeats the last verdict also repeats what it
// vouched for: a connection opened since (a master that may have restarted
// behind it) is not counted until a conclusive round judges it.
func TestAStarvedRoundVouchesForNoNewConnection(t *testing.T) {
	m := memnode.New("a")
	node := &countingNode{infoNode: infoNode{m}}
	starved := false
	q := quorumView{one(t, node)}
	c, err := health.New(q.groups, health.Config{
		Timeout:       20 * time.Millisecond,
		StarvedDuring: func() func() bool { return func() bool { return starved } },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Check(context.Background())
	node.opened.Add(1) // a reconnect between rounds
	m.SetDelay(time.Second)
	starved = true
	if r := c.Check(context.Background()); !r.Ready || q.Verdict(0).JudgedAt != 0 {
		t.Fatalf("starved round: ready %v, vouches for connections up to %d; want the last verdict, up to 0", r.Ready, q.Verdict(0).JudgedAt)
	}
	m.SetDelay(0)
	starved = false
	if c.Check(context.Background()); q.Verdict(0).JudgedAt != 1 {
		t.Fatalf("conclusive round vouches up to %d, want 1", q.Verdict(0).JudgedAt)
	}
}

// A Report decodes from what /readyz writes: a master's probation and
// uptime come back to the millisecond.
func TestReportRoundTrips(t *testing.T) {
	durable := true
	in := health.Report{Ready: true, Quorum: 2, Up: 3, Eligible: 2, Nodes: []health.NodeState{{
		Addr: "a:6379", Up: true, Problem: "restart probation", Durable: &durable,
		ProbationRemaining: health.Duration(2500 * time.Millisecond), Uptime: health.Duration(90 * time.Second),
	}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out health.Report
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("%s decoded as %+v", b, out)
	}
	var d health.Duration
	if err := json.Unmarshal([]byte(`"soon"`), &d); err == nil {
		t.Fatal(`"soon" decoded as a duration`)
	}
}
