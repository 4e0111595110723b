package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

// manualTimer is an admission timer the test fires itself: the gate's
// verdicts are then about order, not about how fast the machine is.
type manualTimer struct {
	fire    chan time.Time
	started chan time.Duration
}

func newManualTimer() *manualTimer {
	return &manualTimer{fire: make(chan time.Time, 1), started: make(chan time.Duration, 16)}
}

func (m *manualTimer) after(d time.Duration) (<-chan time.Time, func() bool) {
	m.started <- d
	return m.fire, func() bool { return true }
}

func gateWithTimer(places int, wait time.Duration) (*admission, *manualTimer) {
	a := newAdmission(places, wait)
	mt := newManualTimer()
	a.after = mt.after
	return a, mt
}

func TestAdmissionAdmitsUpToItsPlacesAtOnce(t *testing.T) {
	a, mt := gateWithTimer(2, time.Second)
	for range 2 {
		if _, err := a.enter(context.Background(), nil); err != nil {
			t.Fatalf("enter with a place free: %v", err)
		}
	}
	if len(mt.started) != 0 {
		t.Fatal("an admission with a free place started a wait")
	}
}

func TestAdmissionRefusesAsOverloadedWhenNoPlaceFreesInTime(t *testing.T) {
	a, mt := gateWithTimer(1, 200*time.Millisecond)
	if _, err := a.enter(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := a.enter(context.Background(), nil); errc <- err }()
	if d := <-mt.started; d != 200*time.Millisecond {
		t.Fatalf("waited %v, want the admission wait", d)
	}
	mt.fire <- time.Time{}
	err := <-errc
	var ov *OverloadedError
	if !errors.As(err, &ov) || !errors.Is(err, ErrOverloaded) || errors.Is(err, ErrNoQuorum) {
		t.Fatalf("refusal %v: want an *OverloadedError that is not no quorum", err)
	}
	if ov.RetryAfter < 100*time.Millisecond || ov.RetryAfter > 200*time.Millisecond {
		t.Fatalf("retry hint %v, want within [wait/2, wait]", ov.RetryAfter)
	}
	if outcomeOf(err) != OutcomeOverloaded {
		t.Fatalf("outcome %q, want %q", outcomeOf(err), OutcomeOverloaded)
	}
}

func TestAdmissionLetsAWaiterInWhenAPlaceFrees(t *testing.T) {
	a, mt := gateWithTimer(1, time.Second)
	leave, err := a.enter(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { _, err := a.enter(context.Background(), nil); errc <- err }()
	<-mt.started
	leave()
	if err := <-errc; err != nil {
		t.Fatalf("a waiter was refused although a place freed before its wait ended: %v", err)
	}
}

func TestAdmissionWaitEndsWithTheCallerOrTheManager(t *testing.T) {
	a, mt := gateWithTimer(1, time.Second)
	if _, err := a.enter(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := a.enter(ctx, nil); errc <- err }()
	<-mt.started
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a departed caller got %v", err)
	}
	stopping := make(chan struct{})
	go func() { _, err := a.enter(context.Background(), stopping); errc <- err }()
	<-mt.started
	close(stopping)
	if err := <-errc; !errors.Is(err, ErrShuttingDown) {
		t.Fatalf("a caller at shutdown got %v", err)
	}
}

func TestAdmissionConfigDefaultsAndBounds(t *testing.T) {
	c := Config{}.withAdmissionDefaults()
	if c.MaxAcquireRounds != DefaultMaxAcquireRounds || c.AdmissionWait != DefaultAdmissionWait {
		t.Fatalf("defaults %d %v", c.MaxAcquireRounds, c.AdmissionWait)
	}
	for _, bad := range []Config{{MaxAcquireRounds: -1}, {AdmissionWait: -time.Second}, {AdmissionWait: MaxAdmissionWait + 1}} {
		if bad.validateAdmission() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
