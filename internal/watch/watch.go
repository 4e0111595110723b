// Package watch tells anyone who holds a lock name, and every change of
// holder, without a token: what a standby of a leader election needs to
// know who leads.
//
// One goroutine per watched name (however many streams watch it) reads the
// name from the masters: at once, again whenever a master announces a
// release of it or a new holder note (a sidecar handed it to another of
// its callers with no round, and noted the new holder a round later), or a
// lease of this sidecar on it starts or ends, and at
// least every Poll otherwise (faster for a moment after a change, when a
// waiting successor is likely to take the name). So a change is reported
// within about Poll plus one round to the masters, and usually within one
// round. Readers get the current state first, then each change.
//
// What is NOT guaranteed: a watcher learns of a change after it happened,
// and may miss a holder that came and went between two reads. A watched
// holder's valid_until is the masters' word when read, not a promise to
// the watcher: only the holder's own answers and events are promises. A
// release is told apart from an expiry only when it was announced (the
// masters' pub/sub, or this sidecar's own lease); a missed announcement
// reads as an expiry. A read may catch a grant between its two rounds
// (with fencing on: taken on a majority, fence not yet committed); a new
// holder is therefore read again 30 ms later before it is reported, and
// should its fence still change, it is reported again with the new one.
// Rarely, a grant whose second round then failed is reported and released
// at once.
package watch

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// Source reads lock names: the lease Manager.
type Source interface {
	Inspect(ctx context.Context, name string) (lease.Status, error)
	// WatchReleases calls notify (which must not block) when a master
	// announces a release of name or a new holder of it, until cancel.
	WatchReleases(name string, notify func()) (cancel func())
}

// Defaults and bounds.
const (
	DefaultPoll = time.Second
	// DefaultMaxStreams bounds the watch streams of a sidecar unless told
	// otherwise (SIDELOCK_MAX_WATCHERS): each watched name costs a round to
	// the masters every Poll.
	DefaultMaxStreams = 256
	// fastPoll is the poll for fastPolls reads after a change: a waiting
	// successor takes a released name within a round or two.
	fastPoll  = 100 * time.Millisecond
	fastPolls = 5
	// confirmAfter is how long after seeing a new holder it is read
	// again: longer than a grant's fence commit usually takes (one round
	// to the masters), short beside the poll.
	confirmAfter = 30 * time.Millisecond
	// readTimeout bounds one read (each call to a master is bounded by
	// the node timeout already; this bounds a stuck read as a whole).
	readTimeout = 5 * time.Second
	// streamBuffer is how many changes a reader may fall behind; one that
	// falls further is cut off (its stream ends, and a reconnect gets the
	// state afresh), so a slow reader never holds up the others.
	streamBuffer = 16
)

// ErrTooManyStreams is a watch refused at the sidecar's cap.
var ErrTooManyStreams = errors.New("too many watch streams on this sidecar")

// ErrClosed is a watch asked of a Hub that has closed.
var ErrClosed = errors.New("the sidecar is shutting down")

// Kind names a change.
type Kind string

// Change kinds.
const (
	KindState       Kind = "state"       // the current state, first on every stream
	KindAcquired    Kind = "acquired"    // a (new) holder
	KindReleased    Kind = "released"    // the name is free
	KindUnavailable Kind = "unavailable" // the masters cannot be read
)

// Release reasons.
const (
	ReasonReleased = "released" // announced: a master's pub/sub or this sidecar's lease
	ReasonExpired  = "expired"  // noticed by a read: lapsed, or the announcement was missed
)

// Change is one thing a watcher is told.
type Change struct {
	Kind   Kind
	Status lease.Status // the name's state as read (Held, Owner, Fence, ValidUntil)
	// Since is when this sidecar first saw the current holder.
	Since  time.Time
	Reason string // for KindReleased
	Err    error  // for KindUnavailable
}

// Config tunes a Hub; zero values take the defaults.
type Config struct {
	Source     Source
	Poll       time.Duration
	MaxStreams int
}

// Hub serves every watch of a sidecar.
type Hub struct {
	cfg Config

	mu      sync.Mutex
	closed  bool
	streams int
	topics  map[string]*topic
	wg      sync.WaitGroup // one per topic goroutine
}

// New returns a Hub reading names from cfg.Source.
func New(cfg Config) *Hub {
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	return &Hub{cfg: cfg, topics: make(map[string]*topic)}
}

// Subscribe watches name. The channel delivers KindState first, then each
// change; it is closed when cancel is called, when the Hub closes, or when
// the reader fell streamBuffer changes behind.
func (h *Hub) Subscribe(name string) (changes <-chan Change, cancel func(), err error) {
	if err := lease.ValidateName(name); err != nil {
		return nil, nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.closed:
		return nil, nil, ErrClosed
	case h.streams >= h.cfg.MaxStreams:
		return nil, nil, ErrTooManyStreams
	}
	t, ok := h.topics[name]
	if !ok {
		t = newTopic(name)
		h.topics[name] = t
		h.wg.Add(1)
		go h.run(t)
	}
	s := &stream{ch: make(chan Change, streamBuffer)}
	switch {
	case t.known:
		s.send(t.stateChange())
	case t.unavailable:
		s.send(Change{Kind: KindUnavailable, Err: t.err})
	}
	t.streams[s] = struct{}{}
	h.streams++
	return s.ch, func() { h.unsubscribe(t, s) }, nil
}

func (h *Hub) unsubscribe(t *topic, s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := t.streams[s]; !ok {
		return
	}
	h.dropLocked(t, s)
}

// dropLocked ends one stream; the last one out stops its topic.
func (h *Hub) dropLocked(t *topic, s *stream) {
	delete(t.streams, s)
	close(s.ch)
	h.streams--
	if len(t.streams) == 0 && h.topics[t.name] == t {
		delete(h.topics, t.name)
		close(t.stop)
	}
}

// Changed says a lease of this sidecar on name started or ended: its
// watchers are told at once. It never blocks.
func (h *Hub) Changed(name string) {
	h.mu.Lock()
	t, ok := h.topics[name]
	h.mu.Unlock()
	if ok {
		t.signal()
	}
}

// Close ends every stream and waits for the readers to stop.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	for _, t := range h.topics {
		for s := range t.streams {
			h.dropLocked(t, s)
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

// Streams is the number of open watch streams.
func (h *Hub) Streams() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.streams
}

// run reads t's name until its last stream leaves.
func (h *Hub) run(t *topic) {
	defer h.wg.Done()
	cancel := h.cfg.Source.WatchReleases(t.name, t.signal)
	defer cancel()
	timer := time.NewTimer(0)
	defer timer.Stop()
	fast := 0
	for {
		announced := false
		select {
		case <-t.stop:
			return
		case <-t.wake:
			announced = true
		case <-timer.C:
		}
		st, err := h.read(t)
		// A release announced while the read was on its way is the
		// likelier cause of a free name than a lapse.
		announced = announced || len(t.wake) > 0
		if err == nil && h.newHolder(t, st) && t.pause(confirmAfter) {
			// A new grant may have been read between its two rounds
			// (package redlock, fence.go): read again once its fence is
			// likely committed, so the first report carries it.
			st, err = h.read(t)
		}
		if c := h.apply(t, st, err, announced); c == KindAcquired || c == KindReleased {
			fast = fastPolls
		}
		poll := h.cfg.Poll
		if fast > 0 {
			fast--
			poll = min(poll, fastPoll)
		}
		timer.Reset(poll)
	}
}

// read reads t's name from the masters.
func (h *Hub) read(t *topic) (lease.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	return h.cfg.Source.Inspect(ctx, t.name)
}

// newHolder tells whether st shows a grant t has not reported.
func (h *Hub) newHolder(t *topic, st lease.Status) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return t.newGrantLocked(st)
}

// apply tells t's streams what a read found, and returns the kind of
// change it was ("" for none).
func (h *Hub) apply(t *topic, st lease.Status, err error, announced bool) Kind {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, changed := t.next(st, err, announced)
	if !changed {
		return ""
	}
	for s := range t.streams {
		if !s.send(c) {
			h.dropLocked(t, s) // too far behind: its reconnect starts afresh
		}
	}
	return c.Kind
}

// topic is one watched name.
type topic struct {
	name    string
	streams map[*stream]struct{}
	wake    chan struct{} // 1-buffered
	stop    chan struct{} // closed when the last stream leaves

	// guarded by the Hub's lock
	known       bool  // a read succeeded since the start or the last failure
	unavailable bool  // the last read failed
	err         error // its error
	last        lease.Status
	since       time.Time
}

func newTopic(name string) *topic {
	return &topic{name: name, streams: make(map[*stream]struct{}), wake: make(chan struct{}, 1), stop: make(chan struct{})}
}

// pause waits d, or less if t stops (false).
func (t *topic) pause(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-t.stop:
		return false
	}
}

func (t *topic) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// newGrantLocked tells whether st shows a holder other than the last one
// read (or the first). The caller holds the Hub's lock.
func (t *topic) newGrantLocked(st lease.Status) bool {
	return st.Held && (!t.known || !t.last.Held || t.last.Grant != st.Grant)
}

func (t *topic) stateChange() Change {
	return Change{Kind: KindState, Status: t.last, Since: t.since}
}

// next is the change a read makes, if any. The caller holds the Hub's lock.
func (t *topic) next(st lease.Status, err error, announced bool) (Change, bool) {
	if err != nil {
		t.known, t.err = false, err
		if t.unavailable {
			return Change{}, false
		}
		t.unavailable = true
		return Change{Kind: KindUnavailable, Err: err}, true
	}
	prev, wasKnown, newHolder := t.last, t.known, t.newGrantLocked(st)
	t.known, t.unavailable, t.last = true, false, st
	switch {
	case newHolder:
		t.since = time.Now()
	case !st.Held:
		t.since = time.Time{}
	}
	switch {
	case !wasKnown:
		return t.stateChange(), true
	case newHolder || st.Held && st.Fence != prev.Fence:
		// The same grant with a new fence was read between its two rounds
		// (fence.go in package redlock): its fence is news too.
		return Change{Kind: KindAcquired, Status: st, Since: t.since}, true
	case prev.Held && !st.Held:
		reason := ReasonExpired
		if announced {
			reason = ReasonReleased
		}
		return Change{Kind: KindReleased, Status: st, Reason: reason}, true
	}
	return Change{}, false
}

// stream is one watcher.
type stream struct{ ch chan Change }

// send delivers c unless the reader is too far behind.
func (s *stream) send(c Change) bool {
	select {
	case s.ch <- c:
		return true
	default:
		return false
	}
}
