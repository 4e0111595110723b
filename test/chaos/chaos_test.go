//go:build linux

// Package chaos is sidelock's chaos suite: 5 real redis-server masters,
// 3 sidelock processes (built from cmd/sidelock) reaching them through
// fault-injecting TCP proxies, and many concurrent clients — plain leases
// with heartbeats, held connections, waiters, try-once callers — each doing
// acquire → critical section → release on three hot lock names (and, beside
// them, on semaphores, a leader election, a read/write lock and overlapping
// lock sets), while faults are injected one scenario at a time and then
// mixed at random. An oracle (oracle_test.go) judges mutual exclusion,
// fence order, the promises of every kind, availability, recovery and how
// long a dead holder's lock lingers; the sidecars' /metrics show whether
// goroutines or memory grew.
//
//	SIDELOCK_CHAOS=full go test -count=1 -timeout 30m ./test/chaos   # make chaos: every scenario, writes results.md
//	SIDELOCK_CHAOS=ci   go test -count=1 -timeout 10m ./test/chaos   # the CI subset, 60–120s
//	SIDELOCK_SOAK=10m   go test -count=1 -timeout 30m -run Soak ./test/chaos   # make soak
//
// Without those variables every test skips. SIDELOCK_CHAOS_RACE=1 builds
// the sidecars with the race detector; SIDELOCK_CHAOS_BIN=path runs that
// binary instead of building one (another commit's, or one broken on
// purpose to see the oracle catch it).
package chaos

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// resultsFile is where a full run writes its table (relative to this
// package's directory, where go test runs).
const resultsFile = "results.md"

func TestChaos(t *testing.T) {
	m := requireMode(t)
	var results []result
	for _, sc := range scenarios() {
		if m == "ci" && !sc.ci {
			continue
		}
		t.Run(sc.name, func(t *testing.T) {
			res := runScenario(t, sc, m)
			results = append(results, res)
			for _, p := range res.problems {
				t.Error(p)
			}
			t.Logf("%s: %d grants, %d overlaps, %d fence violations, %d broken promises (%d valid_untils of %d grants checked; by source: %s; by client: %s), availability %.1f%%, recovery %v (%v)",
				sc.name, res.v.grants, res.v.overlaps, res.v.fenceViolations, res.v.brokenPromises, res.v.promisesChecked, res.v.promiseGrants,
				kindsText(res.v.promisesBySource), kindsText(res.v.promisesByKind), 100*res.v.availability, res.v.recovery.Round(time.Millisecond), res.took.Round(time.Second))
			t.Logf("%s: semaphores: %s", sc.name, semaphoreText(res.v.semaphores))
			t.Logf("%s: election: %s", sc.name, electionText(res.v.election))
			t.Logf("%s: read/write locks: %s", sc.name, rwText(res.v.rwlocks))
			t.Logf("%s: lock sets: %s", sc.name, setText(res.v.locksets))
		})
	}
	table := renderResults(m, results)
	fmt.Println(table)
	if m == "full" {
		if err := os.WriteFile(resultsFile, []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// renderResults is the results table and every scenario's observations,
// as Markdown.
func renderResults(m string, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# sidelock chaos suite — results\n\n")
	fmt.Fprintf(&b, "Produced by `SIDELOCK_CHAOS=%s go test ./test/chaos` on %s. %d masters, %d sidecar processes, "+
		"%d workers per sidecar on %d hot names; key ttl %v, node timeout %v, health interval %v.\n\n",
		m, time.Now().UTC().Format("2006-01-02"), numMasters, numSidecars, len(normalMix), len(hotNames), keyTTL, nodeTimeout, healthInterval)
	b.WriteString(howToRead)
	b.WriteString("| scenario | Redlock assumptions | grants (in fault) | mutual-exclusion violations | fence-order violations | broken promises (valid_untils checked) | availability (in fault) | recovery | dead holder's lock held ≤ | goroutines before→after | RSS MB before→after | failures by cause |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d (%d) | %d | %d | %d (%d) | %.1f%% (%.1f%%) | %s | %s | %s | %s | %s |\n",
			r.name, shortAssumption(r.assumptions), r.v.grants, r.v.grantsInFault, r.v.overlaps, r.v.fenceViolations,
			r.v.brokenPromises, r.v.promisesChecked, 100*r.v.availability, 100*r.v.faultAvail, recoveryText(r.v), deadText(r.v), usageText(r, true), usageText(r, false), failuresText(r.v.failures))
	}
	b.WriteString(kindsTable(results))
	b.WriteString(rwSetTable(results))
	b.WriteString("\n## Observations\n\n")
	for _, r := range results {
		status := "as expected"
		if len(r.problems) > 0 {
			status = "**unexpected:** " + strings.Join(r.problems, "; ")
		}
		fmt.Fprintf(&b, "- **%s** (%s, %v): %s.", r.name, r.assumptions, r.took.Round(time.Second), status)
		if r.v.overlaps > 0 {
			fmt.Fprintf(&b, " First overlap: %s.", r.v.worstOverlap)
		}
		if r.v.fenceViolations > 0 {
			fmt.Fprintf(&b, " First fence-order violation: %s.", r.v.worstFenceReport)
		}
		if r.v.brokenPromises > 0 {
			fmt.Fprintf(&b, " Worst broken promise (by %v): %s.", r.v.worstBrokenBy.Round(time.Millisecond), r.v.worstPromise)
		}
		if r.v.liveRejected > 0 {
			fmt.Fprintf(&b, " %d writes of holders that believed their lock valid were rejected by the fence (a newer holder had written).", r.v.liveRejected)
		}
		if r.v.staleAccepted+r.v.staleRejected > 0 {
			fmt.Fprintf(&b, " Stale writes: %d rejected by the fence, %d accepted.", r.v.staleRejected, r.v.staleAccepted)
		}
		fmt.Fprintf(&b, " Availability by sidecar: %s.", percents(r.v.bySidecar))
		if notes := compactNotes(r.notes); notes != "" {
			b.WriteString(" " + notes)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// kindsText is the valid_untils checked, by the kind of client they were
// published to.
func kindsText(byKind map[string]int) string {
	keys := make([]string, 0, len(byKind))
	for k := range byKind {
		keys = append(keys, k)
	}
	sortStrings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, byKind[k])
	}
	return strings.Join(parts, ", ")
}

func percents(fs []float64) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = fmt.Sprintf("%.0f%%", 100*f)
	}
	return strings.Join(parts, ", ")
}

func shortAssumption(a string) string {
	if a == "within" {
		return "within"
	}
	return "**exceeded**"
}

func recoveryText(v verdict) string {
	if !v.recovered {
		return "not recovered"
	}
	return v.recovery.Round(10 * time.Millisecond).String()
}

func deadText(v verdict) string {
	if v.deaths == 0 {
		return "—"
	}
	return fmt.Sprintf("%v (%d deaths)", v.maxHeldForDead.Round(10*time.Millisecond), v.deaths)
}

func usageText(r result, goroutines bool) string {
	var parts []string
	for i := range r.before {
		b, a := r.before[i], r.after[i]
		mark := ""
		if r.restarted[i] {
			mark = "*"
		}
		if goroutines {
			parts = append(parts, fmt.Sprintf("%.0f→%.0f%s", b.goroutines, a.goroutines, mark))
		} else {
			parts = append(parts, fmt.Sprintf("%.0f→%.0f%s", b.rssMB, a.rssMB, mark))
		}
	}
	return strings.Join(parts, ", ")
}

func failuresText(f map[string]int) string {
	if len(f) == 0 {
		return "—"
	}
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sortStrings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, f[k]))
	}
	return strings.Join(parts, ", ")
}

// compactNotes joins a scenario's notes, capping the mixed scenario's
// long fault log.
func compactNotes(notes []string) string {
	const most = 12
	if len(notes) > most {
		notes = append(notes[:most:most], fmt.Sprintf("… and %d more faults", len(notes)-most))
	}
	return strings.Join(notes, "; ")
}

func sortStrings(s []string) { slices.Sort(s) }

// howToRead explains the table's columns and the assumptions it refers to.
const howToRead = `Each scenario runs on a fresh cluster: the workers (plain leases with heartbeats, held connections, waiters, try-once
callers) take turns on the hot names, writing to a fenced resource (examples/fenced-resource's Store) during every
critical section; a quarter of the plain leases lower their ttl below the key ttl with an immediate heartbeat, and a
quarter of the held locks ask for a max_hold they then run into. A prober tries a private name on every sidecar
every 100ms. Faults start after a warm-up and are
healed before a quiet tail.

- **Redlock assumptions** — *within*: masters fail by crashing, freezing or being cut off, at most a minority at a
  time (a majority in the quorum-loss scenarios, where only availability is at stake); a master that says it is
  durable keeps its writes, and one without persistence sits out its restart probation; clients stop acting at
  valid_until. *Exceeded*: the scenario breaks one of these on purpose; its row shows what happens then.
- **grants** — critical sections entered (during the fault window).
- **mutual-exclusion violations** — critical sections of one name that overlapped (a section runs from the grant to
  the release, the loss notice or valid_until, whichever comes first).
- **fence-order violations** — grants whose fence was not above that of a critical section that ended before they
  began. (The resource itself never accepts a lower fence than it has seen; writes it rejected from holders that
  believed their lock valid are listed under Observations.)
- **broken promises** — every valid_until a sidecar published (acquire answers, heartbeat answers, renewed events of
  held connections, including those of the killed holder processes) is a promise that no one else gets the name
  before then. Each grant's promise runs to the latest valid_until it was given, or to the moment its client began to
  release it (a loss notice does not end it); a grant of the same name answered before an earlier promise ended is
  broken. In brackets: how many valid_untils were checked.
- **availability** — share of the prober's try-once acquisitions that were granted, over the whole run (and during
  the fault); **recovery** — from the end of the fault until every sidecar granted a probe again.
- **dead holder's lock held ≤** — for holders that died (a killed client process, a client that stopped
  heartbeating, a killed or frozen sidecar): the longest time until its key was gone from a majority of masters.
- **goroutines / RSS** — each sidecar's go_goroutines and process_resident_memory_bytes when idle before the storm
  and idle after it (* = restarted during the run, not compared).

`
