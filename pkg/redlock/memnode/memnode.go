// Package memnode implements an in-memory lock master with the same
// semantics as a Redis master running sidelock's scripts. It backs dev mode
// and fast tests, and it can simulate an unreachable (SetDown), slow
// (SetDelay) or restarted (Restart) master.
//
// The package deliberately does not import package redlock, so redlock's own
// internal tests can use it without an import cycle; memnode's own tests
// assert that *Node satisfies redlock.Node and run the conformance suite.
package memnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrDown is returned, wrapped with the node's name, by every call while the
// node is down.
var ErrDown = errors.New("node is down")

// ErrClosed is returned, wrapped with the node's name, by calls after Close.
var ErrClosed = errors.New("node is closed")

// minSweepInterval is the fewest writes between two sweeps of expired keys.
// A sweep also waits for as many writes as there were keys left after the
// previous one, so it costs amortised O(1) per write while the map never
// holds more than twice max(minSweepInterval, live keys) entries.
const minSweepInterval = 64

// Option configures a Node.
type Option func(*Node)

// WithClock replaces time.Now, so tests can expire keys without sleeping.
// The clock must be safe for concurrent use. SetDelay waits in real time
// regardless of the clock.
func WithClock(now func() time.Time) Option {
	return func(n *Node) { n.now = now }
}

// Node is an in-memory redlock.Node. It is safe for concurrent use.
type Node struct {
	name string
	now  func() time.Time

	mu               sync.Mutex
	entries          map[string]entry
	writesSinceSweep int
	keptByLastSweep  int
	down, closed     bool
	delay            time.Duration
	watchers         map[string]map[*watcher]struct{} // see WatchReleases
	server           server                           // see ServerInfo
}

// watcher is one WatchReleases (notify) or WatchMessages (message)
// registration; its address is its identity.
type watcher struct {
	notify  func()
	message func(payload string)
}

type entry struct {
	value     string
	expiresAt time.Time
	// data holds a holder record or waiter marks (tenure.go), whose value
	// is then a magic string no lock value is.
	data any
}

// New returns an empty node; name is what Addr reports.
func New(name string, opts ...Option) *Node {
	n := &Node{name: name, now: time.Now, entries: make(map[string]entry)}
	for _, opt := range opts {
		opt(n)
	}
	n.server = newServer(n.now())
	return n
}

// SetDown makes every call fail with ErrDown (true) or work again (false),
// simulating a master that is unreachable. Keys are kept, as a partitioned
// master keeps them.
func (n *Node) SetDown(down bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.down = down
}

// SetDelay makes every call wait d before doing its work, simulating a slow
// network or master. A call whose context ends first returns its error.
func (n *Node) SetDelay(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Addr returns the name given to New.
func (n *Node) Addr() string { return n.name }

// Acquire implements redlock.Node.
func (n *Node) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, time.Duration, error) {
	if err := n.enter(ctx, "acquire"); err != nil {
		return false, 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	if holderTTL, taken := n.take(key, value, ttl, now); !taken {
		return false, holderTTL, nil
	}
	return true, 0, nil
}

// take claims key for value with ttl, or refreshes it when value holds it
// already; when another value holds it, it reports that holder's remaining
// ttl and takes nothing. Every acquisition goes through it, as every Redis
// one goes through take_key.lua. The caller holds n.mu.
func (n *Node) take(key, value string, ttl time.Duration, now time.Time) (holderTTL time.Duration, taken bool) {
	if held, ok := n.lookup(key, now); ok && held.value != value {
		return held.expiresAt.Sub(now), false
	}
	n.store(key, value, ttl, now)
	return 0, true
}

// Extend outcomes, as redlock.ExtendOutcome numbers them (memnode does not
// import redlock).
const (
	ExtendHeldByOther int8 = 0
	ExtendRenewed     int8 = 1
	ExtendMissing     int8 = 2
)

// Extend implements redlock.Node.
func (n *Node) Extend(ctx context.Context, key, value string, ttl time.Duration) (int8, error) {
	if err := n.enter(ctx, "extend"); err != nil {
		return ExtendHeldByOther, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.extendLocked(key, value, ttl, n.now()), nil
}

// extendLocked renews key for value; an absent key is left absent. The
// caller holds n.mu.
func (n *Node) extendLocked(key, value string, ttl time.Duration, now time.Time) int8 {
	held, ok := n.lookup(key, now)
	switch {
	case !ok:
		return ExtendMissing
	case held.value != value:
		return ExtendHeldByOther
	}
	n.store(key, value, ttl, now)
	return ExtendRenewed
}

// Release implements redlock.Node.
func (n *Node) Release(ctx context.Context, key, value string) (bool, error) {
	return n.releaseThen(ctx, key, value, nil)
}

// releaseThen is Release that, when it deletes key, also runs also (if
// any) in the same atomic step.
func (n *Node) releaseThen(ctx context.Context, key, value string, also func(now time.Time)) (bool, error) {
	if err := n.enter(ctx, "release"); err != nil {
		return false, err
	}
	n.mu.Lock()
	released, notify := n.releaseLocked(key, value, n.now(), also)
	n.mu.Unlock()
	// Outside the lock, so notify may call cancel or use the node.
	for _, f := range notify {
		f()
	}
	return released, nil
}

// releaseLocked is releaseThen's step; it returns the announcements to
// make once n.mu is released. The caller holds n.mu.
func (n *Node) releaseLocked(key, value string, now time.Time, also func(now time.Time)) (bool, []func()) {
	held, ok := n.lookup(key, now)
	if !ok || held.value != value {
		return false, nil
	}
	delete(n.entries, key)
	if also != nil {
		also(now)
	}
	return true, n.publishLocked(key, "released")
}

// WatchReleases implements redlock.ReleaseWatcher. Like the Redis node it
// announces only a Release that deleted key, never an expiry; notify runs
// on the releasing goroutine before Release returns.
func (n *Node) WatchReleases(key string, notify func()) (cancel func()) {
	return n.watchChannel(key, &watcher{notify: notify})
}

// publishLocked returns the calls that deliver payload to the watchers of
// channel; the caller makes them once it has released n.mu, so a watcher
// may call cancel or use the node. The caller holds n.mu.
func (n *Node) publishLocked(channel, payload string) []func() {
	calls := make([]func(), 0, len(n.watchers[channel]))
	for w := range n.watchers[channel] {
		if w.message != nil {
			calls = append(calls, func() { w.message(payload) })
		} else {
			calls = append(calls, w.notify)
		}
	}
	return calls
}

// watchChannel registers w on the channel (a key's, for releases).
func (n *Node) watchChannel(key string, w *watcher) (cancel func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.watchers == nil {
		n.watchers = make(map[string]map[*watcher]struct{})
	}
	if n.watchers[key] == nil {
		n.watchers[key] = make(map[*watcher]struct{})
	}
	n.watchers[key][w] = struct{}{}

	var once sync.Once
	return func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			delete(n.watchers[key], w)
			if len(n.watchers[key]) == 0 {
				delete(n.watchers, key)
			}
		})
	}
}

// Get implements redlock.Node.
func (n *Node) Get(ctx context.Context, key string) (string, time.Duration, error) {
	if err := n.enter(ctx, "get"); err != nil {
		return "", 0, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	held, ok := n.lookup(key, now)
	if !ok {
		return "", 0, nil
	}
	return held.value, held.expiresAt.Sub(now), nil
}

// Ping implements redlock.Node.
func (n *Node) Ping(ctx context.Context) error {
	return n.enter(ctx, "ping")
}

// Close drops all keys; later calls fail with ErrClosed.
func (n *Node) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	clear(n.entries)
	return nil
}

// enter runs the checks every call makes before touching keys, in the order
// a real master would fail: the caller's context, the simulated network
// delay, then reachability.
func (n *Node) enter(ctx context.Context, op string) error {
	if err := ctx.Err(); err != nil {
		return n.wrap(op, err)
	}
	n.mu.Lock()
	delay := n.delay
	n.mu.Unlock()
	if err := sleep(ctx, delay); err != nil {
		return n.wrap(op, err)
	}

	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return n.wrap(op, ErrClosed)
	case n.down:
		return n.wrap(op, ErrDown)
	}
	return nil
}

func (n *Node) wrap(op string, err error) error {
	return fmt.Errorf("memnode %s: %s: %w", n.name, op, err)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lookup returns key's live entry, deleting it if it has expired, as Redis
// does lazily on access. The caller holds n.mu.
func (n *Node) lookup(key string, now time.Time) (entry, bool) {
	e, ok := n.entries[key]
	if !ok {
		return entry{}, false
	}
	if !now.Before(e.expiresAt) {
		delete(n.entries, key)
		return entry{}, false
	}
	return e, true
}

// store sets key to value for ttl, rounded up to whole milliseconds like the
// Redis node so both behave the same in tests. The caller holds n.mu.
func (n *Node) store(key, value string, ttl time.Duration, now time.Time) {
	n.storeData(key, value, nil, ttl, now)
}

// storeData is store with structured data beside the value.
func (n *Node) storeData(key, value string, data any, ttl time.Duration, now time.Time) {
	ms := max((ttl+time.Millisecond-1)/time.Millisecond, 1)
	n.entries[key] = entry{value: value, expiresAt: now.Add(ms * time.Millisecond), data: data}
	n.writesSinceSweep++
	n.maybeSweep(now)
}

// maybeSweep deletes expired keys that nobody accessed again, so memory
// stays proportional to the live keys. The caller holds n.mu.
func (n *Node) maybeSweep(now time.Time) {
	if n.writesSinceSweep < max(minSweepInterval, n.keptByLastSweep) {
		return
	}
	for key, e := range n.entries {
		if !now.Before(e.expiresAt) {
			delete(n.entries, key)
		}
	}
	n.writesSinceSweep = 0
	n.keptByLastSweep = len(n.entries)
}
