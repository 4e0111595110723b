package redisnode

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sidelock/sidelock/pkg/redlock"
)

var _ redlock.ReleaseWatcher = (*Node)(nil)

// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE. It is only a write
// (replies arrive on the reading goroutine), so it is slow only while the
// connection is being (re)dialled.
const subscribeTimeout = time.Second

// releases is a Node's registry of release watchers and the single Pub/Sub
// connection that serves all of them. The connection is subscribed to
// exactly the keys that have watchers, so a sidecar only hears about the
// locks it waits for.
//
// Two goroutines run from the first watcher until Close, or until no key
// has been watched for the idle time (the connection is then closed, and
// the next watcher opens a new one): deliver reads the messages and calls
// the watchers, and subscriber applies watcher changes to the connection. Callers of WatchReleases and cancel
// only update the registry and poke subscriber: go-redis's Subscribe can
// wait on a dial, or behind its health check's reconnect (up to 10s), and
// callers must not wait with it.
type releases struct {
	mu       sync.Mutex
	watchers map[string]map[*watcher]struct{} // keys with at least one watcher
	dirty    map[string]struct{}              // keys that gained their first or lost their last watcher
	ps       *redis.PubSub                    // nil until a watch, and after an idle spell
	closed   bool
	idle     time.Duration // without watched keys before ps is closed

	changed chan struct{}      // 1-buffered: dirty is not empty (one per ps)
	stop    context.CancelFunc // ends subscriber and any SUBSCRIBE in flight
	wg      sync.WaitGroup
}

// watcher is one WatchReleases (notify) or WatchMessages (message)
// registration; its address is its identity, so the same func may be
// registered twice.
type watcher struct {
	notify  func()
	message func(payload string)
}

// deliver calls the watcher for one message.
func (w *watcher) deliver(payload string) {
	if w.message != nil {
		w.message(payload)
		return
	}
	w.notify()
}

// WatchReleases implements redlock.ReleaseWatcher: notify is called (on the
// Node's delivery goroutine, one call at a time) each time a Release on this
// master deletes key, as announced by release.lua on the channel named key.
//
// The first watch of a Node opens its one Pub/Sub connection. The first
// watcher of a key subscribes to it and the last cancel unsubscribes, both
// asynchronously: the watch is active a round trip after this returns. When
// the connection drops, go-redis redials and subscribes again to every
// watched key; releases in between are lost, which is why watchers must
// also poll. After Close, WatchReleases returns a no-op cancel.
func (n *Node) WatchReleases(key string, notify func()) (cancel func()) {
	return n.watchChannel(key, &watcher{notify: notify})
}

// watchChannel registers w on the channel (a key's, for releases).
func (n *Node) watchChannel(key string, w *watcher) (cancel func()) {
	r := &n.releases
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return func() {}
	}
	if r.ps == nil {
		n.startWatching()
	}
	if r.watchers[key] == nil {
		r.watchers[key] = make(map[*watcher]struct{})
		r.markDirty(key)
	}
	r.watchers[key][w] = struct{}{}

	var once sync.Once
	return func() { once.Do(func() { r.unwatch(key, w) }) }
}

// startWatching opens the Pub/Sub connection and starts the goroutines.
// The caller holds r.mu.
func (n *Node) startWatching() {
	r := &n.releases
	r.watchers = make(map[string]map[*watcher]struct{})
	r.dirty = make(map[string]struct{})
	r.changed = make(chan struct{}, 1)
	var ctx context.Context
	ctx, r.stop = context.WithCancel(context.Background())

	// With no channels, Subscribe does no I/O. Channel starts go-redis's
	// own reading goroutine, which dials in the background, redials and
	// resubscribes after errors, and closes the Go channel when the PubSub
	// is closed; and a health check that PINGs every 3s when idle, so a
	// connection to a vanished master fails and is replaced. Channel drops
	// a message only if we leave it unread for a minute; deliver never
	// blocks, since notify must not.
	r.ps = n.subscriber.Subscribe(ctx)
	msgs := r.ps.Channel()

	r.wg.Add(2)
	go r.deliver(msgs)
	go r.subscriber(ctx, r.ps, r.changed)
}

func (r *releases) unwatch(key string, w *watcher) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.watchers[key]
	if _, ok := ws[w]; !ok {
		return // Close dropped the registry
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(r.watchers, key)
		r.markDirty(key)
	}
}

// markDirty queues key for subscriber. The caller holds r.mu.
func (r *releases) markDirty(key string) {
	r.dirty[key] = struct{}{}
	select {
	case r.changed <- struct{}{}:
	default: // already poked; subscriber will see this key too
	}
}

// deliver calls the watchers of each announced key until the PubSub closes.
func (r *releases) deliver(msgs <-chan *redis.Message) {
	defer r.wg.Done()
	var notify []*watcher
	for msg := range msgs {
		r.mu.Lock()
		notify = notify[:0]
		for w := range r.watchers[msg.Channel] {
			notify = append(notify, w)
		}
		r.mu.Unlock()
		// Outside the lock, so notify may call cancel or WatchReleases.
		for _, w := range notify {
			w.deliver(msg.Payload)
		}
	}
}

// subscriber brings the connection's subscriptions in line with the
// watched keys each time they change, until Close or an idle spell.
func (r *releases) subscriber(ctx context.Context, ps *redis.PubSub, changed <-chan struct{}) {
	defer r.wg.Done()
	subscribed := make(map[string]struct{}) // what go-redis was last told
	idle := time.NewTimer(r.idle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-idle.C:
			if r.retire(ps) {
				return
			}
			idle.Reset(r.idle)
			continue
		case <-changed:
		}

		var add, drop []string
		r.mu.Lock()
		for key := range r.dirty {
			_, want := r.watchers[key]
			_, have := subscribed[key]
			switch {
			case want && !have:
				add = append(add, key)
				subscribed[key] = struct{}{}
			case !want && have:
				drop = append(drop, key)
				delete(subscribed, key)
			}
		}
		clear(r.dirty)
		r.mu.Unlock()

		// Errors are deliberately ignored. go-redis records the channel set
		// before it writes, whether or not the write succeeds; a failed
		// write drops the connection, and every new connection subscribes
		// to the whole recorded set. So a failure here is repaired by the
		// reconnect, not by us.
		writeCtx, cancel := context.WithTimeout(ctx, subscribeTimeout)
		if len(add) > 0 {
			_ = ps.Subscribe(writeCtx, add...)
		}
		if len(drop) > 0 {
			_ = ps.Unsubscribe(writeCtx, drop...)
		}
		cancel()
		idle.Stop()
		if len(subscribed) == 0 {
			idle.Reset(r.idle)
		}
	}
}

// retire closes ps when no key is watched or about to be, so the next
// watch opens a new connection; it reports whether it did.
func (r *releases) retire(ps *redis.PubSub) bool {
	r.mu.Lock()
	if r.closed || r.ps != ps || len(r.watchers) > 0 || len(r.dirty) > 0 {
		r.mu.Unlock()
		return false
	}
	r.ps = nil
	stop := r.stop
	r.mu.Unlock()
	stop()
	_ = ps.Close() // ends deliver
	return true
}

// close stops watching: no notify runs once it returns. Cancels stay safe
// to call.
func (r *releases) close() {
	r.mu.Lock()
	r.closed = true
	ps := r.ps
	r.watchers = nil
	r.mu.Unlock()
	if ps == nil {
		return
	}
	r.stop()
	// Closing the PubSub closes the Go channel (go-redis's reader exits
	// first), which ends deliver.
	_ = ps.Close()
	r.wg.Wait()
}
