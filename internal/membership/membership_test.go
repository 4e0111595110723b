package membership_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/fakeclock"
	"github.com/sidelock/sidelock/internal/membership"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// The assertion lives here: memnode does not import redlock.
var _ redlock.MemberRecorder = (*memnode.Node)(nil)

const (
	prefix  = "sidelock:"
	group   = "east"
	ttl     = time.Minute
	timeout = time.Second
)

// masters is a pool of in-memory masters named m1, m2, ... on one clock.
type masters struct {
	clock *fakeclock.Clock
	nodes map[string]*memnode.Node
}

func newMasters(t *testing.T, n int) *masters {
	t.Helper()
	m := &masters{clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), nodes: map[string]*memnode.Node{}}
	for i := range n {
		name := "m" + string(rune('1'+i))
		m.nodes[name] = memnode.New(name, memnode.WithClock(m.clock.Now))
		t.Cleanup(func() { _ = m.nodes[name].Close() })
	}
	return m
}

// check runs Check as a sidecar configured with list would.
func (m *masters) check(t *testing.T, list ...string) (membership.Result, error) {
	t.Helper()
	nodes := make([]redlock.Node, len(list))
	for i, name := range list {
		nodes[i] = m.nodes[name]
	}
	return membership.Check(t.Context(), prefix, group, list, nodes, ttl, timeout)
}

func (m *masters) mustCheck(t *testing.T, list ...string) membership.Result {
	t.Helper()
	res, err := m.check(t, list...)
	if err != nil {
		t.Fatalf("Check(%v): %v", list, err)
	}
	return res
}

func TestKeyNeverCollidesWithLockOrFenceKeys(t *testing.T) {
	for _, p := range []string{"", "sidelock:", "a#", "##"} {
		for _, g := range []string{"east", "", "fence", "m1:6379,m2:6379"} {
			key := membership.Key(p, g)
			name, ok := strings.CutPrefix(key, p)
			if !ok {
				t.Fatalf("Key(%q, %q) = %q lacks the prefix", p, g, key)
			}
			// A lock name has no '#'; a fence key adds exactly one after
			// the prefix and ends in "#fence".
			if n := strings.Count(name, "#"); n < 2 {
				t.Errorf("Key(%q, %q) = %q: %d '#' after the prefix, want at least 2", p, g, key, n)
			}
			if key == redlock.FenceKey(p+"group") || key == redlock.FenceKey(p+g) {
				t.Errorf("Key(%q, %q) = %q is a fence key", p, g, key)
			}
		}
	}
	if got := membership.Key("sidelock:", "east"); got != "sidelock:#group#east" {
		t.Errorf("Key = %q", got)
	}
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want string
	}{
		{[]string{"m2:6379", " m1:6379 ", "m3:6379"}, "m1:6379,m2:6379,m3:6379"},
		{[]string{"b", "a", "b", ""}, "a,b"},
		{nil, ""},
	} {
		if got := membership.Canonical(tc.in); got != tc.want {
			t.Errorf("Canonical(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCompatible(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b []string
		want bool
	}{
		{"3→2 remove one", []string{"m1", "m2", "m3"}, []string{"m1", "m2"}, true},
		{"2→3 add one", []string{"m1", "m2"}, []string{"m1", "m2", "m4"}, true},
		{"3→3 same set, other order", []string{"m1", "m2", "m3"}, []string{"m3", "m1", "m2"}, true},
		{"5→4 remove one", []string{"m1", "m2", "m3", "m4", "m5"}, []string{"m1", "m2", "m3", "m4"}, true},
		{"4→5 add one", []string{"m1", "m2", "m3", "m4"}, []string{"m1", "m2", "m3", "m4", "m5"}, true},
		{"1→2 add one", []string{"m1"}, []string{"m1", "m2"}, true},
		{"3→3 one replaced", []string{"m1", "m2", "m3"}, []string{"m1", "m2", "m4"}, false},
		{"3→3 all replaced", []string{"m1", "m2", "m3"}, []string{"m4", "m5", "m6"}, false},
		{"3→1 remove two", []string{"m1", "m2", "m3"}, []string{"m1"}, false},
		{"3→5 add two", []string{"m1", "m2", "m3"}, []string{"m1", "m2", "m3", "m4", "m5"}, false},
		{"5→5 one replaced", []string{"m1", "m2", "m3", "m4", "m5"}, []string{"m1", "m2", "m3", "m4", "m6"}, false},
		{"4→3 remove one", []string{"m1", "m2", "m3", "m4"}, []string{"m1", "m2", "m3"}, true},
		{"empty has no majority", nil, []string{"m1", "m2", "m3"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := membership.Compatible(tc.a, tc.b); got != tc.want {
				t.Errorf("Compatible(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := membership.Compatible(tc.b, tc.a); got != tc.want {
				t.Errorf("Compatible(%v, %v) = %v, want %v (the rule is symmetric)", tc.b, tc.a, got, tc.want)
			}
		})
	}
}

// TestCompatibleMatchesMajorities checks the formula against the
// definition, every majority of a meets every majority of b, on all pairs
// of subsets of six masters.
func TestCompatibleMatchesMajorities(t *testing.T) {
	all := []string{"m1", "m2", "m3", "m4", "m5", "m6"}
	subset := func(mask int) []string {
		var s []string
		for i, m := range all {
			if mask&(1<<i) != 0 {
				s = append(s, m)
			}
		}
		return s
	}
	count := func(mask int) int {
		n := 0
		for ; mask != 0; mask &= mask - 1 {
			n++
		}
		return n
	}
	// majorities lists the masks of a's subsets holding a majority of a.
	majorities := func(a int) []int {
		var out []int
		for m := a; m > 0; m = (m - 1) & a {
			if count(m) > count(a)/2 {
				out = append(out, m)
			}
		}
		return out
	}
	for a := 1; a < 1<<len(all); a++ {
		for b := 1; b < 1<<len(all); b++ {
			want := true
			for _, ma := range majorities(a) {
				for _, mb := range majorities(b) {
					if ma&mb == 0 {
						want = false
					}
				}
			}
			if got := membership.Compatible(subset(a), subset(b)); got != want {
				t.Fatalf("Compatible(%v, %v) = %v, want %v", subset(a), subset(b), got, want)
			}
		}
	}
}

// TestRollouts runs a sidecar with the old list, then one with the new list
// while the old one's record is live: the check fails exactly when the
// lists are incompatible.
func TestRollouts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new []string
		split    bool
	}{
		{"3→2 remove one", []string{"m1", "m2", "m3"}, []string{"m1", "m2"}, false},
		{"2→3 add one", []string{"m1", "m2"}, []string{"m1", "m2", "m4"}, false},
		{"3→3 same set", []string{"m1", "m2", "m3"}, []string{"m3", "m2", "m1"}, false},
		{"5→4 remove one", []string{"m1", "m2", "m3", "m4", "m5"}, []string{"m1", "m2", "m3", "m4"}, false},
		{"3→3 one replaced", []string{"m1", "m2", "m3"}, []string{"m1", "m2", "m4"}, true},
		{"3→3 two replaced", []string{"m1", "m2", "m3"}, []string{"m1", "m4", "m5"}, true},
		{"3→5 add two", []string{"m1", "m2", "m3"}, []string{"m1", "m2", "m3", "m4", "m5"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := newMasters(t, 6)
			m.mustCheck(t, tc.old...)
			m.clock.Advance(ttl / 2)
			res, err := m.check(t, tc.new...)
			if got := errors.Is(err, membership.ErrSplitMembership); got != tc.split {
				t.Fatalf("new list %v after %v: err = %v, want split %v", tc.new, tc.old, err, tc.split)
			}
			old, shared := membership.Canonical(tc.old), sharedMasters(tc.old, tc.new)
			if got := res.Lists[old]; !slices.Equal(got, shared) {
				t.Errorf("old list reported by %v, want the shared masters %v", got, shared)
			}
			// The old sidecar's next check sees the split too.
			if _, err := m.check(t, tc.old...); errors.Is(err, membership.ErrSplitMembership) != tc.split {
				t.Errorf("old list's next check: err = %v, want split %v", err, tc.split)
			}
		})
	}
}

// sharedMasters lists the masters of b that are in a, in b's order.
func sharedMasters(a, b []string) []string {
	var out []string
	for _, m := range b {
		if slices.Contains(a, m) {
			out = append(out, m)
		}
	}
	return out
}

func TestSplitErrorNamesTheGroupTheListTheMastersAndTheProcedure(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3")
	res, err := m.check(t, "m4", "m2", "m1")
	if !errors.Is(err, membership.ErrSplitMembership) {
		t.Fatalf("err = %v, want ErrSplitMembership", err)
	}
	for _, want := range []string{`"east"`, "[m1,m2,m4]", "[m1,m2,m3] (recorded on m2, m1)", "one at a time", "without the old master", "plus one key ttl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if res.Members != "m1,m2,m4" || !slices.Equal(res.Incompatible, []string{"m1,m2,m3"}) {
		t.Errorf("result %+v", res)
	}
	if got := res.Lists["m1,m2,m4"]; !slices.Equal(got, []string{"m4", "m2", "m1"}) {
		t.Errorf("our list reported by %v, want every master", got)
	}
}

// The documented procedure passes every step; the replacement in one step
// is refused until the old list's record has expired.
func TestSafeReplacementProcedure(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3") // old sidecars

	// Step 1: the list without the old master; old sidecars still run.
	m.clock.Advance(ttl / 2)
	m.mustCheck(t, "m1", "m2")
	m.mustCheck(t, "m1", "m2", "m3")

	// Too early for the new master: the old list is still live.
	if _, err := m.check(t, "m1", "m2", "m4"); !errors.Is(err, membership.ErrSplitMembership) {
		t.Fatalf("new master while the old list is live: err = %v, want ErrSplitMembership", err)
	}

	// The last old sidecar is gone: its record (and the refused
	// sidecar's) lapses ttl after its last check, while the sidecars of
	// step 1 keep theirs refreshed.
	for range 2 {
		m.clock.Advance(ttl / 2)
		m.mustCheck(t, "m1", "m2")
	}
	if _, err := m.check(t, "m1", "m2", "m4"); err != nil {
		t.Fatalf("step 2 once the old list expired: %v", err)
	}
	// And the sidecars of step 1 accept the new list.
	m.mustCheck(t, "m1", "m2")
}

// An old list stops counting ttl after its last record, and not before.
func TestRecordsExpire(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3")
	m.clock.Advance(ttl - time.Millisecond)
	if _, err := m.check(t, "m1", "m2", "m4"); !errors.Is(err, membership.ErrSplitMembership) {
		t.Fatalf("1ms before the record expires: err = %v, want ErrSplitMembership", err)
	}
	// The refused check recorded its own list too; both lapse after ttl.
	m.clock.Advance(ttl)
	res, err := m.check(t, "m1", "m2", "m4")
	if err != nil {
		t.Fatalf("after the records expired: %v", err)
	}
	if len(res.Lists) != 1 || len(res.Incompatible) != 0 {
		t.Errorf("lists %v, want only ours", res.Lists)
	}
}

// bare hides every optional interface of a node.
type bare struct{ redlock.Node }

func TestSilentAndUnsupportedMastersAreSkipped(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3")
	m.nodes["m1"].SetDown(true)
	m.nodes["m2"].SetDelay(time.Hour)

	nodes := []redlock.Node{m.nodes["m1"], m.nodes["m2"], bare{m.nodes["m3"]}, m.nodes["m4"]}
	start := time.Now()
	res, err := membership.Check(t.Context(), prefix, group, []string{"m1", "m2", "m3", "m4"}, nodes, ttl, 50*time.Millisecond)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Check took %v with a master that never answers", took)
	}
	// Only m4 answered, and it has seen no other list: nothing to refuse.
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if !slices.Equal(res.Answered, []string{"m4"}) || !slices.Equal(res.Unsupported, []string{"m3"}) {
		t.Errorf("answered %v, unsupported %v; want [m4], [m3]", res.Answered, res.Unsupported)
	}
	var unanswered []string
	for _, f := range res.Unanswered {
		unanswered = append(unanswered, f.Addr)
		if f.Err == nil {
			t.Errorf("%s unanswered without an error", f.Addr)
		}
	}
	if !slices.Equal(unanswered, []string{"m1", "m2"}) {
		t.Errorf("unanswered %v, want [m1 m2]", unanswered)
	}
	if !errors.Is(res.Unanswered[0].Err, memnode.ErrDown) || !errors.Is(res.Unanswered[1].Err, context.DeadlineExceeded) {
		t.Errorf("unanswered errors %v, want down and deadline exceeded", res.Unanswered)
	}
}

// A master restarted without persistence forgets the records: the check
// cannot see an old list then (a documented limit), and it starts over.
func TestRestartForgetsRecords(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3")
	m.nodes["m1"].Restart()
	m.nodes["m2"].Restart()
	res, err := m.check(t, "m1", "m2", "m4")
	if err != nil {
		t.Fatalf("after the shared masters restarted: %v", err)
	}
	if len(res.Lists) != 1 {
		t.Errorf("lists %v, want only ours", res.Lists)
	}
}

// Groups are independent, and so are prefixes.
func TestGroupsAndPrefixesAreIndependent(t *testing.T) {
	m := newMasters(t, 4)
	m.mustCheck(t, "m1", "m2", "m3")
	nodes := []redlock.Node{m.nodes["m1"], m.nodes["m2"], m.nodes["m4"]}
	list := []string{"m1", "m2", "m4"}
	if _, err := membership.Check(t.Context(), prefix, "west", list, nodes, ttl, timeout); err != nil {
		t.Errorf("another group: %v", err)
	}
	if _, err := membership.Check(t.Context(), "other:", group, list, nodes, ttl, timeout); err != nil {
		t.Errorf("another prefix: %v", err)
	}
}

func TestCheckRefusesNoMastersOrNoTTL(t *testing.T) {
	m := newMasters(t, 1)
	nodes := []redlock.Node{m.nodes["m1"]}
	if _, err := membership.Check(t.Context(), prefix, group, nil, nodes, ttl, timeout); err == nil {
		t.Error("Check with no members passed")
	}
	if _, err := membership.Check(t.Context(), prefix, group, []string{"m1"}, nodes, 0, timeout); err == nil {
		t.Error("Check with a zero ttl passed")
	}
}
