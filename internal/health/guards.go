package health

import (
	"fmt"
	"strings"
	"time"

	"github.com/sidelock/sidelock/pkg/redlock"
)

// The safety guards turn Redlock's assumptions into checks, every round:
//
//   - Restart probation. A master that restarted without persistence forgot
//     the keys it held; counting it at once could let a second caller win a
//     majority while the first still holds the lock. It is kept out of every
//     quorum until it has been up for RestartGuard, by which time every key
//     it forgot would have lapsed anyway. A restart is noticed from the
//     master's uptime, and between two rounds from a new run id or a lower
//     uptime, even when no round saw it down. A master that missed a round
//     is kept out until a round reads its server info again, so it cannot
//     come back empty unnoticed. With Config.InfoMaxAge, rounds only ping
//     while no new connection to the master was opened since its info was
//     read: a restarted server has broken every connection, so the round
//     that first reaches it again, on a new one, reads the info. Behind a
//     proxy that keeps client connections across a server restart, a
//     restart is noticed only when the info is re-read (within InfoMaxAge).
//     Between rounds the lockers count a master's answers only over the
//     connections it was judged with (redlock.Eligibility.JudgedAt), and a
//     new connection wakes a round (Checker.Wake): the interval bounds how
//     soon a report changes, not how long a restarted master could count.
//   - Durability. A master that may lose acknowledged writes (no
//     appendonly with appendfsync always, or settings unreadable) is warned
//     about once, as fence counters live on the masters.
//   - Independence. Two addresses of one server (the same run id) would
//     count twice, and a replica's keys follow another master's: such a
//     master is kept out and reported. Of two addresses of one server the
//     first stays in, so the server still counts, once.
//
// Masters that cannot describe their server (no ServerInfoReader, or INFO
// refused) fall back on what the checker itself saw: one that missed a
// round is put on probation for the full RestartGuard when it answers again.

// guard names, as counted in GuardEvents and the metrics.
const (
	guardDuplicate = "duplicate"
	guardReplica   = "replica"
)

// guards is what earlier rounds learnt about each master.
type guards struct {
	nodes  []memory
	events GuardEvents
}

func newGuards(n int) guards {
	g := guards{nodes: make([]memory, n)}
	for i := range g.nodes {
		g.nodes[i].unverified = true // never seen: it may have just restarted
	}
	return g
}

type memory struct {
	last         *redlock.ServerInfo // the last server info read
	infoAt       time.Time           // when it arrived
	openedAtInfo uint64              // connections opened before it was read
	unverified   bool                // missed a round (or none yet) since it was last read

	probationUntil time.Time
	probationWhy   string
	onProbation    bool // as of the last round it answered
	restarted      bool // this round found a new run id or a lower uptime

	violations    []violation // as of the latest server infos
	warnedDurable bool
	infoErr       error // why this round could not read its server info
	warnedInfo    bool
}

// judge applies the guards to one round's observations.
func (c *Checker) judge(obs []observation) ([]NodeState, GuardEvents) {
	now := c.cfg.Now()
	for i, o := range obs {
		c.learn(i, o, now)
	}
	c.updateIndependence()
	states := make([]NodeState, len(obs))
	for i, o := range obs {
		states[i] = c.state(i, o.state, now)
	}
	return states, c.guards.events
}

// learn updates what is known of master i from its observation.
func (c *Checker) learn(i int, o observation, now time.Time) {
	m := &c.guards.nodes[i]
	m.restarted, m.infoErr = false, nil
	switch {
	case o.missed: // its verdict stands, but it may restart unseen: as down
		m.unverified = true
	case !o.state.Up:
		m.unverified = true
	case o.current: // pinged; the last info still holds
	case o.info != nil:
		m.openedAtInfo = o.opened
		c.learnInfo(i, *o.info, o.infoAt)
	default:
		c.noInfo(i, o, now)
	}
}

// learnInfo detects a restart and sets the probation from the uptime: the
// server started at infoAt - Uptime at the latest, so it has been up for
// RestartGuard at infoAt + RestartGuard - Uptime.
func (c *Checker) learnInfo(i int, info redlock.ServerInfo, infoAt time.Time) {
	m := &c.guards.nodes[i]
	if m.last != nil && (info.RunID != m.last.RunID || info.Uptime < m.last.Uptime) {
		m.restarted = true
		c.cfg.Logger.Warn("master restarted", "master", c.nodes[i].Addr(), "uptime", info.Uptime,
			"run_id", short(info.RunID), "previous_run_id", short(m.last.RunID))
	}
	m.last, m.infoAt, m.unverified = &info, infoAt, false
	m.probationUntil = time.Time{}
	if c.restartProbation(&info) && info.Uptime < c.cfg.RestartGuard {
		m.probationUntil = infoAt.Add(c.cfg.RestartGuard - info.Uptime)
		m.probationWhy = fmt.Sprintf("up %v of the %v restart guard", info.Uptime, c.cfg.RestartGuard)
		if m.restarted {
			m.probationWhy = "restarted, " + m.probationWhy
		}
	}
	c.checkDurability(i, info)
}

// noInfo handles a master that answers but cannot describe its server: if
// it missed a round it may have restarted, for all the checker knows, just
// now.
func (c *Checker) noInfo(i int, o observation, now time.Time) {
	m := &c.guards.nodes[i]
	if o.reader {
		m.infoErr = o.err
		if !m.warnedInfo {
			m.warnedInfo = true
			c.cfg.Logger.Warn("cannot read the server info of a master: restart probation falls back on observed downtime and independence is not checked",
				"master", c.nodes[i].Addr(), "err", o.err)
		}
	}
	if m.unverified && c.restartProbation(m.last) {
		m.probationUntil = now.Add(c.cfg.RestartGuard)
		m.probationWhy = "missed a round and its server info is unreadable"
	}
	m.unverified = false
}

// restartProbation reports whether a master described by info (nil when
// unknown) needs a probation after a restart: only when it may lose writes.
// The operator's declaration stands in for settings that cannot be read,
// never against settings that can.
func (c *Checker) restartProbation(info *redlock.ServerInfo) bool {
	switch {
	case c.cfg.RestartGuard == 0:
		return false
	case info == nil || !info.PersistenceKnown:
		return !c.cfg.MastersPersistent
	default:
		return !info.Durable()
	}
}

// checkDurability warns, once per master, about one that may lose writes.
func (c *Checker) checkDurability(i int, info redlock.ServerInfo) {
	m := &c.guards.nodes[i]
	warning := c.durabilityWarning(&info)
	if warning == "" || m.warnedDurable {
		return
	}
	m.warnedDurable = true
	c.guards.events.NotDurable++
	c.cfg.Logger.Warn("master may lose acknowledged writes", "master", c.nodes[i].Addr(), "why", warning)
}

// durabilityWarning says why a master may lose writes that matter, or "".
func (c *Checker) durabilityWarning(info *redlock.ServerInfo) string {
	settings := func() string {
		return fmt.Sprintf("appendonly %s, appendfsync %s", yesNo(info.AppendOnly), info.AppendFsync)
	}
	switch {
	case info == nil || info.Durable():
		return ""
	case c.cfg.MastersPersistent && !info.PersistenceKnown:
		return "" // the operator's declaration covers what cannot be read
	case c.cfg.MastersPersistent:
		return "declared persistent, but it reports " + settings() + ": it gets a restart probation anyway"
	case !c.cfg.Fencing:
		return ""
	case !info.PersistenceKnown:
		return "persistence settings unreadable (CONFIG disabled or denied): a crash may lose fence counters, leaving fences to the clock floor"
	default:
		return "a crash may lose fence counters, leaving fences to the clock floor (" + settings() + ")"
	}
}

// updateIndependence finds duplicates and replicas among the latest known
// server infos, and notes the violations that are new.
func (c *Checker) updateIndependence() {
	infos := make([]*redlock.ServerInfo, len(c.nodes))
	for i := range c.guards.nodes {
		infos[i] = c.guards.nodes[i].last
	}
	found := make([][]violation, len(c.nodes))
	for _, v := range findViolations(addrs(c.nodes), infos) {
		found[v.node] = append(found[v.node], v)
	}
	for i := range c.guards.nodes {
		m := &c.guards.nodes[i]
		for _, v := range found[i] {
			if !hasGuard(m.violations, v.guard) {
				c.countViolation(v)
			}
		}
		if len(m.violations) > 0 && len(found[i]) == 0 {
			c.cfg.Logger.Info("master is an independent master again", "master", c.nodes[i].Addr())
		}
		m.violations = found[i]
	}
}

func (c *Checker) countViolation(v violation) {
	switch v.guard {
	case guardDuplicate:
		c.guards.events.Duplicate++
	case guardReplica:
		c.guards.events.Replica++
	}
	c.cfg.Logger.Error("master kept out of the quorum: masters must be independent", "master", c.nodes[v.node].Addr(), "why", v.msg)
}

// state is master i's NodeState after the guards.
func (c *Checker) state(i int, s NodeState, now time.Time) NodeState {
	m := &c.guards.nodes[i]
	s.Eligible, s.Problem = c.eligibility(m, s.Up, now)
	if veto := c.vetoOf(i); veto != "" {
		s.Eligible, s.Problem = false, veto
	}
	if s.Up && c.onProbation(m, now) {
		s.ProbationRemaining = Duration(m.probationUntil.Sub(now))
	}
	if m.last != nil {
		s.RunID, s.Role, s.Uptime = m.last.RunID, m.last.Role, Duration(m.last.Uptime+now.Sub(m.infoAt))
		if m.last.PersistenceKnown {
			durable := m.last.Durable()
			s.Durable = &durable
		}
	}
	s.Warning = c.warning(m)
	c.noteProbation(i, m, s.Up, now)
	return s
}

// eligibility decides whether a master counts towards a quorum, and why not.
func (c *Checker) eligibility(m *memory, up bool, now time.Time) (bool, string) {
	switch {
	case len(m.violations) > 0:
		msgs := make([]string, len(m.violations))
		for j, v := range m.violations {
			msgs[j] = v.msg
		}
		return false, strings.Join(msgs, "; ")
	case !c.restartProbation(m.last):
		return true, ""
	case !up:
		return false, "down: when it answers again, a round must first rule out that it came back empty"
	case c.onProbation(m, now):
		return false, "restart probation (" + m.probationWhy + "): it may have forgotten keys it held"
	}
	return true, ""
}

func (c *Checker) onProbation(m *memory, now time.Time) bool {
	return c.restartProbation(m.last) && now.Before(m.probationUntil)
}

// noteProbation counts and logs a master entering or leaving probation,
// judged only in rounds it answers.
func (c *Checker) noteProbation(i int, m *memory, up bool, now time.Time) {
	if !up {
		return
	}
	on := c.onProbation(m, now)
	switch {
	case on && (!m.onProbation || m.restarted):
		c.guards.events.RestartProbation++
		c.cfg.Logger.Warn("master kept out of the quorum: restart probation", "master", c.nodes[i].Addr(),
			"why", m.probationWhy, "for", m.probationUntil.Sub(now).Round(time.Millisecond))
	case !on && m.onProbation:
		c.cfg.Logger.Info("master back in the quorum: restart probation over", "master", c.nodes[i].Addr())
	}
	m.onProbation = on
}

// warning joins what may weaken a guarantee without keeping the master out.
func (c *Checker) warning(m *memory) string {
	var ws []string
	if w := c.durabilityWarning(m.last); w != "" {
		ws = append(ws, w)
	}
	if m.infoErr != nil {
		ws = append(ws, "server info unreadable: "+m.infoErr.Error())
	}
	return strings.Join(ws, "; ")
}

func addrs(nodes []redlock.Node) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr()
	}
	return out
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// short abbreviates a run id for messages, as git does a hash.
func short(runID string) string {
	if len(runID) > 12 {
		return runID[:12]
	}
	return runID
}
