package redisnode

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
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

	mu     sync.Mutex
	queue  []*call
	closed bool
}

// newPipeliner returns a pipeliner with the given number of slots (at
// least one).
func newPipeliner(client *redis.Client, slots int) *pipeliner {
	p := &pipeliner{client: client, slots: make(chan int, max(slots, 1))}
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

// run queues a scripted call, sends queued calls while a slot is free, and
// waits for its reply or for ctx to end (the command may still run; its
// reply is then dropped, as after any timeout).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return failed(ctx, err)
	}
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{}), queued: time.Now()}
	if !p.enqueue(c) {
		return failed(ctx, errClosed)
	}
	p.drive(c)
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	}
}

func (p *pipeliner) enqueue(c *call) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.queue = append(p.queue, c)
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

func (p *pipeliner) take() []*call {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := min(len(p.queue), maxBatch)
	batch := p.queue[:n:n]
	p.queue = p.queue[n:]
	return batch
}

func (p *pipeliner) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
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
	ctx, cancel := batchContext(batch)
	defer cancel()
	sent := time.Now()
	cmds := p.send(ctx, slot, batch)
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
	pipe := p.client.Pipeline()
	cmds := make([]*redis.Cmd, len(batch))
	for i, c := range batch {
		cmds[i] = pipe.EvalSha(ctx, c.script.Hash(), c.keys, c.args...)
	}
	// Exec reports the first failed command; a connection failure (dial,
	// auth, timeout) may leave commands without an error of their own.
	if _, err := pipe.Exec(ctx); err != nil {
		for _, cmd := range cmds {
			if cmd.Err() == nil && cmd.Val() == nil {
				cmd.SetErr(err)
			}
		}
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
		}
	}
	for j, cmd := range p.send(ctx, slot, again) {
		cmds[retry[j]] = cmd
	}
}

// batchContext bounds a batch by the latest deadline among its callers
// (each is at most a node timeout away), or the fallback timeout.
func batchContext(batch []*call) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range batch {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = time.Now().Add(fallbackTimeout)
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
