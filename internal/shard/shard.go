// Package shard spreads lock names over K independent quorum groups, so
// that lock throughput grows with the number of groups: every Redlock
// operation touches every master of one quorum, so more masters in one
// quorum add safety, not capacity.
//
// Each key always maps to the same group: the group whose name scores
// highest for the key (rendezvous hashing, see Pick). Adding a group to K
// moves about 1/(K+1) of the keys, all of them to the new group; removing
// one moves only that group's keys. The scores depend only on group names
// and keys, so every sidecar with the same group list agrees without
// talking to the others.
//
// # Changing the group list (the migration rule)
//
// Two sidecars that map a name to different groups would lock it in
// different places, and both would win. A change of the list therefore
// goes through a migration phase in which sidecars know both lists: a
// Router built with a previous list treats a key whose group differs
// between the lists as moving, and holds it in BOTH groups:
//
//  1. acquire in the previous group (so no sidecar on the old list holds
//     it, nor can take it while this grant lasts);
//  2. acquire in the new group, with a fence above the one just granted;
//  3. raise the previous group's fence counter to the new fence, so later
//     grants in either group get larger fences.
//
// Extends and releases go to both groups; a grant is valid until the
// earlier of the two validities. Sidecars on the old list (previous group
// only), in the migration phase (both) and on the new list alone (new group
// only) are then safe in pairs that share a group: old with migrating, and
// migrating with new. Old with new is NOT safe. So:
//
//   - Roll out the new list together with the old one as the previous
//     list (SIDELOCK_REDIS_GROUPS_PREVIOUS) to every sidecar.
//   - Only when no sidecar runs the old list any more, and one key ttl has
//     passed since the last one stopped (its keys have lapsed and its
//     callers' validity has run out), roll out the new list alone.
//
// # What is not guaranteed
//
// The Router cannot tell which lists other sidecars run: skipping the
// migration phase, or ending it while a sidecar still runs the old list,
// lets two holders of one name coexist. Everything package redlock does not
// promise holds here too, per group.
package shard

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// A group is one independent quorum of masters: a *redlock.Locker, named
// by redlock.Config.Name. The name, not the masters' addresses, decides
// which keys the group serves, so a group keeps its keys when one of its
// masters is replaced.

// Router implements lease.Locker over several groups. It is safe for
// concurrent use.
type Router struct {
	current  []*redlock.Locker
	previous []*redlock.Locker // nil outside a migration
	// The groups' names, for Pick.
	currentNames, previousNames []string
}

// New returns a Router over current, migrating from previous when previous
// is not empty. A group in both lists must be the same Locker.
func New(current, previous []*redlock.Locker) (*Router, error) {
	if len(current) == 0 {
		return nil, errors.New("shard: at least one group is required")
	}
	if err := checkGroups(current); err != nil {
		return nil, err
	}
	if err := checkGroups(previous); err != nil {
		return nil, fmt.Errorf("previous groups: %w", err)
	}
	for _, p := range previous {
		for _, c := range current {
			if p.Name() == c.Name() && p != c {
				return nil, fmt.Errorf("shard: group %q is defined differently in the two lists", p.Name())
			}
		}
	}
	if len(previous) == 0 {
		previous = nil
	}
	return &Router{current: current, previous: previous, currentNames: names(current), previousNames: names(previous)}, nil
}

func checkGroups(groups []*redlock.Locker) error {
	seen := map[string]bool{}
	for _, g := range groups {
		switch {
		case g == nil:
			return errors.New("shard: a group has no locker")
		case g.Name() == "":
			return errors.New("shard: a group has no name")
		case seen[g.Name()]:
			return fmt.Errorf("shard: two groups are named %q", g.Name())
		}
		seen[g.Name()] = true
	}
	return nil
}

func names(groups []*redlock.Locker) []string {
	out := make([]string, len(groups))
	for i, g := range groups {
		out[i] = g.Name()
	}
	return out
}

// Drift is the largest clock-drift allowance of any group for ttl.
func (r *Router) Drift(ttl time.Duration) time.Duration {
	var d time.Duration
	for _, g := range slices.Concat(r.current, r.previous) {
		d = max(d, g.Drift(ttl))
	}
	return d
}

// Pick returns the index of the group, of those named names, that serves
// key: the one whose name scores highest for it. The hash is part of
// sidelock's protocol: changing it moves keys between groups, which needs
// a migration.
func Pick(names []string, key string) int {
	best, bestScore := 0, uint64(0)
	for i, name := range names {
		if s := score(name, key); i == 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// routingKey is the part of key that picks its group: up to its first
// '#'. Lock names and key prefixes cannot contain '#', so a lock routes by
// its whole key, and the keys derived from one name (a semaphore's slots,
// a read/write lock's writer, reader and intent keys) all route with it:
// a read/write lock's keys must share their masters.
func routingKey(key string) string {
	if i := strings.IndexByte(key, '#'); i >= 0 {
		return key[:i]
	}
	return key
}

// score is 64-bit FNV-1a over name, a zero byte and key, with a final mix
// so that close inputs spread over the whole range. (Written out rather
// than with hash/fnv so that routing a key allocates nothing.)
func score(name, key string) uint64 { return mix(fnv1a(name, key)) }

func fnv1a(name, key string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * fnvPrime
	}
	h *= fnvPrime // the zero byte between them
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * fnvPrime
	}
	return h
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// mix is the splitmix64 finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// GroupOf names the group that serves key, and during a migration the
// group it is moving from ("" when it is not moving).
func (r *Router) GroupOf(key string) (home, from string) {
	h, p := r.route(key)
	if p != nil {
		from = p.Name()
	}
	return h.Name(), from
}

// route returns key's group and, when key is moving, its previous group
// (nil otherwise).
func (r *Router) route(key string) (home, prev *redlock.Locker) {
	if len(r.current) == 1 && r.previous == nil {
		return r.current[0], nil
	}
	key = routingKey(key)
	home = r.current[Pick(r.currentNames, key)]
	if r.previous == nil {
		return home, nil
	}
	p := r.previous[Pick(r.previousNames, key)]
	if p.Name() == home.Name() {
		return home, nil
	}
	return home, p
}

// Acquire takes key in its group; a moving key is taken in its previous
// group first, then in its new one (see the package doc).
func (r *Router) Acquire(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error) {
	return r.acquireIn(ctx, key, value, func(g *redlock.Locker, floor int64) (redlock.Grant, error) {
		return g.AcquireAbove(ctx, key, value, ttl, floor)
	})
}

// acquireIn takes key in its group with acquire (floor 0). A moving key is
// taken in its previous group first, then in its new one with a fence
// above the first grant's, which is then raised in the previous group; it
// is valid until the earlier of the two grants ends.
func (r *Router) acquireIn(ctx context.Context, key, value string, acquire func(g *redlock.Locker, floor int64) (redlock.Grant, error)) (redlock.Grant, error) {
	home, prev := r.route(key)
	if prev == nil {
		return acquire(home, 0)
	}
	old, err := acquire(prev, 0)
	if err != nil {
		return redlock.Grant{}, err
	}
	grant, err := acquire(home, old.Fence)
	if err != nil {
		_ = prev.Release(ctx, key, value)
		return redlock.Grant{}, err
	}
	if grant.Fence != 0 {
		if err := prev.RaiseFence(ctx, key, value, grant.Fence); err != nil {
			_ = r.releaseBoth(ctx, home, prev, key, value)
			return redlock.Grant{}, err
		}
	}
	grant.ValidUntil = earlier(old.ValidUntil, grant.ValidUntil)
	return grant, nil
}

// Extend extends key in its group, or in both groups while it moves.
func (r *Router) Extend(ctx context.Context, key, value string, ttl time.Duration) (redlock.Grant, error) {
	home, prev := r.route(key)
	if prev == nil {
		return home.Extend(ctx, key, value, ttl)
	}
	var g [2]redlock.Grant
	var errs [2]error
	both(func() { g[0], errs[0] = prev.Extend(ctx, key, value, ttl) },
		func() { g[1], errs[1] = home.Extend(ctx, key, value, ttl) })
	return combine(g[0], errs[0], g[1], errs[1])
}

// Release releases key in its group, or in both groups while it moves.
func (r *Router) Release(ctx context.Context, key, value string) error {
	home, prev := r.route(key)
	if prev == nil {
		return home.Release(ctx, key, value)
	}
	return r.releaseBoth(ctx, home, prev, key, value)
}

func (r *Router) releaseBoth(ctx context.Context, home, prev *redlock.Locker, key, value string) error {
	var errs [2]error
	both(func() { errs[0] = prev.Release(ctx, key, value) },
		func() { errs[1] = home.Release(ctx, key, value) })
	return errors.Join(errs[0], errs[1])
}

// Inspect reads key's holder; for a moving key, a holder in the previous
// group (a sidecar still on the old list) wins.
func (r *Router) Inspect(ctx context.Context, key string) (redlock.Holder, error) {
	home, prev := r.route(key)
	if prev == nil {
		return home.Inspect(ctx, key)
	}
	var h [2]redlock.Holder
	var errs [2]error
	both(func() { h[0], errs[0] = prev.Inspect(ctx, key) },
		func() { h[1], errs[1] = home.Inspect(ctx, key) })
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return redlock.Holder{}, err
	}
	old, cur := h[0], h[1]
	switch {
	case old.Held && cur.Held && old.Value == cur.Value:
		cur.ValidUntil = earlier(old.ValidUntil, cur.ValidUntil)
		cur.Fence = max(old.Fence, cur.Fence)
		return cur, nil
	case old.Held:
		return old, nil
	default:
		return cur, nil
	}
}

// WatchReleases watches key in its group, or in both groups while it moves.
func (r *Router) WatchReleases(key string, notify func()) (cancel func()) {
	home, prev := r.route(key)
	stopHome := home.WatchReleases(key, notify)
	if prev == nil {
		return stopHome
	}
	stopPrev := prev.WatchReleases(key, notify)
	return func() { stopHome(); stopPrev() }
}

// ExtendMany extends every item in its group (both groups for moving keys),
// with one ExtendMany per group, the groups in parallel.
func (r *Router) ExtendMany(ctx context.Context, items []redlock.ExtendItem) ([]redlock.Grant, []error) {
	if len(r.current) == 1 && r.previous == nil {
		return r.current[0].ExtendMany(ctx, items)
	}
	batches := r.batchByGroup(items)
	var wg sync.WaitGroup
	for _, b := range batches {
		wg.Go(func() { b.grants, b.errs = b.locker.ExtendMany(ctx, b.items) })
	}
	wg.Wait()
	return mergeBatches(len(items), batches)
}

// groupBatch is the share of an ExtendMany that goes to one group.
type groupBatch struct {
	locker *redlock.Locker
	items  []redlock.ExtendItem
	index  []int // item i of the batch is item index[i] of the call
	grants []redlock.Grant
	errs   []error
}

func (r *Router) batchByGroup(items []redlock.ExtendItem) []*groupBatch {
	byLocker := map[*redlock.Locker]*groupBatch{}
	var order []*groupBatch
	add := func(l *redlock.Locker, i int) {
		b := byLocker[l]
		if b == nil {
			b = &groupBatch{locker: l}
			byLocker[l] = b
			order = append(order, b)
		}
		b.items = append(b.items, items[i])
		b.index = append(b.index, i)
	}
	for i, it := range items {
		home, prev := r.route(it.Key)
		add(home, i)
		if prev != nil {
			add(prev, i)
		}
	}
	return order
}

// mergeBatches puts the groups' answers back in item order; an item
// extended in two groups gets the combined verdict.
func mergeBatches(n int, batches []*groupBatch) ([]redlock.Grant, []error) {
	grants := make([]redlock.Grant, n)
	errs := make([]error, n)
	seen := make([]bool, n)
	for _, b := range batches {
		for j, i := range b.index {
			if !seen[i] {
				grants[i], errs[i], seen[i] = b.grants[j], b.errs[j], true
				continue
			}
			grants[i], errs[i] = combine(grants[i], errs[i], b.grants[j], b.errs[j])
		}
	}
	return grants, errs
}

// combine is the verdict on a key held in two groups: not held if either
// says so, else failed if either failed, else valid until the earlier end.
func combine(g1 redlock.Grant, err1 error, g2 redlock.Grant, err2 error) (redlock.Grant, error) {
	switch {
	case errors.Is(err1, redlock.ErrNotHeld):
		return redlock.Grant{}, err1
	case errors.Is(err2, redlock.ErrNotHeld):
		return redlock.Grant{}, err2
	case err1 != nil:
		return redlock.Grant{}, err1
	case err2 != nil:
		return redlock.Grant{}, err2
	}
	return redlock.Grant{ValidUntil: earlier(g1.ValidUntil, g2.ValidUntil), Fence: max(g1.Fence, g2.Fence)}, nil
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// both runs f and g concurrently and waits for them.
func both(f, g func()) {
	var wg sync.WaitGroup
	wg.Go(f)
	g()
	wg.Wait()
}
