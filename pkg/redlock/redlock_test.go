package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

const ttl = 10 * time.Second

func masters(n int) ([]*memnode.Node, []redlock.Node) {
	mem := make([]*memnode.Node, n)
	nodes := make([]redlock.Node, n)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("m%d", i))
		nodes[i] = mem[i]
	}
	return mem, nodes
}

func newLocker(t *testing.T, nodes []redlock.Node) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, redlock.Config{NodeTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// subsets yields every subset of {0..n-1} as a bit mask.
func subsets(n int) []int {
	out := make([]int, 1<<n)
	for i := range out {
		out[i] = i
	}
	return out
}

func members(mask, n int) (in []int) {
	for i := range n {
		if mask&(1<<i) != 0 {
			in = append(in, i)
		}
	}
	return in
}

func keyOn(t *testing.T, n *memnode.Node, key string) string {
	t.Helper()
	v, _, err := n.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get on %s: %v", n.Addr(), err)
	}
	return v
}

// Every subset of failed masters, for N in {1,3,5}: acquire succeeds exactly
// when a majority answers, and a failed acquire leaves no key anywhere.
func TestAcquireEverySubsetOfFailedMasters(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		for _, down := range subsets(n) {
			failed := members(down, n)
			t.Run(fmt.Sprintf("N=%d/down=%v", n, failed), func(t *testing.T) {
				mem, nodes := masters(n)
				for _, i := range failed {
					mem[i].SetDown(true)
				}
				l := newLocker(t, nodes)
				_, err := l.Acquire(context.Background(), "k", "v", ttl)
				wantOK := n-len(failed) >= n/2+1
				if wantOK != (err == nil) {
					t.Fatalf("acquire with %d of %d down: err=%v, want success=%v", len(failed), n, err, wantOK)
				}
				if !wantOK && !errors.Is(err, redlock.ErrNoQuorum) {
					t.Fatalf("err = %v, want ErrNoQuorum", err)
				}
				for i, m := range mem {
					m.SetDown(false)
					got := keyOn(t, m, "k")
					isDown := down&(1<<i) != 0
					if want := map[bool]string{true: "v", false: ""}[wantOK && !isDown]; got != want {
						t.Errorf("master %d holds %q, want %q", i, got, want)
					}
				}
			})
		}
	}
}

// Every subset of masters held by another value: acquire succeeds only
// when the free masters make a majority, and says "held" otherwise.
func TestAcquireEverySubsetHeldByAnother(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		for _, heldMask := range subsets(n) {
			held := members(heldMask, n)
			t.Run(fmt.Sprintf("N=%d/held=%v", n, held), func(t *testing.T) {
				mem, nodes := masters(n)
				for _, i := range held {
					if ok, _, err := mem[i].Acquire(context.Background(), "k", "other", ttl); !ok || err != nil {
						t.Fatal("setup failed")
					}
				}
				l := newLocker(t, nodes)
				_, err := l.Acquire(context.Background(), "k", "mine", ttl)
				wantOK := n-len(held) >= n/2+1
				if wantOK != (err == nil) {
					t.Fatalf("err=%v, want success=%v", err, wantOK)
				}
				var he *redlock.HeldError
				if !wantOK && !errors.As(err, &he) {
					t.Fatalf("err = %v, want *HeldError", err)
				}
				if !wantOK && len(held) > n-(n/2+1) && (he.RetryAfter <= 0 || he.RetryAfter > ttl) {
					t.Errorf("RetryAfter = %v, want within (0, %v]", he.RetryAfter, ttl)
				}
				for i, m := range mem {
					got := keyOn(t, m, "k")
					want := map[bool]string{true: "other", false: ""}[heldMask&(1<<i) != 0]
					if wantOK && want == "" {
						want = "mine"
					}
					if got != want {
						t.Errorf("master %d holds %q, want %q", i, got, want)
					}
				}
			})
		}
	}
}

// Extend and Release against every subset of failed masters.
func TestExtendAndReleaseEverySubsetOfFailedMasters(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		for _, down := range subsets(n) {
			failed := members(down, n)
			t.Run(fmt.Sprintf("N=%d/down=%v", n, failed), func(t *testing.T) {
				mem, nodes := masters(n)
				l := newLocker(t, nodes)
				if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
					t.Fatal(err)
				}
				for _, i := range failed {
					mem[i].SetDown(true)
				}
				wantOK := n-len(failed) >= n/2+1
				_, err := l.Extend(context.Background(), "k", "v", ttl)
				if wantOK != (err == nil) || (!wantOK && !errors.Is(err, redlock.ErrNoQuorum)) {
					t.Fatalf("extend: err=%v, want success=%v", err, wantOK)
				}
				err = l.Release(context.Background(), "k", "v")
				if wantOK != (err == nil) {
					t.Fatalf("release: err=%v, want success=%v", err, wantOK)
				}
				for i, m := range mem {
					if down&(1<<i) == 0 && keyOn(t, m, "k") != "" {
						t.Errorf("master %d still holds the key after release", i)
					}
				}
			})
		}
	}
}

func TestExtendReportsNotHeldWhenAnotherValueHoldsAMajority(t *testing.T) {
	mem, nodes := masters(3)
	l := newLocker(t, nodes)
	if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
		t.Fatal(err)
	}
	// Two masters forget the key (restart without persistence) and another
	// caller takes them: the old holder must learn it lost the lock.
	for _, m := range mem[:2] {
		m.Release(context.Background(), "k", "v")
		m.Acquire(context.Background(), "k", "thief", ttl)
	}
	_, err := l.Extend(context.Background(), "k", "v", ttl)
	if !errors.Is(err, redlock.ErrNotHeld) {
		t.Fatalf("err = %v, want ErrNotHeld", err)
	}
}

// Keys that lapsed on a majority may have been granted to another and
// released meanwhile: an extend that finds them gone must not revive the
// lock, in this round or (by writing them back) in the next.
func TestExtendNeverRevivesMissingKeys(t *testing.T) {
	for lost := 2; lost <= 3; lost++ {
		t.Run(fmt.Sprintf("lost-on=%d", lost), func(t *testing.T) {
			mem, nodes := masters(3)
			l := newLocker(t, nodes)
			if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
				t.Fatal(err)
			}
			for _, m := range mem[:lost] {
				m.Release(context.Background(), "k", "v") // lapsed
			}
			for round := range 2 {
				if _, err := l.Extend(context.Background(), "k", "v", ttl); !errors.Is(err, redlock.ErrNoQuorum) {
					t.Fatalf("extend %d after the keys lapsed on %d of 3: %v, want ErrNoQuorum", round+1, lost, err)
				}
			}
		})
	}
}

func TestExtendRepairsAMinorityThatLostTheKey(t *testing.T) {
	mem, nodes := masters(3)
	l := newLocker(t, nodes)
	if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
		t.Fatal(err)
	}
	mem[0].Release(context.Background(), "k", "v") // restarted empty
	if _, err := l.Extend(context.Background(), "k", "v", ttl); err != nil {
		t.Fatal(err)
	}
	if got := keyOn(t, mem[0], "k"); got != "v" {
		t.Fatalf("master 0 holds %q after extend, want it put back", got)
	}
}

// steppingClock advances by step at every reading, so elapsed time is exact.
type steppingClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.t
	c.t = c.t.Add(c.step)
	return now
}

func TestValidityIsTTLMinusDrift(t *testing.T) {
	clock := &steppingClock{t: time.Unix(1000, 0), step: time.Millisecond}
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Now: clock.Now, DriftFactor: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(context.Background(), "k", "v", ttl)
	if err != nil {
		t.Fatal(err)
	}
	// start was read at t0; drift is 1% of 10s plus 2ms.
	want := time.Unix(1000, 0).Add(ttl - 100*time.Millisecond - 2*time.Millisecond)
	if !g.ValidUntil.Equal(want) {
		t.Fatalf("ValidUntil = %v, want %v", g.ValidUntil, want)
	}
}

// A zero DriftFactor is the default 0.01, not "no drift": the sidecar's
// SIDELOCK_DRIFT_FACTOR=0 documents it so (docs/configuration.md).
func TestZeroDriftFactorIsTheDefault(t *testing.T) {
	clock := &steppingClock{t: time.Unix(1000, 0), step: time.Millisecond}
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	g, err := l.Acquire(context.Background(), "k", "v", ttl)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(1000, 0).Add(ttl - 100*time.Millisecond - 2*time.Millisecond); !g.ValidUntil.Equal(want) {
		t.Fatalf("ValidUntil = %v, want %v (drift 1%% of the ttl plus 2ms)", g.ValidUntil, want)
	}
}

func TestAcquireFailsWhenTheRoundOutlastsTheTTL(t *testing.T) {
	clock := &steppingClock{t: time.Unix(1000, 0), step: 2 * time.Second}
	mem, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Acquire(context.Background(), "k", "v", time.Second)
	if !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("err = %v, want ErrNoQuorum for a round slower than the ttl", err)
	}
	for i, m := range mem {
		if keyOn(t, m, "k") != "" {
			t.Errorf("master %d kept the key of a failed acquire", i)
		}
	}
}

func TestSlowMasterIsBoundedByNodeTimeout(t *testing.T) {
	mem, nodes := masters(3)
	mem[2].SetDelay(5 * time.Second)
	l := newLocker(t, nodes)
	start := time.Now()
	if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("acquire took %v with one master hanging; the node timeout must bound it", took)
	}
}

func TestInspectReportsTheMajorityHolder(t *testing.T) {
	mem, nodes := masters(3)
	l := newLocker(t, nodes)
	h, err := l.Inspect(context.Background(), "k")
	if err != nil || h.Held {
		t.Fatalf("free lock: %+v, %v", h, err)
	}
	if _, err := l.Acquire(context.Background(), "k", "v", ttl); err != nil {
		t.Fatal(err)
	}
	h, err = l.Inspect(context.Background(), "k")
	if err != nil || !h.Held || h.Value != "v" || !h.ValidUntil.After(time.Now()) {
		t.Fatalf("held lock: %+v, %v", h, err)
	}
	mem[0].SetDown(true)
	mem[1].SetDown(true)
	if _, err := l.Inspect(context.Background(), "k"); !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("inspect without quorum: err = %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, nodes := masters(3)
	if _, err := redlock.New(nil, redlock.Config{}); err == nil {
		t.Error("no masters accepted")
	}
	if _, err := redlock.New(nodes, redlock.Config{DriftFactor: 0.7}); err == nil {
		t.Error("drift factor 0.7 accepted")
	}
}

// An ineligible master (kept out by a safety guard) does not count towards
// a quorum, for every subset of ineligible masters with N=3.
func TestIneligibleMastersDoNotCount(t *testing.T) {
	for _, out := range subsets(3) {
		_, nodes := masters(3)
		l := newLocker(t, nodes)
		for _, i := range members(out, 3) {
			l.SetEligibility(i, redlock.Eligibility{})
		}
		_, err := l.Acquire(context.Background(), "k", "v", ttl)
		if want := 3-len(members(out, 3)) >= 2; want != (err == nil) {
			t.Errorf("ineligible %v: err=%v, want success=%v", members(out, 3), err, want)
		}
	}
}

// A Locker is its quorum group: it carries the group's name and masters,
// and reads back the verdict last recorded on each master (every answer
// counts before any).
func TestLockerCarriesItsGroup(t *testing.T) {
	_, nodes := masters(3)
	l, err := redlock.New(nodes, redlock.Config{Name: "east"})
	if err != nil {
		t.Fatal(err)
	}
	if l.Name() != "east" || len(l.Nodes()) != 3 || l.Nodes()[2] != nodes[2] || l.Quorum() != 2 {
		t.Fatalf("name %q, %d nodes, quorum %d", l.Name(), len(l.Nodes()), l.Quorum())
	}
	if e := l.Eligibility(1); !e.Eligible || !e.AnyConnection {
		t.Fatalf("before any verdict: %+v, want eligible over any connection", e)
	}
	verdict := redlock.Eligibility{Eligible: false, JudgedAt: 7, Why: "restart probation"}
	l.SetEligibility(1, verdict)
	if e := l.Eligibility(1); e != verdict || !l.Eligibility(0).Eligible {
		t.Fatalf("after a verdict on master 1: %+v, master 0 %+v", e, l.Eligibility(0))
	}
}

// countingNode is a master that counts its connections, as redisnode does;
// reconnect stands for a restart that broke them.
type countingNode struct {
	*memnode.Node
	opened atomic.Uint64
}

func (n *countingNode) ConnectionsOpened() uint64 { return n.opened.Load() }
func (n *countingNode) reconnect()                { n.opened.Add(1) }

// Kleppmann's scenario: A holds the lock on {m0, m1}; m1 restarts empty and
// B asks before any health round has judged it. m1's answer came over a
// new connection, so it must not count, and B must not win {m1, m2}.
func TestAnswersOverAnUnjudgedConnectionDoNotCount(t *testing.T) {
	mem, _ := masters(3)
	nodes := make([]redlock.Node, 3)
	counting := make([]*countingNode, 3)
	for i, m := range mem {
		counting[i] = &countingNode{Node: m}
		nodes[i] = counting[i]
	}
	l := newLocker(t, nodes)
	for i := range nodes {
		l.SetEligibility(i, redlock.Eligibility{Eligible: true})
	}
	mem[0].Acquire(context.Background(), "k", "A", time.Minute)
	mem[1].Acquire(context.Background(), "k", "A", time.Minute)
	mem[1].Restart()
	counting[1].reconnect()
	_, err := l.Acquire(context.Background(), "k", "B", time.Minute)
	if !errors.Is(err, redlock.ErrLockHeld) && !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("B acquired over the restarted master: err = %v", err)
	}
	// Judged again (here: as if its probation were over), it counts.
	l.SetEligibility(1, redlock.Eligibility{Eligible: true, JudgedAt: 1})
	mem[0].Release(context.Background(), "k", "A")
	if _, err := l.Acquire(context.Background(), "k", "B", time.Minute); err != nil {
		t.Fatalf("after the round judged it: %v", err)
	}
}

// trackingNode is a countingNode that also knows which server each of its
// connections reached (redlock.ServerTracker), as redisnode does.
type trackingNode struct {
	countingNode
	servers []string // servers[k-1]: the run id connection k reached
}

func (n *trackingNode) connect(runID string) {
	n.reconnect()
	n.servers = append(n.servers, runID)
}

func (n *trackingNode) ReachedSince(since uint64, runID string) bool {
	for _, r := range n.servers[since:] {
		if r != runID {
			return false
		}
	}
	return runID != ""
}

// A connection dropped and dialled again to the server the verdict judged
// (its run id) needs no new verdict: only a restart changes the run id, and
// a connection to another server, or to one whose run id is unknown, still
// waits for a round.
func TestAnswersOverANewConnectionToTheJudgedServerCount(t *testing.T) {
	mem, _ := masters(3)
	nodes := make([]redlock.Node, 3)
	tracking := make([]*trackingNode, 3)
	for i, m := range mem {
		tracking[i] = &trackingNode{countingNode: countingNode{Node: m}}
		tracking[i].connect("server-" + strconv.Itoa(i))
		nodes[i] = tracking[i]
	}
	l := newLocker(t, nodes)
	for i := range nodes {
		l.SetEligibility(i, redlock.Eligibility{Eligible: true, JudgedAt: 1, RunID: "server-" + strconv.Itoa(i)})
	}
	tracking[0].connect("server-0")
	tracking[1].connect("server-1")
	if _, err := l.Acquire(context.Background(), "k", "A", time.Minute); err != nil {
		t.Fatalf("after reconnects to the judged servers: %v", err)
	}
	tracking[1].connect("server-1-restarted")
	tracking[2].connect("")
	_, err := l.Acquire(context.Background(), "k2", "B", time.Minute)
	if !errors.Is(err, redlock.ErrNoQuorum) || !strings.Contains(err.Error(), "2 answered over a new connection") {
		t.Fatalf("with new connections to another server and to an unknown one: %v, want no quorum for both", err)
	}
}

// A quorum missed because masters sit out a restart probation says so,
// and when enough of them count again.
func TestNoQuorumNamesTheProbationAndWhenItEnds(t *testing.T) {
	_, nodes := masters(3)
	now := time.Now()
	l, err := redlock.New(nodes, redlock.Config{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, back := range []time.Duration{4 * time.Second, 2 * time.Second, 9 * time.Second} {
		l.SetEligibility(i, redlock.Eligibility{Why: "restart probation", Until: now.Add(back)})
	}
	_, err = l.Acquire(context.Background(), "k", "v", ttl)
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) || !errors.Is(err, redlock.ErrNoQuorum) {
		t.Fatalf("err = %v, want a QuorumError", err)
	}
	if qe.RetryAfter != 4*time.Second {
		t.Errorf("RetryAfter = %v, want 4s (the second master back makes a majority)", qe.RetryAfter)
	}
	if !strings.Contains(err.Error(), "restart probation") || !strings.Contains(err.Error(), "3 kept out") {
		t.Errorf("message %q does not name the probation", err)
	}
}

// releaseCountingNode counts the releases it is asked for.
type releaseCountingNode struct {
	*memnode.Node
	releases atomic.Int64
}

func (n *releaseCountingNode) Release(ctx context.Context, key, value string) (bool, error) {
	n.releases.Add(1)
	return n.Node.Release(ctx, key, value)
}

// A refusal that every master gave wrote nothing, so it releases nothing;
// one where any master accepted (or did not answer) releases everywhere.
func TestRefusedEverywhereReleasesNothing(t *testing.T) {
	mem, _ := masters(3)
	counting := make([]*releaseCountingNode, 3)
	nodes := make([]redlock.Node, 3)
	for i, m := range mem {
		counting[i] = &releaseCountingNode{Node: m}
		nodes[i] = counting[i]
	}
	l := newLocker(t, nodes)
	released := func() (n int64) {
		for _, c := range counting {
			n += c.releases.Swap(0)
		}
		return n
	}
	for _, m := range mem {
		m.Acquire(context.Background(), "k", "A", time.Minute)
	}
	if _, err := l.Acquire(context.Background(), "k", "B", time.Minute); !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("err = %v, want held", err)
	}
	if n := released(); n != 0 {
		t.Fatalf("a refusal by every master sent %d releases", n)
	}
	// An answer that does not count may hide a write: release.
	l.SetEligibility(1, redlock.Eligibility{Why: "restart probation"})
	if _, err := l.Acquire(context.Background(), "k", "B", time.Minute); err == nil {
		t.Fatal("acquired without a quorum")
	}
	if n := released(); n != 3 {
		t.Fatalf("a refusal with a master not counted sent %d releases, want 3", n)
	}
	l.SetEligibility(1, redlock.Eligibility{Eligible: true, JudgedAt: 1})
	mem[2].Release(context.Background(), "k", "A")
	if _, err := l.Acquire(context.Background(), "k", "B", time.Minute); !errors.Is(err, redlock.ErrLockHeld) {
		t.Fatalf("err = %v, want held", err)
	}
	if n := released(); n != 3 {
		t.Fatalf("a refusal after master 2 accepted sent %d releases, want 3", n)
	}
	if v, _, _ := mem[2].Get(context.Background(), "k"); v != "" {
		t.Fatalf("master 2 still holds %q for the refused caller", v)
	}
}

// Inspect over every subset of silent masters, with the holder's key on
// three of five: held while the three answer, free only when no value can
// make a majority with the silent ones, and no quorum (cannot tell)
// otherwise — never free while the holder may still hold it.
func TestInspectNeverCallsAPossiblyHeldLockFree(t *testing.T) {
	const n = 5
	for _, heldOn := range []int{3, 2} { // a holder's majority; a failed grant's leftover keys
		for silent := range 1 << n {
			mem, nodes := masters(n)
			l := newLocker(t, nodes)
			for i := range heldOn {
				mem[i].Acquire(context.Background(), "k", "A", time.Minute)
			}
			answered, answeredA := 0, 0
			for i := range mem {
				if silent&(1<<i) != 0 {
					mem[i].SetDown(true)
					continue
				}
				answered++
				if i < heldOn {
					answeredA++
				}
			}
			h, err := l.Inspect(context.Background(), "k")
			mayHold := answeredA+(n-answered) >= l.Quorum()
			switch {
			case answered < l.Quorum():
				if !errors.Is(err, redlock.ErrNoQuorum) {
					t.Errorf("A on %d, silent %05b: %+v, %v; want no quorum", heldOn, silent, h, err)
				}
			case answeredA >= l.Quorum():
				if err != nil || !h.Held || h.Value != "A" {
					t.Errorf("A on %d, silent %05b: %+v, %v; want held by A", heldOn, silent, h, err)
				}
			case mayHold:
				if !errors.Is(err, redlock.ErrNoQuorum) {
					t.Errorf("A on %d, silent %05b: %+v, %v; A may hold a majority: want cannot tell", heldOn, silent, h, err)
				}
			default:
				if err != nil || h.Held {
					t.Errorf("A on %d, silent %05b: %+v, %v; want free", heldOn, silent, h, err)
				}
			}
		}
	}
}
