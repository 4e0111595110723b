package redisnode

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Coalescing: every scripted call goes through a pipeliner, whose few
// workers each take all the calls waiting at that moment (up to maxBatch)
// and send them as one pipeline: one write and one read for many callers.
// A lone caller pays a goroutine hand-off (a few µs); many concurrent
// callers, and renewals that fall due together, share round trips and
// syscalls instead of each holding a connection for its own. The number of
// workers is the number of command connections a node keeps busy.

const (
	defaultPipelines = 1
	maxBatch         = 256
)

// call is one scripted command waiting for its pipeline.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	cmd    *redis.Cmd
	done   chan struct{}
}

type pipeliner struct {
	client *redis.Client
	calls  chan *call
	stop   chan struct{}
	wg     sync.WaitGroup
}

func newPipeliner(client *redis.Client, workers int) *pipeliner {
	if workers <= 0 {
		workers = defaultPipelines
	}
	p := &pipeliner{client: client, calls: make(chan *call, maxBatch), stop: make(chan struct{})}
	for range workers {
		p.wg.Go(p.work)
	}
	return p
}

var errClosed = errors.New("node closed")

// run queues a scripted call and waits for its reply or for ctx to end
// (the command may still run; its reply is then dropped, as after any
// timeout).
func (p *pipeliner) run(ctx context.Context, script *redis.Script, keys []string, args ...any) *redis.Cmd {
	c := &call{ctx: ctx, script: script, keys: keys, args: args, done: make(chan struct{})}
	select {
	case p.calls <- c:
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	case <-p.stop:
		return failed(ctx, errClosed)
	}
	select {
	case <-c.done:
		return c.cmd
	case <-ctx.Done():
		return failed(ctx, ctx.Err())
	}
}

func failed(ctx context.Context, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx)
	cmd.SetErr(err)
	return cmd
}

func (p *pipeliner) close() {
	close(p.stop)
	p.wg.Wait()
}

// work sends batches until the node closes.
func (p *pipeliner) work() {
	batch := make([]*call, 0, maxBatch)
	for {
		select {
		case <-p.stop:
			return
		case c := <-p.calls:
			batch = append(batch[:0], c)
		}
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-p.calls:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		p.exec(batch)
	}
}

// exec sends one batch, loading scripts the server does not know (after a
// restart or SCRIPT FLUSH) and sending those calls once more.
func (p *pipeliner) exec(batch []*call) {
	ctx, cancel := batchContext(batch)
	defer cancel()
	cmds := p.send(ctx, batch)
	var retry []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		p.reload(ctx, batch, retry, cmds)
	}
	for i, c := range batch {
		c.cmd = cmds[i]
		close(c.done)
	}
}

func (p *pipeliner) send(ctx context.Context, batch []*call) []*redis.Cmd {
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

func (p *pipeliner) reload(ctx context.Context, batch []*call, retry []int, cmds []*redis.Cmd) {
	again := make([]*call, len(retry))
	loaded := map[*redis.Script]bool{}
	for j, i := range retry {
		again[j] = batch[i]
		if s := batch[i].script; !loaded[s] {
			loaded[s] = true
			_ = s.Load(ctx, p.client).Err()
		}
	}
	for j, cmd := range p.send(ctx, again) {
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
