package health_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// twoGroups is groups a (m0, m1, m2) and b (m3, m4, m5).
func twoGroups(t *testing.T) ([]*memnode.Node, quorumView) {
	mem := make([]*memnode.Node, 6)
	nodes := make([]redlock.Node, 6)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("m%d", i))
		nodes[i] = mem[i]
	}
	return mem, quorumView{[]*redlock.Locker{group(t, "a", nodes[:3]...), group(t, "b", nodes[3:]...)}}
}

func TestGroupLosingItsQuorumIsReportedAndPolicyDecidesReadiness(t *testing.T) {
	for _, c := range []struct {
		policy    health.ReadyPolicy
		wantReady bool
	}{{health.ReadyAllGroups, false}, {health.ReadyAnyGroup, true}, {"", false}} {
		mem, q := twoGroups(t)
		checker, err := health.New(q.groups, health.Config{ReadyPolicy: c.policy})
		if err != nil {
			t.Fatal(err)
		}
		if r := checker.Check(context.Background()); !r.Ready || len(r.Groups) != 2 {
			t.Fatalf("policy %q, all up: %+v", c.policy, r)
		}
		mem[3].SetDown(true)
		mem[4].SetDown(true)
		r := checker.Check(context.Background())
		q.told(t, r)
		if r.Ready != c.wantReady {
			t.Errorf("policy %q, group b without quorum: ready=%v, want %v", c.policy, r.Ready, c.wantReady)
		}
		a, b := r.Groups[0], r.Groups[1]
		if !a.Ready || a.Up != 3 || b.Ready || b.Up != 1 || b.Name != "b" || len(b.Masters) != 3 || b.Masters[0] != "m3" {
			t.Errorf("policy %q: groups %+v", c.policy, r.Groups)
		}
		if r.Quorum != 0 || r.Up != 4 {
			t.Errorf("policy %q: quorum %d, up %d; want 0 and 4", c.policy, r.Quorum, r.Up)
		}
	}
}

func TestBadGroupLayoutsAreRefused(t *testing.T) {
	_, q := twoGroups(t)
	a, b := q.groups[0], q.groups[1]
	for name, c := range map[string]struct {
		groups []*redlock.Locker
		cfg    health.Config
	}{
		"no group":        {nil, health.Config{}},
		"a nil group":     {[]*redlock.Locker{a, nil}, health.Config{}},
		"one group twice": {[]*redlock.Locker{a, b, a}, health.Config{}},
		"unknown policy":  {q.groups, health.Config{ReadyPolicy: "most"}},
	} {
		if _, err := health.New(c.groups, c.cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// Each round's verdict on a master reaches its own group's Locker, at its
// place there: a master kept out in one group is not kept out in another.
func TestVerdictsReachEachMastersOwnGroup(t *testing.T) {
	nodes := []redlock.Node{replicaOf("a0"), memnode.New("a1"), memnode.New("b0"), memnode.New("b1"), replicaOf("b2")}
	q := quorumView{[]*redlock.Locker{group(t, "a", nodes[:2]...), group(t, "b", nodes[2:]...)}}
	c, err := health.New(q.groups, health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Check(context.Background())
	if got := eligible(r); got != "-EEE-" {
		t.Fatalf("eligible %q, want -EEE- (the replicas out)", got)
	}
	q.told(t, r)
	a, b := q.groups[0], q.groups[1]
	if a.Eligibility(0).Eligible || !a.Eligibility(1).Eligible || !b.Eligibility(0).Eligible || !b.Eligibility(1).Eligible || b.Eligibility(2).Eligible {
		t.Fatalf("verdicts a %v %v, b %v %v %v", a.Eligibility(0), a.Eligibility(1), b.Eligibility(0), b.Eligibility(1), b.Eligibility(2))
	}
	if g := r.Groups; len(g) != 2 || g[0].Name != "a" || g[0].Eligible != 1 || g[0].Ready || g[1].Name != "b" || g[1].Eligible != 2 || !g[1].Ready {
		t.Fatalf("groups %+v", g)
	}
}

// replicaOf is a master that describes itself as a replica, which the
// independence guard keeps out.
func replicaOf(name string) redlock.Node { return replica{memnode.New(name)} }

type replica struct{ *memnode.Node }

func (r replica) ServerInfo(ctx context.Context) (redlock.ServerInfo, error) {
	info, err := r.Node.ServerInfo(ctx)
	info.Role = "slave"
	return redlock.ServerInfo(info), err
}

// infoRefused is a master that answers pings but refuses INFO (an ACL).
type infoRefused struct{ *memnode.Node }

func (infoRefused) ServerInfo(context.Context) (redlock.ServerInfo, error) {
	return redlock.ServerInfo{}, errors.New("NOPERM this user has no permissions to run the 'info' command")
}

// The info read doubles as the liveness check; when it is refused, a ping
// decides, so such a master still counts as up.
func TestMasterRefusingInfoIsStillUp(t *testing.T) {
	nodes := []redlock.Node{infoRefused{memnode.New("a")}, infoRefused{memnode.New("b")}, infoRefused{memnode.New("c")}}
	c, err := health.New(one(t, nodes...), health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.Check(context.Background())
	if !r.Ready || r.Up != 3 || r.Nodes[0].Warning == "" {
		t.Fatalf("report: ready=%v up=%d warning=%q", r.Ready, r.Up, r.Nodes[0].Warning)
	}
}

// A veto keeps every master of one group out of the quorum, and only that
// group's, until it is lifted.
func TestVetoKeepsAGroupOutUntilLifted(t *testing.T) {
	nodes := []redlock.Node{memnode.New("a1"), memnode.New("a2"), memnode.New("b1"), memnode.New("b2"), memnode.New("b3")}
	q := quorumView{[]*redlock.Locker{group(t, "a", nodes[:2]...), group(t, "b", nodes[2:]...)}}
	c, err := health.New(q.groups, health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c.Veto(1, "split member list")
	r := c.Check(context.Background())
	if got := eligible(r); got != "EE---" {
		t.Fatalf("eligible %q with group b vetoed, want EE---", got)
	}
	if r.Nodes[3].Problem != "split member list" || q.Get(3) {
		t.Fatalf("vetoed master: %+v, counted %v", r.Nodes[3], q.Get(3))
	}
	c.Veto(1, "")
	if got := eligible(c.Check(context.Background())); got != "EEEEE" {
		t.Fatalf("eligible %q after the veto was lifted", got)
	}
}
