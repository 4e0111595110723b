//go:build linux

package abuse

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// report is every figure of a run, rendered as Markdown.
type report struct {
	sz    sizes
	e     *env
	flood floodResult
	mem   memoryResult
	burst burstResult
	took  time.Duration
	cpus  int
}

func (r *report) render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sidelock abuse test — results\n\n")
	fmt.Fprintf(&b, "`SIDELOCK_ABUSE=%s go test ./test/abuse` on %s, %d CPUs, %v: the sidecar binary (%s) over 3 real redis-server masters, loopback only. "+
		"Connection cap: %s. Chart memory limit (sidecar.resources.limits.memory): %s.\n\n",
		map[string]string{"full": "1", "quick": "quick"}[r.sz.mode], time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.cpus,
		r.took.Round(time.Second), r.e.binFrom, r.capText(), orNone(r.e.chartLimit))
	b.WriteString("Latencies are taken in the test process, which shares the CPUs with the sidecar and the masters; " +
		"a failed probe is one with no 200 within its timeout.\n\n")
	r.renderFlood(&b)
	r.renderMemory(&b)
	r.renderBurst(&b)
	b.WriteString("\n## Checks\n\n| check | result |\n|---|---|\n")
	for _, c := range r.checks() {
		verdict := "PASS"
		if !c.ok {
			verdict = "**FAIL**"
		}
		fmt.Fprintf(&b, "| %s | %s — %s |\n", c.name, verdict, c.detail)
	}
	return b.String()
}

// capText says which connection cap the sidecars ran with, and why.
func (r *report) capText() string {
	def, known := r.e.knobs["SIDELOCK_MAX_CONNS"]
	switch {
	case r.e.capRejected:
		return "SIDELOCK_MAX_CONNS was rejected by this binary: none"
	case !known && len(r.e.extra) > 0:
		return "SIDELOCK_MAX_CONNS passed, but not a documented setting of this binary: none"
	case !known:
		return "none (the binary has no SIDELOCK_MAX_CONNS)"
	case len(r.e.extra) > 0:
		return fmt.Sprintf("SIDELOCK_MAX_CONNS=%d (default %s)", r.e.connCap(), def)
	default:
		return "SIDELOCK_MAX_CONNS default " + def
	}
}

func (r *report) renderFlood(b *strings.Builder) {
	f := r.flood
	b.WriteString("## (a) Connection flood (idle keep-alive connections on the lock API)\n\n| figure | value |\n|---|---|\n")
	row(b, "connections tried (this process's RLIMIT_NOFILE)", "%d (%d)", f.target, f.noFileLimit)
	row(b, "accepted / refused / not tried (time to open)", "%d / %d / %d (%v)", f.accepted, f.refused, f.skipped, f.openTook.Round(10*time.Millisecond))
	row(b, "refusals by answer", "%s", countsText(f.refusedBy))
	row(b, "refusals that were a named overload answer", "%d of %d", f.named, f.refused)
	row(b, "accepted still open after the hold", "%d of %d (hold %v)", f.stillOpen, f.accepted, r.sz.floodHold)
	row(b, "/healthz (admin) probes failed / total, max latency", "%d / %d, %v (1s timeout, every 100ms)", f.health.failed, f.health.n, f.health.maxLatency.Round(time.Millisecond))
	row(b, "heartbeats failed / total (locks lost)", "%d / %d (%d) of %d holders; %s", f.hb.failed, f.hb.beats, f.hb.lost, f.hb.holders, countsText(f.hb.causes))
	row(b, "sidecar fds before → peak → after", "%d → %d → %d", f.base.fds, f.peak.fds, f.after.fds)
	row(b, "sidecar RSS before → peak → after (VmHWM)", "%s → %s → %s (%s)", mb(f.base.rssKB), mb(f.peak.rssKB), mb(f.after.rssKB), mb(f.after.hwmKB))
}

func (r *report) renderMemory(b *strings.Builder) {
	m := r.mem
	b.WriteString("\n## (b) Memory (a fresh sidecar per kind)\n\n| units | asked / in place | RSS before → with them | per unit (ΔRSS/N) | fds with them |\n|---|---|---|---|---|\n")
	points := append(slices.Clone(m.held), m.waitOne, m.waitMany, m.idle)
	for _, p := range points {
		inPlace := fmt.Sprint(p.n)
		if p.refused != "" && p.refused != "—" {
			inPlace += " (answered at once: " + p.refused + ")"
		}
		fmt.Fprintf(b, "| %s | %d / %s | %s → %s | %.1f KB | %d |\n", p.what, p.want, inPlace, mb(p.base.rssKB), mb(p.at.rssKB), p.perUnitKB(), p.at.fds)
	}
	b.WriteString("\n| at the caps (projected: RSS before + per unit × cap) | RSS | chart limit |\n|---|---|---|\n")
	for _, pr := range r.projections() {
		fmt.Fprintf(b, "| %s | %s | %s |\n", pr.what, pr.text(), orNone(r.e.chartLimit))
	}
}

func (r *report) renderBurst(b *strings.Builder) {
	c := r.burst
	fmt.Fprintf(b, "\n## (c) Burst (%d concurrent try-once acquires of free names, each on a new connection)\n\n| round | answers | took |\n|---|---|---|\n", r.sz.burst)
	for i, rd := range c.rounds {
		fmt.Fprintf(b, "| %d | %s | %v |\n", i+1, countsText(rd.counts), rd.took.Round(10*time.Millisecond))
	}
	fmt.Fprintf(b, "\n| figure | value |\n|---|---|\n")
	row(b, "heartbeats failed / total (locks lost)", "%d / %d (%d) of %d holders; %s", c.hb.failed, c.hb.beats, c.hb.lost, c.hb.holders, countsText(c.hb.causes))
	row(b, "/readyz during the bursts", "%s (of %d polls), max latency %v", statusText(c.ready.statuses), c.ready.n, c.ready.maxLatency.Round(time.Millisecond))
	row(b, "sidecar peak fds, RSS", "%d, %s", c.peak.fds, mb(c.peak.rssKB))
}

func row(b *strings.Builder, name, format string, args ...any) {
	fmt.Fprintf(b, "| %s | %s |\n", name, fmt.Sprintf(format, args...))
}

// projection is the RSS a sidecar would reach with one kind of unit at
// the cap that bounds it.
type projection struct {
	what  string
	kb    int // 0: unbounded (no cap)
	limit int // the chart's limit in kB, 0 when unknown
}

func (p projection) text() string {
	if p.kb == 0 {
		return "unbounded (no cap)"
	}
	return mb(p.kb)
}

func (p projection) fits() bool { return p.kb > 0 && (p.limit == 0 || p.kb <= p.limit) }

// projections extrapolate the per-unit costs to the caps. Every held
// stream and every waiter holds a connection, so a connection cap bounds
// them too; idle connections are bounded by the connection cap alone.
func (r *report) projections() []projection {
	limit := quantityKB(r.e.chartLimit)
	connCap := r.e.connCap()
	bound := func(c int) int {
		if connCap > 0 && (c == 0 || connCap < c) {
			return connCap
		}
		return c
	}
	project := func(what string, p memPoint, cap int) projection {
		pr := projection{what: fmt.Sprintf("%s × %d", what, cap), limit: limit}
		if cap > 0 {
			pr.kb = p.base.rssKB + int(p.perUnitKB()*float64(cap))
		} else {
			pr.what = what + " × no cap"
		}
		return pr
	}
	locks, waiters := bound(r.e.knobs.intKnob("SIDELOCK_MAX_LOCKS")), bound(r.e.knobs.intKnob("SIDELOCK_MAX_WAITERS"))
	var out []projection
	if n := len(r.mem.held); n > 0 {
		out = append(out, project("held streams (min of MAX_LOCKS, MAX_CONNS)", r.mem.held[n-1], locks))
	}
	return append(out,
		project("waiters, one name each (min of MAX_WAITERS, MAX_CONNS)", r.mem.waitMany, waiters),
		project("idle connections (MAX_CONNS)", r.mem.idle, connCap))
}

// check is one expectation of issue 14.
type check struct {
	name, detail string
	ok           bool
}

func (r *report) checks() []check {
	f, c := r.flood, r.burst
	limit := quantityKB(r.e.chartLimit)
	cs := []check{
		{"flood: /healthz never failed", fmt.Sprintf("%d of %d probes failed, max %v", f.health.failed, f.health.n, f.health.maxLatency.Round(time.Millisecond)), f.health.failed == 0},
		{"flood: no heartbeat failed", fmt.Sprintf("%d of %d failed, %d locks lost", f.hb.failed, f.hb.beats, f.hb.lost), f.hb.failed == 0},
		{"flood: open connections are capped", fmt.Sprintf("%d open at once after the hold (%d of %d accepted over time); cap: %s", f.stillOpen, f.accepted, f.target, r.capText()),
			r.e.connCap() > 0 && f.stillOpen <= r.e.connCap()},
		{"flood: every refusal is a named overload answer", fmt.Sprintf("%d of %d named; %s", f.named, f.refused, countsText(f.refusedBy)), f.named == f.refused},
		{"flood: peak RSS within the chart's limit", fmt.Sprintf("%s of %s", mb(f.peak.rssKB), orNone(r.e.chartLimit)), limit == 0 || f.peak.rssKB <= limit},
	}
	for _, p := range r.projections() {
		c := check{"memory: " + p.what + " within the chart's limit", p.text() + " of " + orNone(r.e.chartLimit), p.fits()}
		if r.sz.mode == "quick" { // a few hundred units: heap growth steps swamp the per-unit cost
			c.ok, c.detail = true, c.detail+" (not judged in quick mode)"
		}
		cs = append(cs, c)
	}
	noQuorum, unnamed := 0, 0
	for _, rd := range c.rounds {
		for k, n := range rd.counts {
			switch {
			case strings.HasSuffix(k, " no_quorum"):
				noQuorum += n
			case k != "200" && !strings.HasPrefix(k, "429 "):
				unnamed += n
			}
		}
	}
	return append(cs,
		check{"burst: no no_quorum while the masters are healthy", fmt.Sprintf("%d answers 503 no_quorum", noQuorum), noQuorum == 0},
		check{"burst: every acquire answered 200 or 429", fmt.Sprintf("%d other answers or errors", unnamed), unnamed == 0},
		check{"burst: no heartbeat failed", fmt.Sprintf("%d of %d failed, %d locks lost", c.hb.failed, c.hb.beats, c.hb.lost), c.hb.failed == 0},
		check{"burst: /readyz stayed 200", statusText(c.ready.statuses), c.ready.failed == 0},
	)
}

// countsText lists counts by key, largest first ("—" when none).
func countsText(m map[string]int) string {
	if len(m) == 0 {
		return "—"
	}
	keys := slices.Sorted(maps.Keys(m))
	slices.SortStableFunc(keys, func(a, b string) int { return m[b] - m[a] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func statusText(m map[int]int) string {
	s := map[string]int{}
	for code, n := range m {
		if code == 0 {
			s["no answer"] += n
		} else {
			s[fmt.Sprint(code)] += n
		}
	}
	return countsText(s)
}

func mb(kb int) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }

func orNone(s string) string {
	if s == "" {
		return "not found"
	}
	return s
}
