package sim

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/internal/lease"
)

// The history: everything callers saw (on the virtual clock, which every
// actor shares), every change of a lock key on a master, the faults and
// the health verdicts. The checker (check_test.go) judges it afterwards.

const keyPrefix = "sidelock:"

// request is one Manager.Acquire call. Its owner label is unique
// ("s1c2n17": sidecar slot 1, caller 2, its 17th acquire), so the values
// on the masters ("<random>:<owner>") map back to it.
type request struct {
	owner   string
	name    string
	sidecar string
	slot    int
	req     lease.Request
	start   time.Time
	end     time.Time
	err     error
	g       *grant
}

// kind is what a request asks for; each is served by its own facade of
// the lease Manager (client.go) and judged by its own checks.
type kind string

const (
	kindLock      kind = "lock"
	kindSemaphore kind = "semaphore"
	kindReader    kind = "reader"
	kindWriter    kind = "writer"
	kindSet       kind = "set"
)

func kindOf(q lease.Request) kind {
	switch {
	case q.Permits > 0:
		return kindSemaphore
	case q.Mode == lease.ModeShared:
		return kindReader
	case q.Mode == lease.ModeExclusive:
		return kindWriter
	case strings.Contains(q.Name, ","):
		return kindSet
	}
	return kindLock
}

func (q *request) kind() kind { return kindOf(q.req) }

// subject names a request's lines in the history: the lock "n1", the
// semaphore "n1#", the read/write lock "n1#rw" or the set "n1,n2" (see
// family).
func subject(q lease.Request) string {
	switch kindOf(q) {
	case kindSemaphore:
		return q.Name + "#"
	case kindReader, kindWriter:
		return q.Name + "#rw"
	}
	return q.Name
}

// family is what a line's name (a subject, or a key after the prefix)
// belongs to, so that a trace of a semaphore's slot shows the whole
// semaphore and a trace of a writer shows the readers: a lock "n1", a
// semaphore "n1#" (slots "n1#2"), a read/write lock "n1#rw" (keys "n1#w",
// "n1#r7", "n1#i").
func family(name string) string {
	base, derived, ok := strings.Cut(name, "#")
	switch {
	case !ok:
		return name
	case strings.Trim(derived, "0123456789") == "":
		return base + "#"
	}
	return base + "#rw"
}

// inTrace reports whether a line named line belongs in a trace of name:
// the same family, or a set that has the lock name among its locks.
func inTrace(line, name string) bool {
	if line == "" || family(line) == family(name) {
		return true
	}
	return strings.Contains(line, ",") && slices.Contains(strings.Split(line, ","), name)
}

// promise is one published valid_until.
type promise struct {
	at  time.Time // when the caller (or a List) saw it
	vu  time.Time
	src string
}

// grant is one successful acquire and what followed. A lock set's grant
// has one member grant per lock of the set, each judged as a grant of
// that lock: the set's promises and end are recorded on every member too.
type grant struct {
	r      *request
	answer time.Time
	fence  int64
	slot   int    // the semaphore's slot or the reader's slot (Info.Slot)
	res    string // what it holds on the masters, after the key prefix: "n1", "n1#2", "n1#w", "n1#r7"
	// tenure is the value the masters hold for it (lease.Info.Tenure):
	// its sidecar's hold of the keys, which grants of one lock on one
	// sidecar may share, one after another.
	tenure    string
	members   []*grant
	ttl       time.Duration
	promises  []promise
	expiresAt time.Time // the last LeaseExpiresAt the caller saw
	maxHoldAt time.Time
	lowered   []time.Time // heartbeats that lowered the ttl

	releaseStart, releaseDone time.Time
	releaseErr                error
	// endAt is the first moment the caller knew the lease was over:
	// release returned, an ended event, ErrLeaseGone, or the lapse it
	// chose (its last LeaseExpiresAt); endHow says which.
	endAt     time.Time
	endHow    string
	endReason lease.EndReason // from an ended event, if one came
	lapsing   bool            // the caller stopped heartbeating on purpose
	vanished  bool
}

func (g *grant) name() string  { return g.r.name }
func (g *grant) owner() string { return g.r.owner }

// all is the grant and, for a lock set, its members: whatever the caller
// learns of the set, each of its locks learns too.
func (g *grant) all() []*grant { return append([]*grant{g}, g.members...) }

// member is the set's grant of lock name (nil if the set has none).
func (g *grant) member(name string) *grant {
	for _, m := range g.members {
		if m.name() == name {
			return m
		}
	}
	return nil
}

// latest is the latest valid_until published for the grant.
func (g *grant) latest() promise {
	var best promise
	for _, p := range g.promises {
		if p.vu.After(best.vu) {
			best = p
		}
	}
	return best
}

// keyEvent is one change of a lock key on a master.
type keyEvent struct {
	master      int
	key         string
	prev, value string
	op          string
	sidecar     string
	send, at    time.Time
	masterClock time.Time
}

func (e keyEvent) created() bool { return e.prev == "" && e.value != "" }
func (e keyEvent) deleted() bool { return e.prev != "" && e.value == "" }

// fault is one injected fault, from start to end (zero while on).
type fault struct {
	kind   string // kill, restart-empty, restart-durable, pause, slow, partition, cut, sigterm
	target string
	start  time.Time
	end    time.Time
}

// interval is a span of virtual time.
type interval struct{ from, to time.Time }

// entry is one line of the history, for traces.
type entry struct {
	at   time.Time
	name string // the lock name, "" for run-wide lines
	text string
}

type recorder struct {
	t0 time.Time

	mu         sync.Mutex
	entries    []entry
	requests   []*request
	byOwner    map[string]*request
	keys       []keyEvent
	faults     []*fault
	ineligible map[string]*interval // open "some master not eligible" span per sidecar
	disturbed  []interval           // closed ones
	stats      map[string]int
}

func newRecorder(t0 time.Time) *recorder {
	return &recorder{t0: t0, byOwner: map[string]*request{}, ineligible: map[string]*interval{}, stats: map[string]int{}}
}

func (r *recorder) addLocked(at time.Time, name, format string, args ...any) {
	r.entries = append(r.entries, entry{at: at, name: name, text: fmt.Sprintf(format, args...)})
}

func (r *recorder) add(name, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.addLocked(time.Now(), name, format, args...)
}

func (r *recorder) count(stat string) {
	r.mu.Lock()
	r.stats[stat]++
	r.mu.Unlock()
}

func (r *recorder) at(t time.Time) string { return fmtAt(r.t0, t) }

func nameOfKey(key string) string { return strings.TrimPrefix(key, keyPrefix) }

func ownerOfValue(v string) string {
	_, owner, _ := strings.Cut(v, ":")
	return owner
}

func describeReq(q lease.Request) string {
	s := fmt.Sprintf("ttl %v wait %v", q.TTL, q.Wait)
	switch kindOf(q) {
	case kindSemaphore:
		s = fmt.Sprintf("semaphore of %d permits, %s", q.Permits, s)
	case kindReader, kindWriter:
		s = fmt.Sprintf("read/write lock, %s, %s", q.Mode, s)
	case kindSet:
		s = "lock set, " + s
	}
	if q.Hold {
		s += " hold"
	}
	if q.MaxHold > 0 {
		s += fmt.Sprintf(" max_hold %v", q.MaxHold)
	}
	return s
}

func (r *recorder) acquireStart(sidecar string, slot int, q lease.Request) *request {
	r.mu.Lock()
	defer r.mu.Unlock()
	rq := &request{owner: q.Owner, name: q.Name, sidecar: sidecar, slot: slot, req: q, start: time.Now()}
	r.requests = append(r.requests, rq)
	r.byOwner[q.Owner] = rq
	r.addLocked(rq.start, subject(q), "%s via %s: acquire (%s)", q.Owner, sidecar, describeReq(q))
	return rq
}

// line adds a line of the grant's history under its request's subject.
func (r *recorder) line(g *grant, at time.Time, format string, args ...any) {
	r.addLocked(at, subject(g.r.req), format, args...)
}

func (r *recorder) acquireDone(rq *request, info lease.Info, err error) *grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	rq.end, rq.err = now, err
	if err != nil {
		r.addLocked(now, subject(rq.req), "%s: acquire failed after %v: %v", rq.owner, now.Sub(rq.start), err)
		return nil
	}
	g := &grant{r: rq, answer: now, fence: info.Fence, slot: info.Slot, res: resourceOf(rq.req, info.Slot),
		ttl: info.TTL, expiresAt: info.LeaseExpiresAt, maxHoldAt: info.MaxHoldAt, tenure: info.Tenure}
	g.promises = append(g.promises, promise{at: now, vu: info.ValidUntil, src: "acquire"})
	rq.g = g
	what := fmt.Sprintf("fence %d", info.Fence)
	switch rq.kind() {
	case kindSemaphore:
		what = fmt.Sprintf("slot %d of %d, fence %d", info.Slot, info.Permits, info.Fence)
	case kindReader:
		what = fmt.Sprintf("reader slot %d", info.Slot)
	case kindWriter:
		what = fmt.Sprintf("writer, fence %d", info.Fence)
	case kindSet:
		what = r.grantMembersLocked(g, info)
	}
	r.line(g, now, "%s: GRANTED %s valid_until %s lease_expires %s max_hold_at %s",
		rq.owner, what, r.at(info.ValidUntil), r.at(info.LeaseExpiresAt), r.at(info.MaxHoldAt))
	return g
}

// resourceOf is what a grant holds on the masters, after the key prefix
// (the lease package's target.resource).
func resourceOf(q lease.Request, slot int) string {
	switch kindOf(q) {
	case kindSemaphore:
		return fmt.Sprintf("%s#%d", q.Name, slot)
	case kindReader:
		return fmt.Sprintf("%s#r%d", q.Name, slot)
	case kindWriter:
		return q.Name + "#w"
	}
	return q.Name
}

// grantMembersLocked gives a set's grant one member grant per lock, each
// a grant of that lock with its own fence, promised the set's
// valid_until and its own (both are published); it describes them.
func (r *recorder) grantMembersLocked(g *grant, info lease.Info) string {
	var parts []string
	for _, in := range info.Locks {
		q := *g.r
		q.name, q.req.Name = in.Name, in.Name
		m := &grant{r: &q, answer: g.answer, fence: in.Fence, res: in.Name, ttl: in.TTL,
			expiresAt: in.LeaseExpiresAt, maxHoldAt: in.MaxHoldAt, tenure: in.Tenure}
		q.g = m
		m.promises = append(slices.Clone(g.promises), promise{at: g.answer, vu: in.ValidUntil, src: memberOwn + "acquire"})
		g.members = append(g.members, m)
		parts = append(parts, fmt.Sprintf("%s fence %d valid_until %s", in.Name, in.Fence, r.at(in.ValidUntil)))
	}
	return "locks [" + strings.Join(parts, "; ") + "]"
}

// memberOwn marks the promises of one lock of a set that are its own
// (Info.Locks, List), not the set's.
const memberOwn = "the lock's own, "

func (r *recorder) extendDone(g *grant, ttl time.Duration, start time.Time, info lease.Info, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	asked := "same ttl"
	if ttl != 0 {
		asked = "ttl " + ttl.String()
		if ttl < g.ttl {
			asked += fmt.Sprintf(" (LOWER than %v)", g.ttl)
		}
	}
	if err != nil {
		r.line(g, now, "%s: extend (%s) failed: %v", g.owner(), asked, err)
		r.learnEndLocked(g, now, "extend answered "+shortErr(err))
		return
	}
	for _, x := range g.all() {
		if ttl != 0 && ttl < x.ttl {
			x.lowered = append(x.lowered, start)
		}
		if ttl != 0 {
			x.ttl = ttl
		}
		x.expiresAt = info.LeaseExpiresAt
		x.promises = append(x.promises, promise{at: now, vu: info.ValidUntil, src: "extend"})
	}
	for _, in := range info.Locks {
		if m := g.member(in.Name); m != nil {
			m.expiresAt = in.LeaseExpiresAt
			m.promises = append(m.promises, promise{at: now, vu: in.ValidUntil, src: memberOwn + "extend"})
		}
	}
	r.line(g, now, "%s: extended (%s) valid_until %s lease_expires %s", g.owner(), asked, r.at(info.ValidUntil), r.at(info.LeaseExpiresAt))
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

func (r *recorder) learnEndLocked(g *grant, at time.Time, how string) {
	for _, x := range g.all() {
		if x.endAt.IsZero() || at.Before(x.endAt) {
			x.endAt, x.endHow = at, how
		}
	}
}

func (r *recorder) releaseStart(g *grant, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, x := range g.all() {
		x.releaseStart = now
	}
	r.line(g, now, "%s: release%s", g.owner(), why)
}

func (r *recorder) releaseDone(g *grant, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, x := range g.all() {
		x.releaseDone, x.releaseErr = now, err
	}
	if err != nil {
		r.line(g, now, "%s: release answered %v", g.owner(), err)
		r.learnEndLocked(g, now, "release answered "+shortErr(err))
		return
	}
	r.line(g, now, "%s: released", g.owner())
	r.learnEndLocked(g, now, "release returned")
}

func (r *recorder) event(g *grant, e lease.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, x := range g.all() {
		if !e.ValidUntil.IsZero() {
			x.promises = append(x.promises, promise{at: now, vu: e.ValidUntil, src: string(e.Kind) + " event"})
		}
		if e.Kind == lease.EventEnded {
			x.endReason = e.Reason
		}
	}
	if e.Kind == lease.EventEnded {
		r.line(g, now, "%s: event ended (%s)", g.owner(), e.Reason)
		r.learnEndLocked(g, now, "ended event ("+string(e.Reason)+")")
		return
	}
	r.line(g, now, "%s: event %s valid_until %s", g.owner(), e.Kind, r.at(e.ValidUntil))
}

// listed records what a List on a sidecar showed: a lock of a set is
// listed as a lock, with its own valid_until.
func (r *recorder) listed(sidecar string, infos []lease.Info) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, in := range infos {
		rq, ok := r.byOwner[in.Owner]
		if !ok || rq.g == nil {
			continue
		}
		g, src := rq.g, "list"
		if rq.kind() == kindSet {
			if g, src = rq.g.member(in.Name), memberOwn+"list"; g == nil {
				continue
			}
		}
		if last := g.latest(); in.ValidUntil.After(last.vu) {
			r.line(rq.g, now, "%s: List on %s shows valid_until %s%s", g.owner(), sidecar, r.at(in.ValidUntil), ofLock(rq, in.Name))
		}
		g.promises = append(g.promises, promise{at: now, vu: in.ValidUntil, src: src})
	}
}

// ofLock names the lock of a set a line is about.
func ofLock(q *request, name string) string {
	if q.kind() != kindSet {
		return ""
	}
	return " for its lock " + name
}

func (r *recorder) stopped(g *grant, vanished bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, x := range g.all() {
		x.lapsing, x.vanished = true, vanished
	}
	lapse := latest(g.expiresAt, g.latest().vu)
	what := "stops heartbeating, lets the lease lapse at " + r.at(lapse)
	if vanished {
		what = "vanishes (no more calls, no events), lease lapses at " + r.at(lapse)
	}
	if g.r.req.Hold {
		what += " (hold: lives until released)"
	}
	r.line(g, now, "%s: %s", g.owner(), what)
}

func (r *recorder) keyChange(e keyEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, e)
	name := nameOfKey(e.key)
	switch {
	case e.created():
		r.addLocked(e.at, name, "  m%d: key CREATED by %s of %s (%s, sent %s)", e.master+1, e.op, ownerOfValue(e.value), e.sidecar, r.at(e.send))
	case e.deleted():
		r.addLocked(e.at, name, "  m%d: key of %s deleted by %s (%s, sent %s)", e.master+1, ownerOfValue(e.prev), e.op, e.sidecar, r.at(e.send))
	default:
		r.addLocked(e.at, name, "  m%d: key %s -> %s by %s", e.master+1, ownerOfValue(e.prev), ownerOfValue(e.value), e.op)
	}
}

func (r *recorder) faultStart(kind, target string) *fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &fault{kind: kind, target: target, start: time.Now()}
	r.faults = append(r.faults, f)
	r.addLocked(f.start, "", "FAULT %s %s begins", kind, target)
	return f
}

func (r *recorder) faultEnd(f *fault, what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f.end = time.Now()
	r.addLocked(f.end, "", "FAULT %s %s ends%s", f.kind, f.target, what)
}

// sidecarUp and sidecarDown bracket a sidecar's life; until its first
// health verdict counts every master, it is disturbed.
func (r *recorder) sidecarUp(sidecar string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.ineligible[sidecar] = &interval{from: now}
	r.addLocked(now, "", "sidecar %s starting", sidecar)
}

func (r *recorder) sidecarDown(sidecar string, held int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if iv, ok := r.ineligible[sidecar]; ok {
		iv.to = now
		r.disturbed = append(r.disturbed, *iv)
		delete(r.ineligible, sidecar)
	}
	r.addLocked(now, "", "sidecar %s closed (%d leases released, err %v)", sidecar, held, err)
}

// healthChanged is the sidecar's health OnChange.
func (r *recorder) healthChanged(sidecar string, prev, cur health.Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	var out []string
	all := true
	for i, n := range cur.Nodes {
		if !n.Eligible {
			all = false
		}
		if prev.Nodes[i].Up != n.Up || prev.Nodes[i].Eligible != n.Eligible {
			s := fmt.Sprintf("%s up=%v eligible=%v", n.Addr, n.Up, n.Eligible)
			if n.Problem != "" {
				s += " (" + n.Problem + ")"
			}
			out = append(out, s)
		}
	}
	r.addLocked(now, "", "health %s: %s", sidecar, strings.Join(out, "; "))
	iv, open := r.ineligible[sidecar]
	switch {
	case all && open:
		iv.to = now
		r.disturbed = append(r.disturbed, *iv)
		delete(r.ineligible, sidecar)
	case !all && !open:
		r.ineligible[sidecar] = &interval{from: now}
	}
}

// close ends the open intervals at the end of the run.
func (r *recorder) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, iv := range r.ineligible {
		iv.to = now
		r.disturbed = append(r.disturbed, *iv)
	}
	clear(r.ineligible)
	for _, f := range r.faults {
		if f.end.IsZero() {
			f.end = now
		}
	}
}

// lines returns the history of name (and the run-wide lines) within
// [from, to], at most max of them, the rest elided in the middle.
func (r *recorder) lines(name string, from, to time.Time, max int, keyLines bool) []string {
	var sel []entry
	for _, e := range r.entries {
		if e.at.Before(from) || e.at.After(to) {
			continue
		}
		if !inTrace(e.name, name) {
			continue
		}
		if !keyLines && strings.HasPrefix(e.text, "  m") {
			continue
		}
		sel = append(sel, e)
	}
	slices.SortStableFunc(sel, func(a, b entry) int { return a.at.Compare(b.at) })
	var out []string
	for i, e := range sel {
		if len(sel) > max && i == max/2 {
			out = append(out, fmt.Sprintf("      … %d lines elided …", len(sel)-max))
		}
		if len(sel) > max && i >= max/2 && i < len(sel)-max/2 {
			continue
		}
		out = append(out, fmt.Sprintf("    %s %s", r.at(e.at), e.text))
	}
	return out
}

// logHandler records a sidecar's warnings (and the guards' findings) in
// the history.
type logHandler struct {
	r       *recorder
	sidecar string
	attrs   []slog.Attr
}

func (h *logHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *logHandler) Handle(_ context.Context, rec slog.Record) error {
	name := ""
	var parts []string
	add := func(a slog.Attr) bool {
		if a.Key == "name" {
			name = a.Value.String()
		}
		parts = append(parts, a.Key+"="+a.Value.String())
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	rec.Attrs(add)
	h.r.add(name, "log %s %s: %s %s", h.sidecar, rec.Level, rec.Message, strings.Join(parts, " "))
	return nil
}

func (h *logHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logHandler{r: h.r, sidecar: h.sidecar, attrs: append(slices.Clip(h.attrs), attrs...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }
