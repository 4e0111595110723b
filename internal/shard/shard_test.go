package shard_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/shard"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

const ttl = 10 * time.Second

// memGroup is a group of three in-memory masters whose clocks stand still
// at `at`, so fences come from the counters (and a group's clock floor can
// be set apart from another's).
func memGroup(t *testing.T, name string, at time.Time) (*redlock.Locker, []*memnode.Node) {
	t.Helper()
	mem := make([]*memnode.Node, 3)
	nodes := make([]redlock.Node, 3)
	for i := range mem {
		mem[i] = memnode.New(fmt.Sprintf("%s%d", name, i), memnode.WithClock(func() time.Time { return at }))
		nodes[i] = mem[i]
	}
	l, err := redlock.New(nodes, redlock.Config{Name: name, Fencing: true})
	if err != nil {
		t.Fatal(err)
	}
	return l, mem
}

func router(t *testing.T, current, previous []*redlock.Locker) *shard.Router {
	t.Helper()
	r, err := shard.New(current, previous)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func names(n int) []string {
	g := make([]string, n)
	for i := range g {
		g[i] = fmt.Sprintf("group-%d", i)
	}
	return g
}

// nameList is the groups' names, in order.
func nameList(groups ...*redlock.Locker) []string {
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g.Name()
	}
	return out
}

func TestPickIsPinned(t *testing.T) {
	// Pin the mapping: a change here moves keys between groups in a
	// running fleet, which needs a migration.
	groups := []string{"a", "b", "c"}
	want := map[string]string{}
	for _, key := range []string{"sidelock:orders", "sidelock:billing/run", "sidelock:x", "sidelock:"} {
		want[key] = groups[shard.Pick(groups, key)]
	}
	pinned := map[string]string{"sidelock:orders": "c", "sidelock:billing/run": "b", "sidelock:x": "c", "sidelock:": "c"}
	for key, g := range pinned {
		if want[key] != g {
			t.Errorf("key %q maps to %q, pinned to %q", key, want[key], g)
		}
	}
}

func TestPickSpreadsKeysEvenly(t *testing.T) {
	const keys = 100_000
	for _, k := range []int{2, 3, 5} {
		groups := names(k)
		count := make([]int, k)
		for i := range keys {
			count[shard.Pick(groups, fmt.Sprintf("sidelock:job-%d", i))]++
		}
		for g, c := range count {
			share := float64(c) / keys
			if d := share - 1/float64(k); d > 0.01 || d < -0.01 {
				t.Errorf("K=%d: group %d serves %.3f of the keys, want %.3f±0.01", k, g, share, 1/float64(k))
			}
		}
	}
}

func TestAddingAGroupMovesOnlyItsShareToIt(t *testing.T) {
	const keys = 100_000
	before, after := names(3), names(4)
	moved := 0
	for i := range keys {
		key := fmt.Sprintf("sidelock:job-%d", i)
		from, to := shard.Pick(before, key), shard.Pick(after, key)
		if from == to {
			continue
		}
		moved++
		if to != 3 {
			t.Fatalf("key %q moved from group %d to %d, not to the new group", key, from, to)
		}
	}
	if share := float64(moved) / keys; share < 0.24 || share > 0.26 {
		t.Errorf("adding a 4th group moved %.3f of the keys, want about 1/4", share)
	}
}

func TestRemovingAGroupMovesOnlyItsKeys(t *testing.T) {
	before := names(4)
	after := append(append([]string{}, before[:1]...), before[2:]...) // group-1 removed
	for i := range 20_000 {
		key := fmt.Sprintf("sidelock:job-%d", i)
		from := before[shard.Pick(before, key)]
		to := after[shard.Pick(after, key)]
		if from != to && from != "group-1" {
			t.Fatalf("key %q moved from %s to %s though its group stayed", key, from, to)
		}
	}
}

func TestNewRefusesInconsistentGroups(t *testing.T) {
	a, _ := memGroup(t, "a", time.Now())
	a2, _ := memGroup(t, "a", time.Now())
	b, _ := memGroup(t, "b", time.Now())
	unnamed, _ := memGroup(t, "", time.Now())
	for name, c := range map[string]struct{ cur, prev []*redlock.Locker }{
		"no groups":                 {nil, nil},
		"duplicate name":            {[]*redlock.Locker{a, a2}, nil},
		"no name":                   {[]*redlock.Locker{unnamed}, nil},
		"no locker":                 {[]*redlock.Locker{a, nil}, nil},
		"one name, two definitions": {[]*redlock.Locker{a, b}, []*redlock.Locker{a2}},
	} {
		if _, err := shard.New(c.cur, c.prev); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// movingKey finds a key served by `to` under current and by `from` under
// previous.
func movingKey(t *testing.T, current, previous []string, from, to string) string {
	t.Helper()
	for i := range 10_000 {
		key := fmt.Sprintf("sidelock:moving-%d", i)
		if current[shard.Pick(current, key)] == to && previous[shard.Pick(previous, key)] == from {
			return key
		}
	}
	t.Fatalf("no key moves from %s to %s", from, to)
	return ""
}

// migration is the three kinds of sidecar a change from groups {a, b} to
// {a, b, c} involves, sharing the same masters.
type migration struct {
	old, migrating, new *shard.Router
	a, b, c             *redlock.Locker
	key                 string // moves from a to c
}

func newMigration(t *testing.T) migration {
	t.Helper()
	// Group a's clock runs an hour ahead of c's, so c's clock floor alone
	// would give fences below a's: only the fence hand-over keeps them
	// increasing.
	now := time.Unix(1_800_000_000, 0)
	a, _ := memGroup(t, "a", now.Add(time.Hour))
	b, _ := memGroup(t, "b", now)
	c, _ := memGroup(t, "c", now)
	before, after := []*redlock.Locker{a, b}, []*redlock.Locker{a, b, c}
	return migration{
		old:       router(t, before, nil),
		migrating: router(t, after, before),
		new:       router(t, after, nil),
		a:         a, b: b, c: c,
		key: movingKey(t, nameList(after...), nameList(before...), "a", "c"),
	}
}

func TestMovingKeyIsHeldInBothGroups(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	if home, from := m.migrating.GroupOf(m.key); home != "c" || from != "a" {
		t.Fatalf("GroupOf = %s from %s, want c from a", home, from)
	}
	if _, err := m.migrating.Acquire(ctx, m.key, "v1", ttl); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*redlock.Locker{m.a, m.c} {
		if h, err := g.Inspect(ctx, m.key); err != nil || !h.Held || h.Value != "v1" {
			t.Errorf("group %s: %+v, %v; want held by v1", g.Name(), h, err)
		}
	}
	if err := m.migrating.Release(ctx, m.key, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, g := range []*redlock.Locker{m.a, m.c} {
		if h, _ := g.Inspect(ctx, m.key); h.Held {
			t.Errorf("group %s still holds the key after release", g.Name())
		}
	}
}

func TestMigrationKeepsOneHolderBetweenNeighbouringPhases(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	pairs := []struct {
		name          string
		first, second *shard.Router
	}{
		{"old then migrating", m.old, m.migrating},
		{"migrating then old", m.migrating, m.old},
		{"migrating then new", m.migrating, m.new},
		{"new then migrating", m.new, m.migrating},
	}
	for _, p := range pairs {
		if _, err := p.first.Acquire(ctx, m.key, "first", ttl); err != nil {
			t.Fatalf("%s: first acquire: %v", p.name, err)
		}
		if _, err := p.second.Acquire(ctx, m.key, "second", ttl); !errors.Is(err, redlock.ErrLockHeld) {
			t.Errorf("%s: second acquire got %v, want ErrLockHeld", p.name, err)
		}
		if h, err := p.second.Inspect(ctx, m.key); err != nil || h.Value != "first" {
			t.Errorf("%s: second sees %+v, %v; want held by first", p.name, h, err)
		}
		if err := p.first.Release(ctx, m.key, "first"); err != nil {
			t.Fatalf("%s: release: %v", p.name, err)
		}
		if _, err := p.second.Acquire(ctx, m.key, "second", ttl); err != nil {
			t.Errorf("%s: second acquire after release: %v", p.name, err)
		}
		_ = p.second.Release(ctx, m.key, "second")
	}
}

// The rule's precondition, shown: sidecars on the old list and on the new
// list alone share no group for a moving key, so both win. This is why
// the migration phase must separate them.
func TestOldAndNewListsWithoutTheMigrationPhaseCanBothHold(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	if _, err := m.old.Acquire(ctx, m.key, "old", ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := m.new.Acquire(ctx, m.key, "new", ttl); err != nil {
		t.Fatalf("expected the documented hazard, got %v", err)
	}
}

func TestFencesIncreaseThroughAMigration(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	phases := [][]*shard.Router{{m.old, m.migrating}, {m.migrating, m.new}}
	var last int64
	for p, routers := range phases {
		for i := range 100 {
			r := routers[(i*7+i/3)%2]
			g, err := r.Acquire(ctx, m.key, fmt.Sprintf("v%d-%d", p, i), ttl)
			if err != nil {
				t.Fatal(err)
			}
			if g.Fence <= last {
				t.Fatalf("phase %d grant %d: fence %d not above the previous %d", p+1, i, g.Fence, last)
			}
			last = g.Fence
			if err := r.Release(ctx, m.key, fmt.Sprintf("v%d-%d", p, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestExtendAndExtendManyCoverBothGroupsOfAMovingKey(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	stay := movingKey(t, nameList(m.a, m.b, m.c), nameList(m.a, m.b), "b", "b")
	for _, k := range []string{m.key, stay} {
		if _, err := m.migrating.Acquire(ctx, k, "v", ttl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.migrating.Extend(ctx, m.key, "v", ttl); err != nil {
		t.Fatalf("extend: %v", err)
	}
	items := []redlock.ExtendItem{{Key: m.key, Value: "v", TTL: ttl}, {Key: stay, Value: "v", TTL: ttl}, {Key: stay, Value: "other", TTL: ttl}}
	grants, errs := m.migrating.ExtendMany(ctx, items)
	if errs[0] != nil || errs[1] != nil || grants[0].ValidUntil.IsZero() || grants[1].ValidUntil.IsZero() {
		t.Fatalf("ExtendMany: %v %v", grants, errs)
	}
	if !errors.Is(errs[2], redlock.ErrNotHeld) {
		t.Errorf("ExtendMany of another value: %v, want ErrNotHeld", errs[2])
	}
	// Another value takes the moving key in its old group only (as if the
	// lease had lapsed there): the lease is no longer held.
	_ = m.a.Release(ctx, m.key, "v")
	if _, err := m.a.Acquire(ctx, m.key, "intruder", ttl); err != nil {
		t.Fatal(err)
	}
	if _, errs := m.migrating.ExtendMany(ctx, items[:1]); !errors.Is(errs[0], redlock.ErrNotHeld) {
		t.Errorf("ExtendMany with the old group lost: %v, want ErrNotHeld", errs[0])
	}
	if _, err := m.migrating.Extend(ctx, m.key, "v", ttl); !errors.Is(err, redlock.ErrNotHeld) {
		t.Errorf("Extend with the old group lost: %v, want ErrNotHeld", err)
	}
}

func TestWatchReleasesHearsBothGroupsOfAMovingKey(t *testing.T) {
	ctx := context.Background()
	m := newMigration(t)
	woken := make(chan struct{}, 16)
	cancel := m.migrating.WatchReleases(m.key, func() { woken <- struct{}{} })
	defer cancel()
	for _, g := range []*redlock.Locker{m.a, m.c} {
		if _, err := g.Acquire(ctx, m.key, "x", ttl); err != nil {
			t.Fatal(err)
		}
		_ = g.Release(ctx, m.key, "x")
		select {
		case <-woken:
		case <-time.After(time.Second):
			t.Fatalf("no wake-up for a release in group %s", g.Name())
		}
		for len(woken) > 0 {
			<-woken
		}
	}
}

func TestAGroupWithoutQuorumFailsOnlyItsKeys(t *testing.T) {
	ctx := context.Background()
	a, _ := memGroup(t, "a", time.Now())
	b, bNodes := memGroup(t, "b", time.Now())
	r := router(t, []*redlock.Locker{a, b}, nil)
	bNodes[0].SetDown(true)
	bNodes[1].SetDown(true)
	inA, inB := 0, 0
	for i := range 40 {
		key := fmt.Sprintf("sidelock:k%d", i)
		home, _ := r.GroupOf(key)
		_, err := r.Acquire(ctx, key, "v", ttl)
		switch {
		case home == "a" && err != nil:
			t.Errorf("key %s of the healthy group: %v", key, err)
		case home == "b" && !errors.Is(err, redlock.ErrNoQuorum):
			t.Errorf("key %s of the group without quorum: %v, want ErrNoQuorum", key, err)
		}
		if home == "a" {
			inA++
		} else {
			inB++
		}
	}
	if inA == 0 || inB == 0 {
		t.Fatalf("keys fell in one group only (a=%d b=%d)", inA, inB)
	}
}
