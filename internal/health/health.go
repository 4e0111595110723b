// Package health tells whether a quorum of masters answers and may be
// counted on: it pings every master in the background, keeps the last
// result for /readyz and the metrics, and enforces Redlock's own safety
// requirements (see guards.go) by deciding which masters count towards a
// quorum. It does not otherwise gate lock operations, which find out for
// themselves within the node timeout.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/sidelock/sidelock/internal/ctxsleep"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/starvation"
)

// NodeState is one master's state after the last round.
type NodeState struct {
	Addr      string        `json:"addr"`
	Up        bool          `json:"up"`
	Latency   time.Duration `json:"-"`
	Error     string        `json:"error,omitempty"`
	CheckedAt time.Time     `json:"checked_at"`

	// Eligible is whether the master's answers count towards a quorum.
	Eligible bool `json:"eligible"`
	// Problem says why it does not (empty when eligible).
	Problem string `json:"problem,omitempty"`
	// ProbationRemaining is how long a restart probation still keeps it
	// out, as of the last round.
	ProbationRemaining Duration `json:"probation_remaining,omitempty"`
	// RunID, Role and Uptime come from the last ServerInfo read, Uptime
	// carried forward to this round (empty for masters that cannot
	// describe their server).
	RunID  string   `json:"run_id,omitempty"`
	Role   string   `json:"role,omitempty"`
	Uptime Duration `json:"uptime,omitempty"`
	// Durable is whether the master keeps acknowledged writes across a
	// crash; nil when unknown.
	Durable *bool `json:"durable"`
	// Warning is a condition that does not keep the master out but may
	// weaken a guarantee (a master that may lose writes, unreadable server
	// info).
	Warning string `json:"warning,omitempty"`
	// timedOut: the master did not answer in time (rather than refusing).
	timedOut bool
}

// Report is the state of every master and whether they make a quorum.
type Report struct {
	// Ready is whether the groups have their quorums, as ReadyPolicy asks:
	// with one group, whether it has a quorum.
	Ready bool `json:"ready"`
	// Quorum is the one group's majority (0 with several groups: see Groups).
	Quorum   int         `json:"quorum,omitempty"`
	Up       int         `json:"up"`
	Eligible int         `json:"eligible"` // up and counted towards a quorum
	Nodes    []NodeState `json:"masters"`
	// ReadyPolicy and Groups are set with several quorum groups.
	ReadyPolicy ReadyPolicy  `json:"ready_policy,omitempty"`
	Groups      []GroupState `json:"groups,omitempty"`
	// GuardEvents counts the guards' findings since start.
	GuardEvents GuardEvents `json:"guard_events"`
}

// GroupState is one quorum group's state after the last round.
type GroupState struct {
	Name     string   `json:"name"`
	Ready    bool     `json:"ready"` // a quorum of its masters is up and eligible
	Quorum   int      `json:"quorum"`
	Up       int      `json:"up"`
	Eligible int      `json:"eligible"`
	Masters  []string `json:"masters"`
}

// ReadyPolicy says when a sidecar with several quorum groups is ready.
type ReadyPolicy string

const (
	// ReadyAllGroups is ready only while every group has its quorum: a
	// sidecar that cannot lock some names is taken out of service.
	ReadyAllGroups ReadyPolicy = "all"
	// ReadyAnyGroup is ready while at least one group has its quorum: the
	// names of a group without quorum fail (503) and the rest keep working.
	ReadyAnyGroup ReadyPolicy = "any"
)

// GuardEvents counts what the safety guards found, since the checker
// started. Each count only grows.
type GuardEvents struct {
	// RestartProbation counts masters put on restart probation.
	RestartProbation int64 `json:"restart_probation"`
	// NotDurable counts masters found to possibly lose acknowledged writes
	// (warned about once per master).
	NotDurable int64 `json:"not_durable"`
	// Duplicate counts masters found to be the same server as another.
	Duplicate int64 `json:"duplicate"`
	// Replica counts masters found to be replicas.
	Replica int64 `json:"replica"`
}

// Duration is a time.Duration that JSON shows as people read it ("1.5s").
type Duration time.Duration

// MarshalJSON writes the duration rounded to the millisecond.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).Round(time.Millisecond).String())
}

// UnmarshalJSON reads what MarshalJSON writes, so that clients of /readyz
// (sidelock status, the tests) decode the Report itself.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Config tunes the checker. The zero value pings and reports but keeps no
// master out of a quorum.
type Config struct {
	Interval time.Duration // between rounds (default 1s)
	Timeout  time.Duration // per ping, and per server info read (default 50ms)
	Now      func() time.Time
	// OnChange, if set, is called after a round in which a master went up
	// or down or in or out of the quorum, or readiness changed, with the
	// previous and the new report (for logging).
	OnChange func(prev, cur Report)

	// RestartGuard is how long a master that may have restarted empty is
	// kept out of every quorum: at least the longest ttl any client sets on
	// the masters, so the keys it forgot would have lapsed anyway. 0
	// disables the restart probation.
	RestartGuard time.Duration
	// MastersPersistent is the operator's word that every master keeps
	// acknowledged writes across a crash (appendonly, appendfsync always).
	// It stands in for masters whose settings cannot be read; a master that
	// reports otherwise is still put on probation.
	MastersPersistent bool
	// Fencing says fence counters live on the masters, so a master that may
	// lose writes is warned about (once) and shown in the report.
	Fencing bool
	// Logger receives the guards' findings (default: discarded).
	Logger *slog.Logger

	// InfoMaxAge is how long a master's server info is trusted while no
	// new connection to it was opened (redlock.ConnectionCounter): rounds
	// within it only ping, a fraction of the cost of reading the info,
	// which matters when thousands of sidecars check the same masters. A
	// restart breaks every connection, so the round after one reads the
	// info again whatever its age; so does the round after a master was
	// down. 0 reads it every round. Nodes that do not count connections
	// have it read every round.
	InfoMaxAge time.Duration

	// ReadyPolicy says which of several quorum groups must have a quorum
	// for the Report to be ready (default all).
	ReadyPolicy ReadyPolicy

	// StarvedDuring is called as a round starts; the function it returns
	// says, once the round's observations are in, whether this process
	// was starved of CPU meanwhile (default: the Go scheduler's latencies,
	// pkg/redlock/starvation). A master that did not answer in time during a
	// starved round is not judged by that round (see repeatInconclusive).
	StarvedDuring func() (starved func() bool)
}

// Checker checks the masters of quorum groups. Report is safe for
// concurrent use.
type Checker struct {
	groups []*redlock.Locker
	// nodes are every group's masters, one group after another: the guards
	// judge them together (two groups must not share a server either), and
	// at[i] is where nodes[i] sits in its group.
	nodes []redlock.Node
	at    []member
	cfg   Config

	round  sync.Mutex // one round at a time: rounds update guards
	guards guards
	// wake asks Run for a round now: a master opened a connection that no
	// round has judged, and lock calls do not count it until one does.
	wake chan struct{}

	vetoMu sync.Mutex
	vetoes map[int]string // group index -> why none of its masters counts

	mu   sync.RWMutex
	last Report

	// lastConclusive is, per master, the latest observation a round could
	// judge it by (guarded by round; ok false before the first).
	lastConclusive []conclusive
}

type conclusive struct {
	obs observation
	ok  bool
}

// member places a master: index is its position in groups[group].Nodes(),
// the one SetEligibility takes.
type member struct{ group, index int }

// New returns a Checker of the groups' masters. Each round's verdict on a
// master is recorded on its group's Locker (SetEligibility), and a group
// is ready while its Quorum of masters answer and are eligible; with
// several groups, cfg.ReadyPolicy says which must be. With a RestartGuard,
// every master is kept out of the quorum until the first round has judged
// it: run a Check before serving.
func New(groups []*redlock.Locker, cfg Config) (*Checker, error) {
	if err := checkGroups(groups, &cfg); err != nil {
		return nil, err
	}
	if cfg.RestartGuard < 0 {
		return nil, errors.New("health: the restart guard must not be negative")
	}
	if cfg.InfoMaxAge < 0 {
		return nil, errors.New("health: the server info's maximum age must not be negative")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StarvedDuring == nil {
		cfg.StarvedDuring = schedulerStarvation(cfg.Timeout)
	}
	c := &Checker{groups: groups, cfg: cfg, wake: make(chan struct{}, 1)}
	for g, l := range groups {
		for i, n := range l.Nodes() {
			c.nodes = append(c.nodes, n)
			c.at = append(c.at, member{group: g, index: i})
		}
	}
	c.guards, c.lastConclusive = newGuards(len(c.nodes)), make([]conclusive, len(c.nodes))
	states := make([]NodeState, len(c.nodes))
	unjudged := cfg.RestartGuard == 0 // nothing to wait for
	for i, n := range c.nodes {
		states[i] = NodeState{Addr: n.Addr(), Error: "not checked yet", Eligible: unjudged}
		c.setEligibility(i, redlock.Eligibility{Eligible: unjudged, AnyConnection: unjudged, Why: "not judged by a health round yet"})
		if notifier, ok := n.(redlock.ConnectionNotifier); ok && !unjudged {
			notifier.NotifyConnections(c.Wake)
		}
	}
	c.last = c.summarise(states)
	c.last.Ready = false // not before the first round
	return c, nil
}

// wakeGap is the least time between a round and one that Wake asked for:
// a master that keeps reconnecting (paused, so every round times out and
// drops the connection) costs at most ten rounds a second, not a loop.
const wakeGap = 100 * time.Millisecond

// Run checks at once, then every interval and whenever Wake asks, until
// ctx ends.
func (c *Checker) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		last := time.Now()
		c.Check(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.wake:
			if !ctxsleep.For(ctx, time.Until(last.Add(wakeGap))) {
				return
			}
		}
	}
}

// Veto keeps every master of group g (its index in the groups given to
// New) out of the quorum for why, from the next round on, which it
// asks for at once; an empty why lifts it. For findings of other checks,
// such as a split of the group's member list (package membership).
func (c *Checker) Veto(g int, why string) {
	c.vetoMu.Lock()
	if c.vetoes == nil {
		c.vetoes = map[int]string{}
	}
	if why == "" {
		delete(c.vetoes, g)
	} else {
		c.vetoes[g] = why
	}
	c.vetoMu.Unlock()
	c.Wake()
}

// vetoOf is the veto on master i's group, if any.
func (c *Checker) vetoOf(i int) string {
	c.vetoMu.Lock()
	defer c.vetoMu.Unlock()
	return c.vetoes[c.at[i].group]
}

// setEligibility records the verdict on master i on its group's Locker.
func (c *Checker) setEligibility(i int, e redlock.Eligibility) {
	m := c.at[i]
	c.groups[m.group].SetEligibility(m.index, e)
}

// Wake asks Run for a round as soon as the current one (if any) is over.
// Nodes call it when they open a connection (redlock.ConnectionNotifier),
// so a master that came back is judged at once (at most wakeGap after the
// previous round) rather than an interval later; until then lock calls do
// not count its answers. It never blocks: wake-ups coalesce.
func (c *Checker) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Check runs one round: it reads every master's server info (or, while
// the last one is current, pings it), in parallel, applies the guards,
// records each verdict on the master's group and records the result.
func (c *Checker) Check(ctx context.Context) Report {
	c.round.Lock()
	defer c.round.Unlock()
	obs := make([]observation, len(c.nodes))
	now := c.cfg.Now()
	starved := c.cfg.StarvedDuring()
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		current, openedAtInfo := c.infoCurrent(i, now)
		returning := c.guards.nodes[i].unverified
		wg.Go(func() {
			conns := connectionsOpened(n)
			obs[i] = c.observe(ctx, n, current, openedAtInfo, returning)
			obs[i].judgedAt = conns
		})
	}
	wg.Wait()
	c.repeatInconclusive(obs, starved())
	states, events := c.judge(obs)
	for i, s := range states {
		c.setEligibility(i, c.eligibilityOf(i, s, obs[i].judgedAt))
	}
	r := c.summarise(states)
	r.GuardEvents = events
	c.mu.Lock()
	prev := c.last
	c.last = r
	c.mu.Unlock()
	if c.cfg.OnChange != nil && changed(prev, r) {
		c.cfg.OnChange(prev, r)
	}
	return r
}

// repeatInconclusive replaces the observation of a master that did not
// answer in time while this sidecar was starved of CPU with the latest
// conclusive one. Such a round says nothing about the master (its answer
// may be sitting unread), and a sidecar too busy to read answers must not
// mark every master down: under a burst of requests that turned healthy
// masters into "no quorum" and cost held locks their renewals. The
// repeated observation keeps its judgedAt, so connections opened since
// (a master that restarted meanwhile) are still not counted until a
// conclusive round judges them. A master that refuses connections, or
// times out while this sidecar is not starved, is judged as always.
func (c *Checker) repeatInconclusive(obs []observation, starved bool) {
	for i := range obs {
		last := &c.lastConclusive[i]
		if starved && obs[i].state.timedOut && last.ok {
			obs[i] = last.obs
			continue
		}
		*last = conclusive{obs: obs[i], ok: true}
	}
}

// connectionsOpened is n's connection count, 0 for nodes that keep none.
func connectionsOpened(n redlock.Node) uint64 {
	if counter, ok := n.(redlock.ConnectionCounter); ok {
		return counter.ConnectionsOpened()
	}
	return 0
}

// eligibilityOf is the verdict handed to the lockers on master i. It holds
// only over the connections opened before this round observed the master
// (judgedAt), unless a restart could not cost it keys (durable, or no
// restart guard), in which case any connection will do.
func (c *Checker) eligibilityOf(i int, s NodeState, judgedAt uint64) redlock.Eligibility {
	m := &c.guards.nodes[i]
	e := redlock.Eligibility{Eligible: s.Eligible, JudgedAt: judgedAt, AnyConnection: !c.restartProbation(m.last), Why: s.Problem}
	if s.ProbationRemaining > 0 {
		e.Until = m.probationUntil
	}
	return e
}

// observation is what one round saw of one master.
type observation struct {
	judgedAt uint64 // the connections opened before the master was observed
	state    NodeState
	reader   bool                // the node can describe its server
	info     *redlock.ServerInfo // nil when not read
	infoAt   time.Time           // when info arrived
	opened   uint64              // connections opened before info was read
	current  bool                // info not read: the last one still holds
	err      error               // why info was not read, for a reader that is up
}

// infoCurrent reports whether master i's last server info still holds,
// so this round may only ping it, and the connection count it was read at.
// The info expires at the round nearest its max age: rounds drift by a
// little either way, and one a microsecond early must not put the re-read
// off by a whole interval.
func (c *Checker) infoCurrent(i int, now time.Time) (current bool, opened uint64) {
	m := &c.guards.nodes[i]
	counter, ok := c.nodes[i].(redlock.ConnectionCounter)
	if !ok || c.cfg.InfoMaxAge == 0 || m.last == nil || m.unverified || now.Sub(m.infoAt)+c.cfg.Interval/2 >= c.cfg.InfoMaxAge {
		return false, 0
	}
	return counter.ConnectionsOpened() == m.openedAtInfo, m.openedAtInfo
}

// observe reads n's server info, which also shows that it answers: one
// round trip per master per round. While the last info is current it
// pings instead, and reads the info only if the ping had to open a
// connection. A node that cannot describe its server, or whose info read
// fails, is pinged instead, so a master that refuses INFO (an ACL) still
// counts as up.
//
// A returning master (down, or not yet seen, last round) is also pinged
// after a successful info read: the two go through different connection
// pools (a pipeline and a plain command, as lock calls do), and go-redis
// fails a pool's calls fast for up to a second after a failed dial, each
// pool on its own. Only when both answer do lock calls reach the master,
// so only then is it up (TestE2EQuorumLossAndRecovery).
func (c *Checker) observe(ctx context.Context, n redlock.Node, current bool, openedAtInfo uint64, returning bool) observation {
	reader, ok := n.(redlock.ServerInfoReader)
	if !ok {
		return observation{state: c.ping(ctx, n)}
	}
	if current {
		state := c.ping(ctx, n)
		if !state.Up || n.(redlock.ConnectionCounter).ConnectionsOpened() == openedAtInfo {
			return observation{state: state, reader: true, current: state.Up}
		}
	}
	o := c.readInfo(ctx, n, reader)
	if returning && o.info != nil {
		if ping := c.ping(ctx, n); !ping.Up {
			return observation{state: ping, reader: true}
		}
	}
	return o
}

// readInfo observes n by reading its server info.
func (c *Checker) readInfo(ctx context.Context, n redlock.Node, reader redlock.ServerInfoReader) observation {
	infoCtx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var opened uint64
	if counter, ok := n.(redlock.ConnectionCounter); ok {
		opened = counter.ConnectionsOpened() // before: a reconnect during the read forces the next
	}
	start := c.cfg.Now()
	info, err := reader.ServerInfo(infoCtx)
	o := observation{reader: true, infoAt: c.cfg.Now(), opened: opened}
	if err == nil {
		o.state = NodeState{Addr: n.Addr(), Up: true, Latency: o.infoAt.Sub(start), CheckedAt: o.infoAt.UTC()}
		o.info = &info
		return o
	}
	if errors.Is(err, context.DeadlineExceeded) { // no answer in time: down, without waiting again
		o.state = NodeState{Addr: n.Addr(), Latency: c.cfg.Now().Sub(start), CheckedAt: c.cfg.Now().UTC(), Error: err.Error(), timedOut: true}
		return o
	}
	o.state = c.ping(ctx, n)
	if o.state.Up {
		o.err = err
	}
	return o
}

func (c *Checker) ping(ctx context.Context, n redlock.Node) NodeState {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := c.cfg.Now()
	err := n.Ping(ctx)
	s := NodeState{Addr: n.Addr(), Up: err == nil, Latency: c.cfg.Now().Sub(start), CheckedAt: c.cfg.Now().UTC()}
	if err != nil {
		s.Error, s.timedOut = err.Error(), timedOut(ctx, err)
	}
	return s
}

// schedulerStarvation judges a round starved when the Go scheduler kept a
// share of goroutines waiting a tenth of the ping's budget or more.
func schedulerStarvation(timeout time.Duration) func() func() bool {
	probe := starvation.NewProbe()
	return func() func() bool {
		from := probe.Read(timeout / 10)
		return func() bool { return probe.StarvedSince(from) }
	}
}

// timedOut tells a master that did not answer within the round's budget
// from one that answered with an error or refused the connection.
func timedOut(ctx context.Context, err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil || errors.As(err, &netErr) && netErr.Timeout()
}

// Report returns the last round's result (not ready before the first).
func (c *Checker) Report() Report {
	c.mu.RLock()
	defer c.mu.RUnlock()
	r := c.last
	r.Nodes = append([]NodeState(nil), r.Nodes...)
	return r
}

func changed(prev, cur Report) bool {
	for i := range cur.Nodes {
		if prev.Nodes[i].Up != cur.Nodes[i].Up || prev.Nodes[i].Eligible != cur.Nodes[i].Eligible {
			return true
		}
	}
	return prev.Ready != cur.Ready
}
