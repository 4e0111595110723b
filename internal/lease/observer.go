package lease

import "time"

// Outcome is how an acquisition ended, as a small fixed set for metrics.
type Outcome string

// Acquisition outcomes.
const (
	OutcomeAcquired Outcome = "acquired"
	OutcomeHeld     Outcome = "held"
	OutcomeNoQuorum Outcome = "no_quorum"
	OutcomeInvalid  Outcome = "invalid"
	OutcomeError    Outcome = "error"
)

// EndReason is why a lease ended.
type EndReason string

// Lease end reasons.
const (
	EndReleased EndReason = "released" // the caller released it
	EndExpired  EndReason = "expired"  // the caller stopped extending
	EndLost     EndReason = "lost"     // a renewal found the lock taken, or no quorum before the validity ran out
	EndShutdown EndReason = "shutdown" // the sidecar is stopping
	EndMaxHold  EndReason = "max_hold" // the hold reached its cap
)

// Observer learns what the Manager does, for metrics. Its methods are
// called synchronously and must be cheap. Lock names are never passed: they
// are unbounded and must not become metric labels.
type Observer interface {
	Acquisition(outcome Outcome, elapsed time.Duration)
	// Waited is called for acquisitions that asked to wait, with the time
	// spent in the queue and at its head.
	Waited(outcome Outcome, elapsed time.Duration)
	Wakeup(source WakeSource)
	// Renewal is called for every renewal round of a lease, the renewer's
	// or a heartbeat's, with whether the masters granted it; not for a
	// heartbeat's round cut short by its caller's context.
	Renewal(ok bool)
	Ended(reason EndReason)
}

type nopObserver struct{}

func (nopObserver) Acquisition(Outcome, time.Duration) {}
func (nopObserver) Waited(Outcome, time.Duration)      {}
func (nopObserver) Wakeup(WakeSource)                  {}
func (nopObserver) Renewal(bool)                       {}
func (nopObserver) Ended(EndReason)                    {}
