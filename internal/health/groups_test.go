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

func twoGroups() ([]*memnode.Node, []redlock.Node, []health.Group) {
	mem := make([]*memnode.Node, 6)
	nodes := make([]redlock.Node, 6)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("m%d", i))
		nodes[i] = mem[i]
	}
	return mem, nodes, []health.Group{{Name: "a", Size: 3, Quorum: 2}, {Name: "b", Size: 3, Quorum: 2}}
}

func TestGroupLosingItsQuorumIsReportedAndPolicyDecidesReadiness(t *testing.T) {
	for _, c := range []struct {
		policy    health.ReadyPolicy
		wantReady bool
	}{{health.ReadyAllGroups, false}, {health.ReadyAnyGroup, true}, {"", false}} {
		mem, nodes, groups := twoGroups()
		checker, err := health.New(nodes, 0, health.Config{Groups: groups, ReadyPolicy: c.policy})
		if err != nil {
			t.Fatal(err)
		}
		if r := checker.Check(context.Background()); !r.Ready || len(r.Groups) != 2 {
			t.Fatalf("policy %q, all up: %+v", c.policy, r)
		}
		mem[3].SetDown(true)
		mem[4].SetDown(true)
		r := checker.Check(context.Background())
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
	_, nodes, groups := twoGroups()
	for name, cfg := range map[string]health.Config{
		"sizes do not add up": {Groups: groups[:1]},
		"quorum above size":   {Groups: []health.Group{{Name: "a", Size: 3, Quorum: 4}, {Name: "b", Size: 3, Quorum: 2}}},
		"unknown policy":      {Groups: groups, ReadyPolicy: "most"},
	} {
		if _, err := health.New(nodes, 0, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
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
	c, err := health.New(nodes, 2, health.Config{})
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
	q := &quorumView{eligible: map[int]bool{}}
	c, err := health.New(nodes, 0, health.Config{
		SetEligible: q.Set, Groups: []health.Group{{Name: "a", Size: 2, Quorum: 2}, {Name: "b", Size: 3, Quorum: 2}},
	})
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
