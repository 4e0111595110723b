package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Lock sets: several locks taken all-or-nothing under one lease.
//
// A set is named by its locks' names joined by "," (which lock names
// cannot contain): "a,b,c". It is taken one lock at a time in one
// canonical order (the names sorted bytewise), each as an ordinary lock
// of its name — same keys, queues, fences and watchers — sharing one
// token. The set is granted once every lock is; if one cannot be had
// (held with no wait left, no quorum, the caller gone) those already
// taken are released, so a set is held whole or not at all.
//
// Why no deadlock: every caller takes the names of its sets in the same
// order, so a caller waiting for a name holds only names before it, and
// no cycle of waits can form (the classic ordered-locking argument; it
// assumes the caller holds no other lock of these names meanwhile, such as
// a single lock it took itself).
//
// Once granted, the locks live and die together: when one ends, for any
// reason (released, expired, lost, max_hold, shutdown), the others end
// with the same reason — a release at once, other ends once each lock's
// own published valid_until has passed (those are promises too). The
// set's valid_until is the earliest of its locks': until then every one
// of them is held by a majority. A lock of
// a set is visible as a lock (GET /locks/{name}, watches); its token is the
// set's, so extending or releasing it through the lock API extends it, or
// ends the whole set.

// MaxSetLocks bounds the locks of one set: a set costs one round per lock
// to take, and one lease each.
const MaxSetLocks = 16

// setSeparator joins the names of a set. Lock names cannot contain it.
const setSeparator = ","

// ErrSetChanged means a lock of a set ended while the set was being taken
// (lost, or taken back by the caller through the lock API): the rest were
// released.
var ErrSetChanged = errors.New("a lock of the set ended while the set was being taken")

// SetNames splits a set's name into its lock names in canonical order,
// refusing invalid, repeated or too many names.
func SetNames(set string) ([]string, error) {
	names := strings.Split(set, setSeparator)
	if len(names) > MaxSetLocks {
		return nil, fmt.Errorf("%w: a lock set has at most %d names (it has %d)", ErrInvalid, MaxSetLocks, len(names))
	}
	for _, n := range names {
		if err := ValidateName(n); err != nil {
			return nil, fmt.Errorf("%w (in the set %q)", err, truncateName(set))
		}
	}
	slices.Sort(names)
	if i := firstRepeat(names); i >= 0 {
		return nil, fmt.Errorf("%w: the lock set names %q twice", ErrInvalid, names[i])
	}
	return names, nil
}

func firstRepeat(sorted []string) int {
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return i
		}
	}
	return -1
}

func truncateName(s string) string {
	const most = 64
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// lockSet ties the leases of one set together.
type lockSet struct {
	leases []*lease
}

// LockSets is the Manager's API for lock sets.
type LockSets struct{ m *Manager }

// LockSets returns the API of the Manager's lock sets.
func (m *Manager) LockSets() LockSets { return LockSets{m: m} }

// Acquire takes every lock of the set req.Name in canonical order, each as
// Manager.Acquire would with the set's one token, waiting for all of them
// within req.Wait in all; on any failure it releases those it took and
// answers that failure.
func (s LockSets) Acquire(ctx context.Context, req Request) (Info, error) {
	req.kind = KindLock
	names, err := SetNames(req.Name)
	if err != nil {
		s.m.obs.Acquisition(OutcomeInvalid, 0)
		return Info{}, err
	}
	if err := checkKindFields(req, "lock set"); err != nil {
		s.m.obs.Acquisition(OutcomeInvalid, 0)
		return Info{}, err
	}
	if req.token, err = newSecret(); err != nil {
		return Info{}, err
	}
	deadline := time.Now().Add(req.Wait)
	infos := make([]Info, 0, len(names))
	for _, name := range names {
		one := req
		one.Name = name
		one.Wait = max(0, time.Until(deadline))
		info, err := s.m.Acquire(ctx, one)
		if err != nil {
			s.releaseTaken(infos, req.token)
			return Info{}, err
		}
		infos = append(infos, info)
	}
	if err := s.m.bindSet(infos); err != nil {
		s.releaseTaken(infos, req.token)
		return Info{}, err
	}
	return setInfo(names, infos), nil
}

// releaseTaken releases the locks a failed set acquisition took: those
// granted with its token. A lock an Idempotency-Key replayed (held before,
// under another token) is not its to release.
//
// Unlike a caller's release, it waits for the masters: a refused set
// leaves nothing held when it is answered.
func (s LockSets) releaseTaken(infos []Info, token string) {
	for _, in := range infos {
		if in.Token == token {
			_ = s.m.Release(context.Background(), in.Name, in.Token)
			s.m.awaitLetGo(in.Name)
		}
	}
}

// bindSet ties the granted leases of a set together, so that the end of
// one ends the others. It fails when one has ended already, or when they
// do not share one token (an idempotent replay that found only some of
// them).
func (m *Manager) bindSet(infos []Info) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := &lockSet{}
	for _, in := range infos {
		l, ok := m.leases[in.Name]
		if !ok || !l.hasToken(in.Token) || in.Token != infos[0].Token || !sameSet(l.pub.set, infos) {
			return fmt.Errorf("%w: %s", ErrSetChanged, in.Name)
		}
		set.leases = append(set.leases, l)
	}
	for _, l := range set.leases {
		l.pub.set = set
	}
	return nil
}

// sameSet tells whether a lease's set (nil: none yet) is the set of the
// locks infos names, so that a replay binds the locks of one set again
// and never takes a lock of another set.
func sameSet(set *lockSet, infos []Info) bool {
	if set == nil {
		return true
	}
	if len(set.leases) != len(infos) {
		return false
	}
	for i, l := range set.leases {
		if l.name != infos[i].Name {
			return false
		}
	}
	return true
}

// endSiblings ends the other leases of l's set with l's end reason. Each
// ends on its own goroutine: it waits for its lease's mutex, which a
// sibling ending at the same moment may hold while it ends this one.
func (l *lease) endSiblings(reason EndReason, cause error) {
	l.m.mu.Lock()
	set := l.pub.set
	l.m.mu.Unlock()
	if set == nil {
		return
	}
	cause = fmt.Errorf("another lock of its set ended (%s): %w", reason, errors.Join(cause, errSetEnded))
	for _, sib := range set.leases {
		if sib != l {
			go sib.endWithSet(reason, cause)
		}
	}
}

// freezeSiblings stops the other leases of l's set before l's end is
// told to anyone: from then on nothing renews or repairs their keys (a
// caller told that its set ended sees no key of it written afterwards),
// and they promise nothing later than their latest promise, until which
// their keys stay (endWithSet). It waits for a renewal of theirs in
// flight, as end does for its own.
func (l *lease) freezeSiblings() {
	l.m.mu.Lock()
	set := l.pub.set
	l.m.mu.Unlock()
	if set == nil {
		return
	}
	for _, sib := range set.leases {
		if sib == l {
			continue
		}
		l.m.mu.Lock()
		if sib.pub.endAt.IsZero() {
			sib.pub.endAt = later(time.Now(), sib.pub.promised)
		}
		sib.t.renewSlot = -1
		renewing := sib.t.renewing
		l.m.mu.Unlock()
		if renewing != nil {
			<-renewing
		}
	}
}

// waitsForItsPromise tells whether the lease only waits for its latest
// promise to pass: its set ended, or its caller's lease ran out.
func (l *lease) waitsForItsPromise() bool { return l.ending() || l.callerLeaseOver(time.Now()) }

// ending tells whether the lease's set has ended: it only waits for its
// own promise to pass (endWithSet).
func (l *lease) ending() bool {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	return !l.pub.endAt.IsZero()
}

// endWithSet ends a lease because its set ended. Each lock of a set
// published its own valid_until (in the set's answer and to GET /locks), and
// the set's end does not take those back: unless the caller released the
// set, the lease (and its keys, no longer renewed: freezeSiblings) lives on
// until its own promise has passed, as a lapse does. Close ends it at
// once, leaving the keys to lapse.
func (l *lease) endWithSet(reason EndReason, cause error) {
	if reason != EndReleased {
		l.m.mu.Lock()
		wait := time.Until(l.pub.endAt)
		l.m.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.m.stopping:
				t.Stop()
				return // Close ends every lease
			}
		}
	}
	l.finish(reason, cause)
}

var errSetEnded = errors.New("the set ended")

// setInfo describes a set from its locks' infos: valid until the earliest
// of them, with each lock (and its fence) listed.
func setInfo(names []string, locks []Info) Info {
	in := locks[0]
	in.Name = strings.Join(names, setSeparator)
	in.Fence = 0
	in.Locks = make([]Info, len(locks))
	for i, l := range locks {
		l.Token = ""
		in.Locks[i] = l
		in.ValidUntil = earlier(in.ValidUntil, l.ValidUntil)
		in.LeaseExpiresAt = earlier(in.LeaseExpiresAt, l.LeaseExpiresAt)
		in.AcquiredAt = later(in.AcquiredAt, l.AcquiredAt)
		if !l.MaxHoldAt.IsZero() {
			in.MaxHoldAt = earlierSet(in.MaxHoldAt, l.MaxHoldAt)
		}
	}
	return in
}

// earlierSet is the earlier of two instants, zero meaning none.
func earlierSet(a, b time.Time) time.Time {
	if a.IsZero() {
		return b
	}
	return earlier(a, b)
}

// leasesOf finds the live leases of the set name held with token.
func (s LockSets) leasesOf(name, token string) ([]string, []*lease, error) {
	names, err := SetNames(name)
	if err != nil {
		return nil, nil, err
	}
	find := s.m.findAmong(target{})
	leases := make([]*lease, len(names))
	for i, n := range names {
		if leases[i], err = find(n, token); err != nil {
			return nil, nil, err
		}
	}
	if !s.m.wholeSet(leases) {
		return nil, nil, fmt.Errorf("%w: the names are not those of one lock set held with this token", ErrLeaseGone)
	}
	return names, leases, nil
}

// wholeSet tells whether leases are exactly the locks of one set: a
// heartbeat or release naming only some of them would split the set.
func (m *Manager) wholeSet(leases []*lease) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := leases[0].pub.set
	return set != nil && len(set.leases) == len(leases) && !slices.ContainsFunc(leases, func(l *lease) bool { return l.pub.set != set })
}

// Extend heartbeats every lock of the set, in parallel; it answers the set
// as Manager.Extend answers a lock. A lock found lost ends the whole set.
func (s LockSets) Extend(ctx context.Context, name, token string, ttl time.Duration) (Info, error) {
	if ttl != 0 {
		if err := s.m.checkTTL(ttl); err != nil {
			return Info{}, err
		}
	}
	names, leases, err := s.leasesOf(name, token)
	if err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	infos := make([]Info, len(leases))
	errs := make([]error, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() { infos[i], errs[i] = l.heartbeat(ctx, ttl) })
	}
	wg.Wait()
	if err := firstOf(errs, ErrLeaseGone); err != nil {
		return Info{}, err
	}
	return setInfo(names, infos), nil
}

// firstOf returns the first error matching target, else the first error.
func firstOf(errs []error, target error) error {
	for _, err := range errs {
		if errors.Is(err, target) {
			return err
		}
	}
	return errors.Join(errs...)
}

// Release ends the set: releasing one lock ends the others.
func (s LockSets) Release(ctx context.Context, name, token string) error {
	_, leases, err := s.leasesOf(name, token)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if slices.ContainsFunc(leases, (*lease).waitsForItsPromise) {
		// The set ended, or the caller's lease ran out: as for a lock,
		// 410 is final, and the keys stay until the promises pass.
		return ErrLeaseGone
	}
	var wg sync.WaitGroup
	errs := make([]error, len(leases))
	for i, l := range leases {
		wg.Go(func() { errs[i] = l.release(ctx) })
	}
	wg.Wait()
	for _, err := range errs {
		// ErrLeaseGone: a lock the set's end (another release) ended first.
		if err != nil && !errors.Is(err, ErrLeaseGone) {
			return err
		}
	}
	return nil
}

// SetStatus is what the masters say about the locks of a set.
type SetStatus struct {
	Name  string
	Locks []Status // by name, in canonical order
}

// Inspect reads every lock of the set from the masters, in parallel.
func (s LockSets) Inspect(ctx context.Context, name string) (SetStatus, error) {
	names, err := SetNames(name)
	if err != nil {
		return SetStatus{}, err
	}
	reads := make([]func() (Status, error), len(names))
	for i, n := range names {
		reads[i] = func() (Status, error) { return s.m.inspect(ctx, target{name: n}, 0) }
	}
	locks, err := inspectAll(reads)
	if err != nil {
		return SetStatus{}, err
	}
	return SetStatus{Name: strings.Join(names, setSeparator), Locks: locks}, nil
}

// List returns this sidecar's live sets, by name, without tokens.
func (s LockSets) List() []Info {
	s.m.mu.Lock()
	sets := map[*lockSet]bool{}
	for _, l := range s.m.leases {
		if l.pub.set != nil {
			sets[l.pub.set] = true
		}
	}
	var out []Info
	for set := range sets {
		names := make([]string, len(set.leases))
		infos := make([]Info, len(set.leases))
		for i, l := range set.leases {
			names[i], infos[i] = l.name, l.infoLocked(false)
		}
		out = append(out, setInfo(names, infos))
	}
	s.m.mu.Unlock()
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Watch subscribes to the events of the set: one stream for its locks,
// whose renewed and expiring events carry the set's validity (the
// earliest of its locks'), and whose end is the first lock's end.
func (s LockSets) Watch(name, token string) (<-chan Event, func(), error) {
	names, leases, err := s.leasesOf(name, token)
	if err != nil {
		return nil, nil, err
	}
	valid := make([]time.Time, len(leases))
	for i, l := range leases {
		valid[i] = l.info(false).ValidUntil // promises stand: each is a floor
	}
	subs := make([]<-chan Event, len(names))
	cancels := make([]func(), 0, len(names))
	cancelAll := func() {
		for _, c := range cancels {
			c()
		}
	}
	for i, n := range names {
		ch, cancel, err := s.m.Watch(n, token)
		if err != nil {
			cancelAll()
			return nil, nil, err
		}
		subs[i] = ch
		cancels = append(cancels, cancel)
	}
	out := make(chan Event, eventBuffer)
	go mergeSetEvents(subs, valid, out, cancelAll)
	return out, sync.OnceFunc(cancelAll), nil
}

// setEvent is one lock's event, by the lock's index in its set.
type setEvent struct {
	i int
	e Event
}

// mergeSetEvents forwards the locks' events as the set's until the first
// end (which it forwards, then cancels the others) or until every
// subscription is closed; it closes out last. valid holds each lock's
// latest promise: the set is valid until the earliest of them.
func mergeSetEvents(subs []<-chan Event, valid []time.Time, out chan<- Event, cancelAll func()) {
	in := make(chan setEvent)
	var wg sync.WaitGroup
	for i, ch := range subs {
		wg.Go(func() {
			for e := range ch {
				in <- setEvent{i: i, e: e}
			}
		})
	}
	go func() { wg.Wait(); close(in) }()
	ended := false
	for ev := range in {
		if ended {
			continue // drain: the others' ends after the first
		}
		e := ev.e
		if !e.ValidUntil.IsZero() {
			valid[ev.i] = later(valid[ev.i], e.ValidUntil)
			e.ValidUntil = earliest(valid)
		}
		if e.Kind == EventEnded {
			ended = true
			out <- e
			go cancelAll()
			continue
		}
		if len(out) < cap(out)-1 { // as publish does: the end always has room
			out <- e
		}
	}
	close(out)
}

// earliest is the earliest of the non-zero instants.
func earliest(ts []time.Time) time.Time {
	var e time.Time
	for _, t := range ts {
		if !t.IsZero() {
			e = earlierSet(e, t)
		}
	}
	return e
}
