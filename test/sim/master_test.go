package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// A simulated master is a memnode.Node (whose storage semantics the
// conformance suite already pins down) on a clock of its own, plus the
// process around it: it can be paused (SIGSTOP: commands queue and run,
// stale, when it resumes), killed (commands fail, connections break) and
// restarted, empty when it has no persistence (memnode.Restart) or with
// its keys when it is durable (a new run id either way). Each sidecar
// reaches it through its own link (below), which adds the network.

// Errors a link returns; they wrap like the real node's do.
var (
	errRefused    = errors.New("connection refused")
	errReset      = errors.New("connection reset by peer")
	errLinkClosed = errors.New("client closed")
	errPaused     = errors.New("master paused")
)

type masterState int

const (
	masterUp masterState = iota
	masterPaused
	masterKilled
)

func (s masterState) String() string {
	return [...]string{"up", "paused", "killed"}[s]
}

// driftClock is a master's clock: virtual time plus an offset that wanders
// (a sine, as NTP keeps pulling a drifting oscillator back) so that the
// clock's rate stays within 1±rate of real time and its offset bounded;
// lin adds a constant rate error (scenarios use it to make keys expire a
// little early, as a fast clock does).
type driftClock struct {
	t0     time.Time
	amp    float64 // seconds
	period float64 // seconds
	phase  float64
	lin    float64
}

func (c *driftClock) now() time.Time {
	t := time.Now()
	if c == nil {
		return t
	}
	s := t.Sub(c.t0).Seconds()
	off := c.lin * s
	if c.period > 0 {
		off += c.amp * (math.Sin(2*math.Pi*s/c.period+c.phase) - math.Sin(c.phase))
	}
	return t.Add(time.Duration(off * float64(time.Second)))
}

type master struct {
	w       *world
	idx     int
	name    string
	mem     *memnode.Node
	clock   *driftClock
	durable bool

	// applyMu serialises effects on the master with each other and with
	// state changes, so the recorder sees each key change exactly.
	applyMu sync.Mutex
	mu      sync.Mutex
	state   masterState
	epoch   uint64        // bumped by a kill: commands of an older epoch are lost
	resume  chan struct{} // closed when a pause ends
	slow    bool
	links   []*link

	idMu      sync.Mutex // the master's identity (see newMaster)
	runID     string
	startedAt time.Time
	restarts  int
}

func newMaster(w *world, idx int, clock *driftClock, durable bool) *master {
	m := &master{w: w, idx: idx, name: fmt.Sprintf("m%d", idx+1), clock: clock, durable: durable}
	m.mem = memnode.New(m.name, memnode.WithClock(clock.now))
	// The master's identity is kept here rather than in memnode, so that
	// it has been up for a day when the run starts (as masters are when
	// sidecars come and go) and so a durable master keeps its keys across
	// a restart while its run id changes.
	m.runID, m.startedAt = m.newRunID(), clock.now().Add(-24*time.Hour)
	m.mem.SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		m.idMu.Lock()
		defer m.idMu.Unlock()
		i.RunID, i.Uptime = m.runID, m.clock.now().Sub(m.startedAt)
		if m.durable {
			// appendonly yes, appendfsync always: restarts keep every
			// key, so the guards give it no probation.
			i.PersistenceKnown, i.AppendOnly, i.AppendFsync = true, true, "always"
		}
		return i
	})
	return m
}

func (m *master) newRunID() string {
	// 40 hex digits like a Redis run_id, random from the first digit.
	id := fmt.Sprintf("%016x%016x%016x", m.w.rnd(0x5e, uint64(m.idx), uint64(m.restarts), 1),
		m.w.rnd(0x5e, uint64(m.idx), uint64(m.restarts), 2), m.w.rnd(0x5e, uint64(m.idx), uint64(m.restarts), 3))
	return id[:40]
}

// pause stops the process: commands wait and run when it resumes.
func (m *master) pause() {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == masterUp {
		m.state, m.resume = masterPaused, make(chan struct{})
	}
}

func (m *master) unpause() {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == masterPaused {
		m.state = masterUp
		close(m.resume)
	}
}

// kill stops the process: queued commands are lost, every connection breaks.
func (m *master) kill() {
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == masterPaused {
		close(m.resume)
	}
	m.state = masterKilled
	m.epoch++
	for _, l := range m.links {
		l.breakConn()
	}
}

// restart starts the process again (killing it first if it runs): empty
// unless the master is durable, with a new run id either way.
func (m *master) restart() {
	if m.status() != masterKilled {
		m.kill()
	}
	m.applyMu.Lock()
	defer m.applyMu.Unlock()
	m.idMu.Lock()
	m.restarts++
	m.runID, m.startedAt = m.newRunID(), m.clock.now()
	m.idMu.Unlock()
	if !m.durable {
		m.mem.Restart()
	}
	m.mu.Lock()
	m.state = masterUp
	m.mu.Unlock()
}

func (m *master) setSlow(slow bool) {
	m.mu.Lock()
	m.slow = slow
	m.mu.Unlock()
}

func (m *master) status() masterState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

func (m *master) snapshot() (masterState, uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state, m.epoch, m.slow
}

// apply runs fn, the effect of a command that reached the master, once
// the master runs it: at once when up, when it resumes if paused (or
// errPaused at once unless wait), never if it was killed since the
// command was sent. It records every change of the lock keys fn touches.
func (m *master) apply(l *link, epoch uint64, op string, keys []string, send time.Time, fn func() error, wait bool) error {
	for {
		m.applyMu.Lock()
		m.mu.Lock()
		if m.epoch != epoch || m.state == masterKilled {
			m.mu.Unlock()
			m.applyMu.Unlock()
			return errReset
		}
		if m.state == masterPaused {
			ch := m.resume
			m.mu.Unlock()
			m.applyMu.Unlock()
			if !wait {
				return errPaused
			}
			<-ch
			continue
		}
		m.mu.Unlock()
		break
	}
	defer m.applyMu.Unlock()
	before := m.peek(keys)
	err := fn()
	after := m.peek(keys)
	now := time.Now()
	for i, k := range keys {
		if before[i] == after[i] {
			continue
		}
		m.w.rec.keyChange(keyEvent{
			master: m.idx, key: k, prev: before[i], value: after[i], op: op,
			sidecar: l.sidecar, send: send, at: now, masterClock: m.clock.now(),
		})
	}
	return err
}

func (m *master) peek(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i], _, _ = m.mem.Get(context.Background(), k)
	}
	return out
}

// A link is one sidecar's connection to one master: it implements
// redlock.Node and every optional interface the real node implements, and
// adds the network: a latency each way (drawn per call from the seed, or
// fixed by a scenario), partitions (calls hang until the caller's deadline
// and their answers are lost), refused connections to a killed master, and
// answers that arrive after the caller gave up (the command still runs on
// the master). It counts the connections it opens, as redisnode does: a
// kill, a restart, a partition or a timed-out call breaks the connection,
// and the next call that reaches the master opens a new one.
type link struct {
	w       *world
	m       *master
	sidecar string // "s1g2": slot 1, generation 2
	slot    int
	id      uint64
	cutoff  *atomic.Bool // the pod is partitioned from every master
	cut     *atomic.Bool // the pod is partitioned from this master

	opened atomic.Uint64

	mu        sync.Mutex
	connected bool
	closed    bool
	latency   func(op string) (d1, d2 time.Duration, ok bool)
	notify    func() // see NotifyConnections
	dupAt     time.Time
	dup       map[string]int
}

func (l *link) breakConn() {
	l.mu.Lock()
	l.connected = false
	l.mu.Unlock()
}

// setLatency fixes the latency of calls (scenarios); f returns ok=false
// to fall back on the drawn latency, a negative d1 to drop the call. nil
// removes the override.
func (l *link) setLatency(f func(op string) (d1, d2 time.Duration, ok bool)) {
	l.mu.Lock()
	l.latency = f
	l.mu.Unlock()
}

func (l *link) unreachable() bool { return l.cut.Load() || l.cutoff.Load() }

// delays draws the latency of one call each way. Draws are a hash of the
// seed, the link and the call (op, keys, virtual time, and how many equal
// calls came before at that instant), so they do not depend on which of
// two simultaneous goroutines runs first.
func (l *link) delays(op string, keys []string, now time.Time, slow bool) (time.Duration, time.Duration) {
	l.mu.Lock()
	fixed := l.latency
	if !l.dupAt.Equal(now) {
		l.dupAt, l.dup = now, map[string]int{}
	}
	sig := op + "\x00" + strings.Join(keys, "\x00")
	n := l.dup[sig]
	l.dup[sig] = n + 1
	l.mu.Unlock()
	if fixed != nil {
		if d1, d2, ok := fixed(op); ok {
			return d1, d2
		}
	}
	h := l.w.rnd(l.id, hashString(sig), uint64(now.UnixNano()), uint64(n))
	return l.w.latency(h, slow)
}

// do sends one command: fn is its effect on the master.
//
// Time. synctest advances the virtual clock only while every goroutine of
// the bubble is durably blocked, and a goroutine waiting for a sync.Mutex
// is not. sidelock holds a lease's mutex across the lease's heartbeat and
// release rounds, and a lease's end waits (under that mutex) for a batch
// renewal in flight: if a call on one of those paths waited virtual time
// while another goroutine (a lapse or max_hold timer, a lost renewal, a
// SIGTERM) queued on the mutex, the bubble's clock would stop for good.
// So only the calls made with no such lock held wait their latency in
// virtual time (world.virtualOps: the acquire round's AcquireFenced,
// AcquireReader, AcquireWriter and CommitFence, and the health checker's
// Ping and ServerInfo, whose round mutex only its one Run goroutine
// takes). Every other call (Extend,
// ExtendMany, Release, the repair's Acquire, Get) is answered at once in
// virtual time: when its drawn latency fits the caller's deadline it
// applies then and there; when it would not (a slow or paused master, a
// latency spike) or cannot get through (a partition), the caller gets its
// deadline error at once, as it would have at its deadline, and the
// command, if it got on the wire, still lands d1 later (when a paused
// master resumes), answering nobody.
func (l *link) do(ctx context.Context, op string, keys []string, fn func() error) error {
	l.w.progress.Add(1)
	send := time.Now()
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return l.wrap(op, errLinkClosed)
	}
	if err := ctx.Err(); err != nil {
		return l.wrap(op, err)
	}
	virtual := l.w.virtualOps[op]
	if l.unreachable() {
		// The packets are dropped: the call hangs until its deadline.
		l.breakConn()
		if !virtual {
			return l.wrap(op, context.DeadlineExceeded)
		}
		<-ctx.Done()
		return l.wrap(op, ctx.Err())
	}
	state, epoch, slow := l.m.snapshot()
	if state == masterKilled {
		l.breakConn()
		return l.wrap(op, errRefused)
	}
	l.mu.Lock()
	var notify func()
	if !l.connected {
		l.connected = true
		l.opened.Add(1)
		notify = l.notify
	}
	l.mu.Unlock()
	if notify != nil {
		notify()
	}
	d1, d2 := l.delays(op, keys, send, slow)
	if d1 < 0 {
		// A scenario drops this call on the way: it hangs until its
		// deadline and never reaches the master.
		l.breakConn()
		if !virtual {
			return l.wrap(op, context.DeadlineExceeded)
		}
		<-ctx.Done()
		return l.wrap(op, ctx.Err())
	}
	late := func() {
		time.Sleep(d1)
		if !l.unreachable() {
			_ = l.m.apply(l, epoch, op, keys, send, fn, true)
		}
	}
	if !virtual {
		if deadline, ok := ctx.Deadline(); ok && d1+d2 >= time.Until(deadline) || state == masterPaused {
			l.w.inflight.Go(late)
			l.breakConn() // go-redis drops a connection whose call timed out
			return l.wrap(op, context.DeadlineExceeded)
		}
		if err := l.m.apply(l, epoch, op, keys, send, fn, false); err != nil {
			if errors.Is(err, errPaused) {
				l.w.inflight.Go(late)
				err = context.DeadlineExceeded
			}
			l.breakConn()
			return l.wrap(op, err)
		}
		return nil
	}
	done := make(chan error, 1)
	l.w.inflight.Go(func() {
		time.Sleep(d1)
		if l.unreachable() {
			return // lost on the way: the caller times out
		}
		err := l.m.apply(l, epoch, op, keys, send, fn, true)
		time.Sleep(d2)
		if l.unreachable() {
			return // the answer is lost
		}
		done <- err
	})
	select {
	case err := <-done:
		if err != nil {
			l.breakConn()
			return l.wrap(op, err)
		}
		return nil
	case <-ctx.Done():
		// go-redis drops a connection whose call timed out.
		l.breakConn()
		return l.wrap(op, ctx.Err())
	}
}

func (l *link) wrap(op string, err error) error {
	return fmt.Errorf("sim %s (from %s): %s: %w", l.m.name, l.sidecar, op, err)
}

var bg = context.Background()

func (l *link) Addr() string { return l.m.name }

// The methods below read a call's results only when do returned nil:
// after a timeout the command may still land (and write them) later.

func (l *link) Acquire(ctx context.Context, key, value string, ttl time.Duration) (bool, time.Duration, error) {
	var ok bool
	var holderTTL time.Duration
	if err := l.do(ctx, "acquire-plain", []string{key}, func() (e error) {
		ok, holderTTL, e = l.m.mem.Acquire(bg, key, value, ttl)
		return e
	}); err != nil {
		return false, 0, err
	}
	return ok, holderTTL, nil
}

// PutBack implements redlock.GuardedRepairer: a renewal's repair of a
// read/write lock's key, as Acquire is the repair of any other.
func (l *link) PutBack(ctx context.Context, key, value string, ttl time.Duration, excluders []string) (bool, error) {
	var ok bool
	excluders = slices.Clone(excluders)
	if err := l.do(ctx, "acquire-plain", []string{key}, func() (e error) {
		ok, e = l.m.mem.PutBack(bg, key, value, ttl, excluders)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) Extend(ctx context.Context, key, value string, ttl time.Duration) (redlock.ExtendOutcome, error) {
	var out redlock.ExtendOutcome
	if err := l.do(ctx, "extend", []string{key}, func() (e error) {
		out, e = l.m.mem.Extend(bg, key, value, ttl)
		return e
	}); err != nil {
		return redlock.ExtendHeldByOther, err
	}
	return out, nil
}

func (l *link) Release(ctx context.Context, key, value string) (bool, error) {
	var ok bool
	if err := l.do(ctx, "release", []string{key}, func() (e error) {
		ok, e = l.m.mem.Release(bg, key, value)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) Get(ctx context.Context, key string) (string, time.Duration, error) {
	var value string
	var ttl time.Duration
	if err := l.do(ctx, "get", nil, func() (e error) {
		value, ttl, e = l.m.mem.Get(bg, key)
		return e
	}); err != nil {
		return "", 0, err
	}
	return value, ttl, nil
}

func (l *link) Ping(ctx context.Context) error {
	return l.do(ctx, "ping", nil, func() error { return nil })
}

func (l *link) Close() error {
	l.mu.Lock()
	l.closed, l.connected = true, false
	l.mu.Unlock()
	return nil
}

func (l *link) AcquireFenced(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (bool, time.Duration, int64, error) {
	var ok bool
	var holderTTL time.Duration
	var floor int64
	if err := l.do(ctx, "acquire", []string{key}, func() (e error) {
		ok, holderTTL, floor, e = l.m.mem.AcquireFenced(bg, key, fenceKey, value, ttl)
		return e
	}); err != nil {
		return false, 0, 0, err
	}
	return ok, holderTTL, floor, nil
}

func (l *link) AcquireCommitted(ctx context.Context, key, fenceKey, value string, ttl time.Duration, above int64, retention time.Duration) (bool, time.Duration, int64, error) {
	var ok bool
	var holderTTL time.Duration
	var fence int64
	if err := l.do(ctx, "acquire", []string{key}, func() (e error) {
		ok, holderTTL, fence, e = l.m.mem.AcquireCommitted(bg, key, fenceKey, value, ttl, above, retention)
		return e
	}); err != nil {
		return false, 0, 0, err
	}
	return ok, holderTTL, fence, nil
}

func (l *link) AcquireProposed(ctx context.Context, key, fenceKey, value string, ttl time.Duration, proposal int64, retention time.Duration) (redlock.Proposal, error) {
	var p redlock.Proposal
	if err := l.do(ctx, "acquire", []string{key}, func() (e error) {
		p, e = l.m.mem.AcquireProposed(bg, key, fenceKey, value, ttl, proposal, retention)
		return e
	}); err != nil {
		return redlock.Proposal{}, err
	}
	return p, nil
}

func (l *link) WithdrawProposal(ctx context.Context, key, fenceKey, value string, proposal, prev int64, retention time.Duration) (bool, error) {
	var ok bool
	if err := l.do(ctx, "release", []string{key}, func() (e error) {
		ok, e = l.m.mem.WithdrawProposal(bg, key, fenceKey, value, proposal, prev, retention)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) CommitFence(ctx context.Context, key, fenceKey, value string, fence int64, retention time.Duration) (bool, error) {
	var ok bool
	if err := l.do(ctx, "commit", []string{key}, func() (e error) {
		ok, e = l.m.mem.CommitFence(bg, key, fenceKey, value, fence, retention)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) GetFenced(ctx context.Context, key, fenceKey string) (string, time.Duration, int64, error) {
	var value string
	var ttl time.Duration
	var fence int64
	if err := l.do(ctx, "get", nil, func() (e error) {
		value, ttl, fence, e = l.m.mem.GetFenced(bg, key, fenceKey)
		return e
	}); err != nil {
		return "", 0, 0, err
	}
	return value, ttl, fence, nil
}

func (l *link) ExtendMany(ctx context.Context, items []redlock.ExtendItem) ([]redlock.ExtendOutcome, error) {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.Key
	}
	l.w.fireSendHooks(l.slot, keys)
	items = slices.Clone(items)
	var out []redlock.ExtendOutcome
	if err := l.do(ctx, "extend-many", keys, func() (e error) {
		out, e = l.m.mem.ExtendMany(bg, items)
		return e
	}); err != nil {
		return nil, err
	}
	return out, nil
}

func (l *link) ServerInfo(ctx context.Context) (redlock.ServerInfo, error) {
	var info redlock.ServerInfo
	if err := l.do(ctx, "info", nil, func() error {
		i, e := l.m.mem.ServerInfo(bg)
		info = redlock.ServerInfo(i)
		return e
	}); err != nil {
		return redlock.ServerInfo{}, err
	}
	return info, nil
}

func (l *link) ConnectionsOpened() uint64 { return l.opened.Load() }

// WatchReleases delivers the master's release announcements after a
// network delay, and loses those made while the link is cut, the master
// is down or the link is closed (Pub/Sub is best-effort).
func (l *link) WatchReleases(key string, notify func()) (cancel func()) {
	return l.m.mem.WatchReleases(key, func() {
		l.mu.Lock()
		lost := l.closed
		l.mu.Unlock()
		if lost || l.unreachable() || l.m.status() == masterKilled {
			return
		}
		now := time.Now()
		d, _ := l.delays("notify", []string{key}, now, false)
		l.w.inflight.Go(func() {
			time.Sleep(d)
			notify()
		})
	})
}

// AcquireReader implements redlock.RWNode. Like AcquireFenced it is a
// call of the acquire round, made with no lease's mutex held.
func (l *link) AcquireReader(ctx context.Context, key, value string, ttl time.Duration, writerKey, intentKey string) (bool, time.Duration, bool, error) {
	var ok, taken bool
	var holderTTL time.Duration
	if err := l.do(ctx, "acquire-reader", []string{key}, func() (e error) {
		ok, holderTTL, taken, e = l.m.mem.AcquireReader(bg, key, value, ttl, writerKey, intentKey)
		return e
	}); err != nil {
		return false, 0, false, err
	}
	return ok, holderTTL, taken, nil
}

// AcquireWriter implements redlock.RWNode; the history records the
// writer's key and its intent.
func (l *link) AcquireWriter(ctx context.Context, writerKey, fenceKey, value string, ttl time.Duration, intentKey string, readerKeys []string) (bool, time.Duration, int64, error) {
	var ok bool
	var holderTTL time.Duration
	var floor int64
	readerKeys = slices.Clone(readerKeys)
	if err := l.do(ctx, "acquire-writer", []string{writerKey, intentKey}, func() (e error) {
		ok, holderTTL, floor, e = l.m.mem.AcquireWriter(bg, writerKey, fenceKey, value, ttl, intentKey, readerKeys)
		return e
	}); err != nil {
		return false, 0, 0, err
	}
	return ok, holderTTL, floor, nil
}

// RecordMembers implements redlock.MemberRecorder.
func (l *link) RecordMembers(ctx context.Context, key, members string, ttl time.Duration) ([]string, error) {
	var live []string
	if err := l.do(ctx, "members", nil, func() (e error) {
		live, e = l.m.mem.RecordMembers(bg, key, members, ttl)
		return e
	}); err != nil {
		return nil, err
	}
	return live, nil
}

// The tenure calls (redlock.TenureNode). A take is a call of the acquire
// round (no lease's mutex held, like AcquireFenced), and so are a
// commit and a holder note (written in the background); a tenure's
// release, like every release, is answered at once (see do).

func (l *link) TakeTenure(ctx context.Context, keys redlock.TenureKeys, a redlock.TakeArgs) (redlock.TakeAnswer, error) {
	var ans redlock.TakeAnswer
	if err := l.do(ctx, "acquire", []string{keys.Key}, func() (e error) {
		ans, e = l.m.mem.TakeTenure(bg, keys, a)
		switch {
		case ans.Acquired && a.From != "":
			l.w.rec.count("master: a hand-over in a round with a new block")
		case ans.ByMark:
			l.w.rec.count("master: a take refused by an older waiter's mark")
		case ans.Idle:
			l.w.rec.count("master: a take refused by a linger, asked to let go")
		case !ans.Acquired && a.Mark.TTL > 0:
			l.w.rec.count("master: a refused take left a mark")
		}
		return e
	}); err != nil {
		return redlock.TakeAnswer{}, err
	}
	return ans, nil
}

func (l *link) CommitTenure(ctx context.Context, keys redlock.TenureKeys, value string, top int64, rec redlock.HolderRecord, retention time.Duration) (bool, error) {
	var ok bool
	if err := l.do(ctx, "commit", []string{keys.Key}, func() (e error) {
		ok, e = l.m.mem.CommitTenure(bg, keys, value, top, rec, retention)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) NoteHolder(ctx context.Context, keys redlock.TenureKeys, rec redlock.HolderRecord, self string, retention time.Duration) (redlock.NoteAnswer, error) {
	var ans redlock.NoteAnswer
	if err := l.do(ctx, "note", nil, func() (e error) {
		ans, e = l.m.mem.NoteHolder(bg, keys, rec, self, retention)
		if ans.Written && rec.Idle {
			l.w.rec.count("master: an idle note (a linger)")
		}
		return e
	}); err != nil {
		return redlock.NoteAnswer{}, err
	}
	return ans, nil
}

func (l *link) ReleaseTenure(ctx context.Context, keys redlock.TenureKeys, value string, mark redlock.WaiterMark, notify string) (bool, error) {
	var ok bool
	if err := l.do(ctx, "release", []string{keys.Key}, func() (e error) {
		ok, e = l.m.mem.ReleaseTenure(bg, keys, value, mark, notify)
		return e
	}); err != nil {
		return false, err
	}
	return ok, nil
}

func (l *link) RemoveMark(ctx context.Context, keys redlock.TenureKeys, sidecar string) error {
	return l.do(ctx, "marks", nil, func() error { return l.m.mem.RemoveMark(bg, keys, sidecar) })
}

func (l *link) GetHolder(ctx context.Context, keys redlock.TenureKeys) (redlock.HolderRead, error) {
	var r redlock.HolderRead
	if err := l.do(ctx, "get", nil, func() (e error) {
		r, e = l.m.mem.GetHolder(bg, keys)
		return e
	}); err != nil {
		return redlock.HolderRead{}, err
	}
	return r, nil
}

// WatchMessages delivers the messages published on a channel as
// WatchReleases delivers releases: after a network delay, losing those
// made while the link is cut, the master is down or the link closed.
func (l *link) WatchMessages(channel string, notify func(payload string)) (cancel func()) {
	return l.m.mem.WatchMessages(channel, func(payload string) {
		l.mu.Lock()
		lost := l.closed
		l.mu.Unlock()
		if lost || l.unreachable() || l.m.status() == masterKilled {
			return
		}
		d, _ := l.delays("notify", []string{channel}, time.Now(), false)
		l.w.inflight.Go(func() {
			time.Sleep(d)
			notify(payload)
		})
	})
}

// NotifyConnections implements redlock.ConnectionNotifier: f runs after
// each connection is counted, as redisnode does.
func (l *link) NotifyConnections(f func()) {
	l.mu.Lock()
	l.notify = f
	l.mu.Unlock()
}

var (
	_ redlock.Node               = (*link)(nil)
	_ redlock.Fencer             = (*link)(nil)
	_ redlock.OneRoundFencer     = (*link)(nil)
	_ redlock.BatchExtender      = (*link)(nil)
	_ redlock.ServerInfoReader   = (*link)(nil)
	_ redlock.ReleaseWatcher     = (*link)(nil)
	_ redlock.ConnectionCounter  = (*link)(nil)
	_ redlock.ConnectionNotifier = (*link)(nil)
	_ redlock.MemberRecorder     = (*link)(nil)
	_ redlock.RWNode             = (*link)(nil)
	_ redlock.TenureNode         = (*link)(nil)
)
