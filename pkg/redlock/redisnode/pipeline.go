package redisnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/starvation"
)

// Coalescing: every scripted call goes through a pipeliner. A caller that
// finds a pipeline slot free sends, as one pipeline, its own call and every
// call queued at that moment, and keeps going while calls keep arriving;
// callers that find every slot busy queue and wait. A lone caller thus
// pays no hand-off to another goroutine, while many concurrent callers, and
// renewals that fall due together, share round trips and syscalls instead
// of each holding a connection. The number of slots is the number of
// command connections a node keeps busy.
//
// Slot 0 sends a batch of one call as a plain command on the regular pool
// (go-redis's plain command path is cheaper than a pipeline of one); every
// other batch goes as a pipeline on the pipeline pool, which is sized to
// the slots. So the slots never need more than the regular connection plus
// one pipeline connection per slot, and lone calls of concurrent slots do
// not queue for the one regular connection.
//
// Queueing is the sidecar's, not the master's (see redlock's overload.go):
// a call made by a redlock round may wait in the queue until its deadline
// less its redlock.SendTimeout, and has that whole timeout once sent. A
// call not sent by then leaves the queue and fails: with redlock's
// ErrOverloaded when the wait was this sidecar's (the master answered a
// batch meanwhile, or nothing was in flight), with a timeout when it was
// the master's (it answered nothing while the call waited behind it).
// Renewals (extend scripts) are queued ahead of everything else: losing a
// held lock to a burst of new acquisitions is the worse outcome.

const maxBatch = 256

// call is one scripted command waiting for its pipeline.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
	queued time.Time // when it was queued, for the queue-wait figures

	// sendTimeout, when positive, is the call's time once sent, and sendBy
	// the latest it may be sent (see "Queueing" above); zero: the
	// context's deadline bounds the whole call.
	sendTimeout time.Duration
	sendBy      time.Time
	// seen is the master's answered-batch count when the call was queued.
	seen uint64
	// sentHealthy is the pipeliner's healthy when the call was taken into
	// a batch: whether the master answered the batch before. Its own
	// batch's failure must not decide whose fault that failure was.
	sentHealthy bool
	// Guarded by the pipeliner's mu: taken into a batch, or given up by
	// its caller (then skipped).
	taken, abandoned bool
}

// newCall makes a call for ctx, reading its send budget.
func newCall(ctx context.Context, script *redis.Script, keys []string, args []any) *call {
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{}), queued: time.Now()}
	if timeout, ok := redlock.SendTimeout(ctx); ok {
		if deadline, ok := ctx.Deadline(); ok {
			c.sendTimeout, c.sendBy = timeout, deadline.Add(-timeout)
		}
	}
	return c
}

// lateToSend reports whether c waited in the queue past its sendBy. A call
// whose caller allowed less than the send timeout (its sendBy passed before
// it was queued) is sent as soon as it can be, with what time is left.
func (c *call) lateToSend(now time.Time) bool {
	return c.sendBy.After(c.queued) && now.After(c.sendBy)
}

// urgent reports whether script renews held locks; such calls go first.
func urgent(script *redis.Script) bool {
	return script == extendScript || script == extendManyScript
}

type pipeliner struct {
	client *redis.Client
	slots  chan int // the numbers of the pipeline slots free now

	// onQueueWait, if set, receives each call's queue wait; see
	// Options.OnQueueWait.
	onQueueWait atomic.Pointer[func(time.Duration)]

	// Totals for Stats, updated once per batch.
	calls     atomic.Uint64
	batches   atomic.Uint64
	queueWait atomic.Int64 // nanoseconds
	// answers counts the batches the master answered (with replies, even
	// error replies): a call that waited while it grew waited for this
	// sidecar, not for the master.
	answers atomic.Uint64
	// healthy: the master answered the latest batch that could judge it
	// (one that only timed out while this sidecar was starved of CPU
	// cannot). Only then may the sidecar's starvation take the blame for
	// a failure: a master that is down or hangs is the master's fault
	// from the first batch it fails while this sidecar runs freely. (While
	// the sidecar stays starved, a hung master's timeouts stay overload:
	// nothing here can tell them apart.)
	healthy atomic.Bool
	// probe tells the sidecar's delays from the master's (package starvation);
	// lastSent is its reading when the latest batch was sent.
	probe    *starvation.Probe
	lastSent atomic.Pointer[starvation.Reading]

	// unmerged sends every call of a batch as its own script call (tests
	// measure what merging saves); set before the first call.
	unmerged bool

	mu     sync.Mutex
	urgent []*call // renewals, sent before queue
	queue  []*call
	closed bool
}

// newPipeliner returns a pipeliner with the given number of slots (at
// least one).
func newPipeliner(client *redis.Client, slots int) *pipeliner {
	p := &pipeliner{client: client, slots: make(chan int, max(slots, 1)), probe: starvation.NewProbe()}
	for i := range cap(p.slots) {
		p.slots <- i
	}
	return p
}

// setOnQueueWait sets (or, with nil, clears) the queue-wait observer.
func (p *pipeliner) setOnQueueWait(f func(time.Duration)) {
	if f == nil {
		p.onQueueWait.Store(nil)
		return
	}
	p.onQueueWait.Store(&f)
}

var errClosed = errors.New("node closed")

// QueuesCalls implements redlock.QueueingNode: calls wait in the
// pipeliner's queue, and one that waits too long fails as described there.
func (n *Node) QueuesCalls() {}

var _ redlock.QueueingNode = (*Node)(nil)

// run queues a scripted call, sends queued calls while a slot is free, and
// waits for its reply or for ctx to end (the command may still run; its
// reply is then dropped, as after any timeout).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return failed(ctx, unqueued(ctx, err))
	}
	c := newCall(ctx, script, keys, args)
	if !p.enqueue(c) {
		return failed(ctx, errClosed)
	}
	p.drive(c)
	return p.await(c)
}

// unqueued is the error of a call whose context ended before it could be
// queued: the caller's cancellation as is; but a redlock round's call
// whose deadline passed before it reached the queue never left this
// sidecar, so that is local overload, whatever the master's state.
func unqueued(ctx context.Context, err error) error {
	if _, ok := redlock.SendTimeout(ctx); ok && errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: the call's time was up before it could be queued (%w)", redlock.ErrOverloaded, err)
	}
	return err
}

// await waits for c's reply. A call still queued when its caller gives up
// (ctx ends) or when it is due to be sent (sendBy) leaves the queue, so it
// is never sent for nobody.
func (p *pipeliner) await(c *call) *redis.Cmd {
	if answered(c) { // sent by its own caller (drive): no timer needed
		return c.cmd
	}
	var sendBy <-chan time.Time
	if !c.sendBy.IsZero() {
		t := time.NewTimer(time.Until(c.sendBy))
		defer t.Stop()
		sendBy = t.C
	}
	for {
		select {
		case <-c.done:
			return c.cmd
		case <-c.ctx.Done():
			return failed(c.ctx, p.expired(c))
		case <-sendBy:
			if p.abandon(c) {
				return failed(c.ctx, p.unsent(c))
			}
			sendBy = nil // sent in time: the master has its full timeout
		}
	}
}

// expired is the error of a call whose context ended before its reply:
// the caller's cancellation as is; a deadline, for a call never sent, as
// unsent; for a call sent, as local overload when the sidecar was starved
// of CPU while the call was out (its reply may be sitting unread) and the
// master was answering before it, else as the timeout it is.
func (p *pipeliner) expired(c *call) error {
	sent, healthy := p.sentWhile(c)
	err := c.ctx.Err()
	switch {
	case !errors.Is(err, context.DeadlineExceeded) || c.sendTimeout == 0:
		return err
	case !sent:
		return p.unsent(c)
	case healthy && p.starvedSinceLastSend():
		return fmt.Errorf("%w: the sidecar was starved of CPU while the call was out (%w)", redlock.ErrOverloaded, err)
	}
	return err
}

// sentWhile takes c out of the queue if it is still there, and says
// whether it was sent, and whether the master was answering then.
func (p *pipeliner) sentWhile(c *call) (sent, healthy bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.taken {
		return true, c.sentHealthy
	}
	c.abandoned = true
	return false, false
}

// abandon takes c out of the queue if it is still there.
func (p *pipeliner) abandon(c *call) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c.taken {
		return false
	}
	c.abandoned = true
	return true
}

// errQueuedBehindMaster is why a call that waited behind batches the
// master never answered failed: the master's slowness, reported as a
// timeout like any other.
var errQueuedBehindMaster = fmt.Errorf("%w: queued behind calls the master has not answered", context.DeadlineExceeded)

// unsent is the error of a call that could not be sent by its sendBy:
// local overload if the master answered a batch while it waited, or if it
// answered the latest and none was in flight to wait for or the sidecar was
// starved of CPU since; else the master's timeout.
func (p *pipeliner) unsent(c *call) error {
	if p.answers.Load() != c.seen || p.healthy.Load() && (p.inFlight() == 0 || p.starvedSinceLastSend()) {
		return fmt.Errorf("%w: waited %v in the queue for a connection", redlock.ErrOverloaded, time.Since(c.queued).Round(time.Millisecond))
	}
	return errQueuedBehindMaster
}

func (p *pipeliner) starvedSinceLastSend() bool {
	r := p.lastSent.Load()
	return r != nil && p.probe.StarvedSince(*r)
}

func (p *pipeliner) enqueue(c *call) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	c.seen = p.answers.Load()
	if urgent(c.script) {
		p.urgent = append(p.urgent, c)
	} else {
		p.queue = append(p.queue, c)
	}
	return true
}

// drive sends batches while it holds a slot and calls are queued. It
// checks the queue again after giving the slot back, so a call queued by a
// caller that found no slot free is never left behind. Under sustained
// load a caller whose own call is answered hands the driving to a fresh
// goroutine after a few batches rather than serve others for ever.
func (p *pipeliner) drive(own *call) {
	for {
		var slot int
		select {
		case slot = <-p.slots:
		default:
			return // a slot holder will send it
		}
		handOff := false
		for batches, batch := 0, p.take(); len(batch) > 0; batch = p.take() {
			p.exec(slot, batch)
			if batches++; batches >= maxDrivenBatches && answered(own) {
				handOff = true
				break
			}
		}
		p.slots <- slot
		if p.pending() == 0 {
			return
		}
		if handOff {
			go p.drive(nil)
			return
		}
	}
}

// maxDrivenBatches bounds the batches one caller sends for others once its
// own call is answered.
const maxDrivenBatches = 4

func answered(c *call) bool {
	if c == nil {
		return false
	}
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// take makes the next batch: renewals first, then the rest in order,
// skipping calls their callers gave up and calls late to send: the master
// would not get its whole timeout (their callers' own timers, late to
// fire, fail them as unsent).
func (p *pipeliner) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	var batch []*call
	healthy, now := p.healthy.Load(), time.Now()
	batch, p.urgent = takeFrom(batch, p.urgent, healthy, now)
	batch, p.queue = takeFrom(batch, p.queue, healthy, now)
	return batch
}

// takeFrom moves calls from queue to batch until the batch is full,
// marking them taken, with the master's health as they are sent. The
// caller holds the pipeliner's mu.
func takeFrom(batch, queue []*call, healthy bool, now time.Time) ([]*call, []*call) {
	i := 0
	for ; i < len(queue) && len(batch) < maxBatch; i++ {
		c := queue[i]
		if c.lateToSend(now) {
			c.abandoned = true
		}
		if !c.abandoned {
			c.taken, c.sentHealthy = true, healthy
			batch = append(batch, c)
		}
	}
	clear(queue[:i]) // let sent calls be collected
	return batch, queue[i:]
}

func (p *pipeliner) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.urgent) + len(p.queue)
}

func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

// close fails calls queued from now on; calls in flight finish.
func (p *pipeliner) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// inFlight is the number of slots in use: batches being sent, or about to
// be taken by a caller that holds a slot.
func (p *pipeliner) inFlight() int { return cap(p.slots) - len(p.slots) }

// exec sends one batch on the given slot, loading scripts the server does
// not know (after a restart or SCRIPT FLUSH) and sending those calls once
// more.
func (p *pipeliner) exec(slot int, batch []*call) {
	sent := time.Now()
	ctx, cancel := batchContext(batch, sent)
	defer cancel()
	base := p.probe.Read(lateness(batch))
	p.lastSent.Store(&base)
	wasHealthy := p.healthy.Load() // before this batch, which must not judge itself
	cmds := p.send(ctx, slot, batch)
	answered := serverAnswered(cmds)
	switch {
	case answered:
		p.answers.Add(1)
		p.healthy.Store(true)
	case wasHealthy && p.probe.StarvedSince(base) && blameSidecar(cmds):
		// A starved batch that only timed out cannot judge the master.
	default:
		p.healthy.Store(false)
	}
	var retry []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		p.reload(ctx, slot, batch, retry, cmds)
	}
	for i, c := range batch {
		c.cmd = cmds[i]
		close(c.done)
	}
	// Counted once the callers have their replies, so that neither the
	// figures nor the observer delay them.
	p.account(batch, sent)
}

// account adds a sent batch to the totals and reports each call's wait in
// the queue, from run to the batch being sent.
func (p *pipeliner) account(batch []*call, sent time.Time) {
	var observe func(time.Duration)
	if f := p.onQueueWait.Load(); f != nil {
		observe = *f
	}
	var total time.Duration
	for _, c := range batch {
		wait := sent.Sub(c.queued)
		total += wait
		if observe != nil {
			observe(wait)
		}
	}
	p.calls.Add(uint64(len(batch)))
	p.batches.Add(1)
	p.queueWait.Add(int64(total))
}

func (p *pipeliner) send(ctx context.Context, slot int, batch []*call) []*redis.Cmd {
	if len(batch) == 1 && slot == 0 { // see "Slot 0" above
		c := batch[0]
		return []*redis.Cmd{p.client.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)}
	}
	var groups map[int][]int
	var merged []bool
	if !p.unmerged {
		groups, merged = mergeBatch(batch) // see batchscripts.go
	}
	pipe := p.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	many := make(map[int]*redis.Cmd, len(groups))
	for i, c := range batch {
		switch {
		case len(groups[i]) > 0:
			many[i] = queueMerged(ctx, pipe, batch, groups[i])
		case merged == nil || !merged[i]:
			cmds[i] = pipe.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)
		}
	}
	// Exec reports the first failed command; a connection failure (dial,
	// auth, timeout) may leave commands without an error of their own.
	if _, err := pipe.Exec(ctx); err != nil {
		for _, cmd := range cmds {
			if cmd != nil && cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
		for _, cmd := range many {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
	}
	for i, cmd := range many {
		splitMerged(ctx, cmd, groups[i], cmds)
	}
	return cmds
}

func (p *pipeliner) reload(ctx context.Context, slot int, batch []*call, retry []int, cmds []*redis.Cmd) {
	again := make([]*call, len(retry))
	loaded := map[*redis.Script]bool{}
	for j, i := range retry {
		again[j] = batch[i]
		if s := batch[i].script; !loaded[s] {
			loaded[s] = true
			_ = s.Load(ctx, p.client).Err()
			if f, ok := manyForms[s]; ok { // its calls may have been merged
				_ = f.script.Load(ctx, p.client).Err()
			}
		}
	}
	for j, cmd := range p.send(ctx, slot, again) {
		cmds[retry[j]] = cmd
	}
}

// lateness is how late a goroutine's turn to run must be to count as the
// sidecar's starvation for batch: a tenth of its shortest send timeout.
// Zero (no reading) when no call is a redlock round's.
func lateness(batch []*call) time.Duration {
	var least time.Duration
	for _, c := range batch {
		if c.sendTimeout > 0 && (least == 0 || c.sendTimeout < least) {
			least = c.sendTimeout
		}
	}
	return least / 10
}

// blameSidecar turns the timeouts of a batch sent while the sidecar was
// starved of CPU into local overload: it cannot tell whether the master
// was slow. Other failures (a refused connection) stay the master's; it
// reports whether there were none.
func blameSidecar(cmds []*redis.Cmd) (onlyTimeouts bool) {
	onlyTimeouts = true
	for _, cmd := range cmds {
		switch err := cmd.Err(); {
		case isTimeout(err):
			cmd.SetErr(fmt.Errorf("%w: the sidecar was starved of CPU while the call was out (%w)", redlock.ErrOverloaded, err))
		case err != nil:
			onlyTimeouts = false
		}
	}
	return onlyTimeouts
}

func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}

// serverAnswered reports whether the master answered any of cmds: a
// reply, or an error reply, rather than a connection failure or timeout.
func serverAnswered(cmds []*redis.Cmd) bool {
	for _, cmd := range cmds {
		var reply redis.Error
		if err := cmd.Err(); err == nil || errors.Is(err, redis.Nil) || errors.As(err, &reply) {
			return true
		}
	}
	return false
}

// batchContext bounds a batch sent at sent by the latest deadline among
// its callers (each at most a node timeout away), or the fallback timeout.
func batchContext(batch []*call, sent time.Time) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := callDeadline(c, sent)
		if !ok {
			latest = sent.Add(fallbackTimeout)
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}

// callDeadline is when c's reply is due if sent at sent: its send
// timeout from then (never past its context's deadline), or its context's
// deadline when it has no send timeout.
func callDeadline(c *call, sent time.Time) (time.Time, bool) {
	d, ok := c.ctx.Deadline()
	if ok && c.sendTimeout > 0 {
		d = earlier(d, sent.Add(c.sendTimeout))
	}
	return d, ok
}

func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
