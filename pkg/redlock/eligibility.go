package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Which masters count towards a quorum.
//
// The safety guards (package health) judge every master in rounds and keep
// out of every quorum one that may have come back empty. A judgement holds
// only for the connections it was made over: a restarted server breaks
// every connection to it, so an answer that arrived over a connection
// opened since the judgement may come from a server that nobody has judged
// (Kleppmann's restarted-master scenario). Such answers do not count until
// a round has judged the node again; nodes that tell when they open a
// connection (ConnectionNotifier) ask for that round at once.

// Eligibility is a guard's verdict on one master.
type Eligibility struct {
	// Eligible is whether the master's answers count towards a quorum.
	Eligible bool
	// JudgedAt is the master's ConnectionsOpened count when it was judged:
	// its answers count only while no connection has been opened since.
	// Ignored for nodes that do not count connections.
	JudgedAt uint64
	// AnyConnection drops that condition, for masters a restart cannot
	// empty (durable ones) or when no guard keeps restarted masters out.
	AnyConnection bool
	// RunID is the server the verdict was made of, when known: answers
	// over connections opened since JudgedAt count too when the node
	// (a ServerTracker) saw each of them reach this very server, which
	// cannot have restarted behind them.
	RunID string
	// Why says why an ineligible master does not count, and Until when it
	// is expected to count again (zero when unknown), for error messages
	// and retry hints.
	Why   string
	Until time.Time
}

// ConnectionNotifier is implemented by nodes that can tell when they open
// a connection, so that a new connection is judged at once instead of at
// the next scheduled round.
type ConnectionNotifier interface {
	// NotifyConnections calls f, which must not block, after every new
	// connection is counted (replacing any earlier f).
	NotifyConnections(f func())
}

// SetEligibility records the guards' verdict on node i (in configuration
// order). An ineligible node is still written to and released on, but its
// answers are treated as failures: the safety guards use this to keep a
// master that restarted empty out of every majority until the keys it
// forgot would have lapsed anyway.
func (l *Locker) SetEligibility(i int, e Eligibility) { l.eligible[i].Store(&e) }

// Eligibility is the verdict last recorded on node i; before any, every
// answer of the node counts (eligible over any connection).
func (l *Locker) Eligibility(i int) Eligibility {
	if e := l.eligible[i].Load(); e != nil {
		return *e
	}
	return Eligibility{Eligible: true, AnyConnection: true}
}

// counted reports whether node i's answer, just received, counts towards
// a quorum, and if not, the error that takes its place.
func (l *Locker) counted(i int) error {
	e := l.eligible[i].Load()
	if e == nil {
		return nil // no guard: every answer counts
	}
	if !e.Eligible {
		return &IneligibleError{Why: e.Why, Until: e.Until}
	}
	if c, ok := l.nodes[i].(ConnectionCounter); ok && !e.AnyConnection && c.ConnectionsOpened() != e.JudgedAt && !sameServer(c, e) {
		return errUnjudgedConnection
	}
	return nil
}

// sameServer reports whether every connection node c opened since e was
// judged reached the server e judged.
func sameServer(c ConnectionCounter, e *Eligibility) bool {
	t, ok := c.(ServerTracker)
	return ok && e.RunID != "" && t.ReachedSince(e.JudgedAt, e.RunID)
}

// IneligibleError takes the place of the answer of a master that a safety
// guard keeps out of the quorum.
type IneligibleError struct {
	Why   string
	Until time.Time // when it is expected to count again; zero: unknown
}

func (e *IneligibleError) Error() string {
	if e.Why == "" {
		return "master is not eligible for the quorum (safety guard)"
	}
	return "master is not eligible for the quorum: " + e.Why
}

// errUnjudgedConnection takes the place of an answer that came over a
// connection opened since the master was last judged.
var errUnjudgedConnection = errors.New("master answered over a new connection that no health round has judged yet (it may have restarted)")

// QuorumError is how a round that missed its majority fails; it matches
// ErrNoQuorum.
type QuorumError struct {
	msg string
	// RetryAfter is when enough masters kept out by a safety guard are
	// expected to count again for a majority; 0 when unknown, or when the
	// missing masters are simply not answering.
	RetryAfter time.Duration
}

func (e *QuorumError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrNoQuorum) true.
func (e *QuorumError) Is(target error) bool { return target == ErrNoQuorum }

// noQuorum explains a round of replies in which only t.ok of the needed
// masters accepted, naming the masters held out by the guards and when
// enough of them return; or reports local overload when the calls this
// sidecar could not send in time would have made up the difference.
func (l *Locker) noQuorum(what string, replies []reply, t counts) error {
	if err := l.overloaded(replies, t.ok); err != nil {
		return err
	}
	msg := fmt.Sprintf("no quorum: %d of %d masters %s, %d needed", t.ok, t.total, what, l.quorum)
	var untils []time.Time
	var whys []string
	unjudged := 0
	for _, r := range replies {
		var ie *IneligibleError
		switch {
		case errors.As(r.err, &ie):
			untils = append(untils, ie.Until)
			if !slices.Contains(whys, ie.Why) {
				whys = append(whys, ie.Why)
			}
		case errors.Is(r.err, errUnjudgedConnection):
			unjudged++
		}
	}
	if t.missing > 0 {
		msg += fmt.Sprintf("; %d no longer had the key", t.missing)
	}
	if unjudged > 0 {
		msg += fmt.Sprintf("; %d answered over a new connection not yet judged by a health round", unjudged)
	}
	e := &QuorumError{}
	if len(untils) > 0 {
		msg += fmt.Sprintf("; %d kept out by a safety guard (%s)", len(untils), strings.Join(whys, "; "))
		e.RetryAfter = l.backIn(untils, l.quorum-t.ok)
		if e.RetryAfter > 0 {
			msg += fmt.Sprintf(", enough to count again in %v", e.RetryAfter.Round(time.Millisecond))
		}
	}
	e.msg = msg
	return e
}

// backIn is how long until need of the held-out masters count again, when
// all of those needed have a known return.
func (l *Locker) backIn(untils []time.Time, need int) time.Duration {
	known := slices.DeleteFunc(slices.Clone(untils), time.Time.IsZero)
	if need <= 0 || len(known) < need {
		return 0
	}
	slices.SortFunc(known, time.Time.Compare)
	return max(0, known[need-1].Sub(l.now()))
}
