package health_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/fakeclock"
	"github.com/sidelock/sidelock/internal/health"
	"github.com/sidelock/sidelock/pkg/redlock"
	"github.com/sidelock/sidelock/pkg/redlock/memnode"
)

// infoNode gives a memnode the redlock.ServerInfoReader method: memnode
// does not import redlock, and its ServerInfo converts to redlock's.
type infoNode struct{ *memnode.Node }

func (n infoNode) ServerInfo(ctx context.Context) (redlock.ServerInfo, error) {
	info, err := n.Node.ServerInfo(ctx)
	return redlock.ServerInfo(info), err
}

// group is a quorum group over nodes: the Locker the checker records its
// verdicts on.
func group(t testing.TB, name string, nodes ...redlock.Node) *redlock.Locker {
	t.Helper()
	l, err := redlock.New(nodes, redlock.Config{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// one is a single quorum group over nodes.
func one(t testing.TB, nodes ...redlock.Node) []*redlock.Locker {
	t.Helper()
	return []*redlock.Locker{group(t, "", nodes...)}
}

// quorumView reads what the checker told the groups' Lockers about each
// master, the masters numbered as in a Report (group after group).
type quorumView struct{ groups []*redlock.Locker }

func (q quorumView) Verdict(i int) redlock.Eligibility {
	for _, g := range q.groups {
		if n := len(g.Nodes()); i >= n {
			i -= n
			continue
		}
		return g.Eligibility(i)
	}
	panic(fmt.Sprintf("no master %d", i))
}

func (q quorumView) Get(i int) bool { return q.Verdict(i).Eligible }

// told fails unless every group's Locker was told what r says of its masters.
func (q quorumView) told(t testing.TB, r health.Report) {
	t.Helper()
	for i, s := range r.Nodes {
		if q.Get(i) != s.Eligible {
			t.Fatalf("master %d (%s): report eligible=%v, its group told %v", i, s.Addr, s.Eligible, q.Get(i))
		}
	}
}

// logRecorder keeps "LEVEL message master" lines.
type logRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "master" {
			line += " " + a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	return nil
}

// count is how many lines contain every one of parts.
func (l *logRecorder) count(parts ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

type fixture struct {
	t       *testing.T
	clock   *fakeclock.Clock
	mem     []*memnode.Node
	quorum  quorumView
	logs    *logRecorder
	checker *health.Checker
}

const guard = 10 * time.Second

// newFixture runs n memnode masters (m0, m1, ...) that have been up for
// age, checked with cfg plus the fixture's clock, quorum view and logger.
func newFixture(t *testing.T, n int, age time.Duration, cfg health.Config) *fixture {
	t.Helper()
	return startFixture(t, n, age, cfg, func(m *memnode.Node) redlock.Node { return infoNode{m} })
}

// startFixture runs n masters, each a memnode seen through node, up for
// age, and a checker of them as newFixture describes.
func startFixture(t *testing.T, n int, age time.Duration, cfg health.Config, node func(*memnode.Node) redlock.Node) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: fakeclock.New(time.Date(2026, 11, 21, 0, 0, 0, 0, time.UTC)),
		logs: &logRecorder{}}
	nodes := make([]redlock.Node, n)
	for i := range n {
		m := memnode.New(fmt.Sprintf("m%d", i), memnode.WithClock(f.clock.Now))
		f.mem = append(f.mem, m)
		nodes[i] = node(m)
	}
	f.clock.Advance(age)
	cfg.Now, cfg.Logger = f.clock.Now, slog.New(f.logs)
	f.quorum = quorumView{one(t, nodes...)}
	c, err := health.New(f.quorum.groups, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.checker = c
	return f
}

// check runs a round and asserts that the quorum was told what the report
// says.
func (f *fixture) check() health.Report {
	f.t.Helper()
	r := f.checker.Check(context.Background())
	f.quorum.told(f.t, r)
	return r
}

// eligible lists each master's eligibility, for compact assertions.
func eligible(r health.Report) string {
	var b strings.Builder
	for _, s := range r.Nodes {
		if s.Eligible {
			b.WriteByte('E')
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestFreshMastersAreOnProbationUntilUpForTheGuard(t *testing.T) {
	f := newFixture(t, 3, 0, health.Config{RestartGuard: guard})
	for i := range 3 {
		if f.quorum.Get(i) {
			t.Fatalf("master %d counts before the first round", i)
		}
	}
	r := f.check()
	if r.Ready || eligible(r) != "---" || r.Nodes[0].ProbationRemaining != health.Duration(guard) ||
		!strings.Contains(r.Nodes[0].Problem, "restart probation") {
		t.Fatalf("fresh masters: %+v", r)
	}
	f.clock.Advance(guard - time.Millisecond)
	if r := f.check(); r.Ready || r.Nodes[2].ProbationRemaining != health.Duration(time.Millisecond) {
		t.Fatalf("1ms before the guard: %+v", r)
	}
	f.clock.Advance(time.Millisecond)
	r = f.check()
	if !r.Ready || eligible(r) != "EEE" || r.Eligible != 3 || r.Nodes[0].ProbationRemaining != 0 || r.Nodes[0].Problem != "" {
		t.Fatalf("after the guard: %+v", r)
	}
	if r.GuardEvents.RestartProbation != 3 || f.logs.count("restart probation over") != 3 {
		t.Fatalf("events %+v, logs %q", r.GuardEvents, f.logs.lines)
	}
}

// A restart that no round saw (the master was never down at a round) is
// caught by its new run id, and the master sits out the guard.
func TestARestartBetweenRoundsStartsAProbation(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard})
	if r := f.check(); eligible(r) != "EEE" {
		t.Fatalf("old masters: %+v", r)
	}
	f.mem[0].Restart()
	f.clock.Advance(time.Second)
	r := f.check()
	if eligible(r) != "-EE" || !r.Ready || !strings.Contains(r.Nodes[0].Problem, "restarted") ||
		r.Nodes[0].ProbationRemaining != health.Duration(guard-time.Second) {
		t.Fatalf("after a restart: %+v", r.Nodes[0])
	}
	if f.logs.count("WARN master restarted m0") != 1 || r.GuardEvents.RestartProbation != 1 {
		t.Fatalf("events %+v, logs %q", r.GuardEvents, f.logs.lines)
	}
	f.clock.Advance(guard - time.Second - time.Millisecond)
	if r := f.check(); eligible(r) != "-EE" {
		t.Fatalf("before the guard ended: %s", eligible(r))
	}
	f.clock.Advance(time.Millisecond)
	if r := f.check(); eligible(r) != "EEE" {
		t.Fatalf("after the guard: %+v", r.Nodes[0])
	}
}

// A lower uptime under the same run id also means a restart.
func TestALowerUptimeIsARestart(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard})
	f.check()
	f.mem[1].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.Uptime = 2 * time.Second
		return i
	})
	if r := f.check(); eligible(r) != "E-E" || r.Nodes[1].ProbationRemaining != health.Duration(guard-2*time.Second) {
		t.Fatalf("after a lower uptime: %+v", r.Nodes[1])
	}
}

// A master seen down counts again only once a round has read its server
// info: at once if it did not restart, after the guard if it did.
func TestADownMasterIsReadmittedOnlyAfterItsInfoIsRead(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard})
	f.check()
	f.mem[0].SetDown(true)
	r := f.check()
	if eligible(r) != "-EE" || !strings.Contains(r.Nodes[0].Problem, "down") {
		t.Fatalf("down master: %+v", r.Nodes[0])
	}
	f.mem[0].SetDown(false)
	if r := f.check(); eligible(r) != "EEE" {
		t.Fatalf("back without a restart: %+v", r.Nodes[0])
	}
	f.mem[0].SetDown(true)
	f.check()
	f.mem[0].Restart()
	f.mem[0].SetDown(false)
	if r := f.check(); eligible(r) != "-EE" || r.Nodes[0].ProbationRemaining != health.Duration(guard) {
		t.Fatalf("back after a restart: %+v", r.Nodes[0])
	}
}

// Masters that keep their writes need no probation; the operator's word
// covers settings that cannot be read, never settings that say otherwise.
func TestPersistenceDecidesTheProbation(t *testing.T) {
	durable := func(i memnode.ServerInfo) memnode.ServerInfo {
		i.AppendOnly, i.AppendFsync = true, "always"
		return i
	}
	unreadable := func(i memnode.ServerInfo) memnode.ServerInfo {
		i.PersistenceKnown = false
		return i
	}
	cases := []struct {
		name      string
		declared  bool
		settings  func(memnode.ServerInfo) memnode.ServerInfo
		probation bool
	}{
		{"durable", false, durable, false},
		{"not durable", false, nil, true},
		{"unreadable", false, unreadable, true},
		{"unreadable, declared persistent", true, unreadable, false},
		{"not durable, declared persistent", true, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 3, time.Hour, health.Config{RestartGuard: guard, MastersPersistent: tc.declared})
			f.mem[0].SetServerInfo(tc.settings)
			f.check()
			f.mem[0].Restart()
			r := f.check()
			if onProbation := !r.Nodes[0].Eligible; onProbation != tc.probation {
				t.Fatalf("probation %v, want %v: %+v", onProbation, tc.probation, r.Nodes[0])
			}
		})
	}
}

// With fencing, a master that may lose writes is logged once (not every
// round) and shown in the report; a durable one is not.
func TestMastersThatMayLoseWritesAreWarnedOnce(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{Fencing: true})
	f.mem[1].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.AppendOnly, i.AppendFsync = true, "always"
		return i
	})
	f.mem[2].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.PersistenceKnown = false
		return i
	})
	var r health.Report
	for range 3 {
		r = f.check()
	}
	if f.logs.count("may lose acknowledged writes") != 2 || f.logs.count("may lose", "m0") != 1 || f.logs.count("may lose", "m2") != 1 {
		t.Fatalf("warnings: %q", f.logs.lines)
	}
	if r.GuardEvents.NotDurable != 2 || eligible(r) != "EEE" {
		t.Fatalf("report: %+v", r)
	}
	n := r.Nodes
	if n[0].Durable == nil || *n[0].Durable || !strings.Contains(n[0].Warning, "appendonly no") ||
		n[1].Durable == nil || !*n[1].Durable || n[1].Warning != "" ||
		n[2].Durable != nil || !strings.Contains(n[2].Warning, "unreadable") {
		t.Fatalf("durability in the report: %+v", n)
	}
}

func TestWithoutFencingNoDurabilityWarning(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{})
	if r := f.check(); r.GuardEvents.NotDurable != 0 || r.Nodes[0].Warning != "" || f.logs.count("may lose") != 0 {
		t.Fatalf("warned without fencing: %+v %q", r, f.logs.lines)
	}
}

// Two addresses of one server, or a replica, are kept out while running;
// of the two addresses the first still counts.
func TestDuplicatesAndReplicasAreKeptOut(t *testing.T) {
	f := newFixture(t, 3, time.Hour, health.Config{})
	if r := f.check(); eligible(r) != "EEE" {
		t.Fatalf("independent masters: %+v", r)
	}
	first, _ := f.mem[0].ServerInfo(context.Background())
	f.mem[2].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.RunID = first.RunID
		return i
	})
	f.mem[1].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.Role = "slave"
		return i
	})
	for range 2 {
		r := f.check()
		if eligible(r) != "E--" || r.Ready || r.GuardEvents.Duplicate != 1 || r.GuardEvents.Replica != 1 {
			t.Fatalf("violations: %+v", r)
		}
		if p := r.Nodes[2].Problem; !strings.Contains(p, "m0 and m2 are the same server") {
			t.Fatalf("duplicate's problem: %q", p)
		}
		if p := r.Nodes[1].Problem; !strings.Contains(p, "m1 is a replica") || r.Nodes[1].Role != "slave" {
			t.Fatalf("replica's problem: %q", p)
		}
	}
	f.mem[1].SetServerInfo(nil)
	f.mem[2].SetServerInfo(nil)
	if r := f.check(); eligible(r) != "EEE" || f.logs.count("independent master again") != 2 {
		t.Fatalf("after the fix: %s, logs %q", eligible(r), f.logs.lines)
	}
}

// A master that cannot describe its server gets the full guard after any
// round it missed, the first included: nothing tells how long it has been up.
func TestAMasterWithoutServerInfoFallsBackOnObservedDowntime(t *testing.T) {
	c := fakeclock.New(time.Now())
	m := memnode.New("plain", memnode.WithClock(c.Now))
	checker, _ := health.New(one(t, m), health.Config{RestartGuard: guard, Now: c.Now})
	if r := checker.Check(context.Background()); r.Ready || r.Nodes[0].ProbationRemaining != health.Duration(guard) {
		t.Fatalf("first round: %+v", r.Nodes[0])
	}
	c.Advance(guard)
	if r := checker.Check(context.Background()); !r.Ready {
		t.Fatalf("after the guard: %+v", r.Nodes[0])
	}
	m.SetDown(true)
	checker.Check(context.Background())
	m.SetDown(false)
	if r := checker.Check(context.Background()); r.Ready || r.Nodes[0].RunID != "" || r.Nodes[0].Durable != nil {
		t.Fatalf("back after a missed round: %+v", r.Nodes[0])
	}
}

func TestCheckIndependence(t *testing.T) {
	a, b, c, down := memnode.New("a"), memnode.New("b"), memnode.New("c"), memnode.New("down")
	down.SetDown(true)
	nodes := []redlock.Node{infoNode{a}, infoNode{b}, infoNode{c}, infoNode{down}, memnode.New("plain")}
	unchecked, err := health.CheckIndependence(context.Background(), nodes)
	if err != nil || len(unchecked) != 1 || !strings.Contains(unchecked[0].Error(), "down") {
		t.Fatalf("independent masters, one down: unchecked %v, err %v", unchecked, err)
	}
	infoA, _ := a.ServerInfo(context.Background())
	c.SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.RunID = infoA.RunID
		return i
	})
	b.SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.Role = "slave"
		return i
	})
	_, err = health.CheckIndependence(context.Background(), nodes)
	if err == nil || !strings.Contains(err.Error(), "a and c are the same server") || !strings.Contains(err.Error(), "b is a replica") {
		t.Fatalf("violations: %v", err)
	}
}

func TestReportJSON(t *testing.T) {
	f := newFixture(t, 3, 0, health.Config{RestartGuard: guard})
	f.mem[1].SetServerInfo(func(i memnode.ServerInfo) memnode.ServerInfo {
		i.PersistenceKnown = false
		return i
	})
	f.clock.Advance(1500 * time.Millisecond)
	data, err := json.Marshal(f.check())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Eligible *int `json:"eligible"`
		Masters  []map[string]any
		Guards   map[string]int64 `json:"guard_events"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	m0, m1 := got.Masters[0], got.Masters[1]
	if got.Eligible == nil || *got.Eligible != 0 || m0["eligible"] != false || m0["probation_remaining"] != "8.5s" ||
		m0["uptime"] != "1.5s" || m0["role"] != "master" || len(m0["run_id"].(string)) != 40 || m0["durable"] != false ||
		m0["problem"] == nil || m1["durable"] != nil || got.Guards["restart_probation"] != 3 {
		t.Fatalf("JSON: %s", data)
	}
	if _, ok := m1["durable"]; !ok {
		t.Fatalf("durable omitted instead of null: %s", data)
	}
}
