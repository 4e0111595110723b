//go:build linux

// Package abuse is sidelock's load-abuse harness (issue 14): the built
// binary over three real redis-server masters, on loopback only, under
// (a) a flood of idle connections while the kubelet's /healthz probe and
// a few heartbeating holders watch, (b) memory per held stream, waiter
// and idle connection, projected to the sidecar's caps next to the
// chart's memory limit, and (c) bursts of concurrent try-once acquires
// while holders heartbeat. It prints the figures, checks them, and a full
// run writes results.md.
//
//	SIDELOCK_ABUSE=1     go test -count=1 -v -run TestAbuse ./test/abuse   # make abuse: full sizes, ~1 min
//	SIDELOCK_ABUSE=quick go test -count=1 -v -run TestAbuse ./test/abuse   # a tenth of the sizes, ~30 s
//
// Without SIDELOCK_ABUSE (or with -short) it skips, so make test stays
// fast. SIDELOCK_ABUSE_CONNS sets the flood's size, SIDELOCK_ABUSE_MAX_CONNS
// runs the sidecars with SIDELOCK_MAX_CONNS, and SIDELOCK_ABUSE_BIN
// measures a prebuilt binary (an older commit's, for "before" figures).
package abuse

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// sizes bound every phase in count and time.
type sizes struct {
	mode       string
	floodConns int           // (a) idle connections
	floodHold  time.Duration // (a) how long they stand
	beaters    int           // (a), (c) heartbeating holders
	heldSteps  []int         // (b) held streams, cumulative
	waiters    int           // (b) waiters, on one name and on as many names
	idleConns  int           // (b) idle keep-alive connections
	burst      int           // (c) concurrent try-once acquires
	rounds     int           // (c) bursts
}

func sizesFor(t *testing.T) sizes {
	t.Helper()
	mode := os.Getenv("SIDELOCK_ABUSE")
	if mode == "" || testing.Short() {
		t.Skip("abuse load test: set SIDELOCK_ABUSE=1 (make abuse) or SIDELOCK_ABUSE=quick")
	}
	sz := sizes{mode: "full", floodConns: 3000, floodHold: 5 * time.Second, beaters: 4,
		heldSteps: []int{1000, 2000}, waiters: 1000, idleConns: 2000, burst: 1000, rounds: 3}
	if mode == "quick" {
		sz = sizes{mode: "quick", floodConns: 300, floodHold: 2 * time.Second, beaters: 2,
			heldSteps: []int{100, 200}, waiters: 100, idleConns: 200, burst: 100, rounds: 1}
	}
	if v := os.Getenv("SIDELOCK_ABUSE_CONNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 60000 {
			t.Fatalf("SIDELOCK_ABUSE_CONNS=%q: want 1..60000", v)
		}
		sz.floodConns = n
	}
	return sz
}

// env is what every phase shares: the binary, the masters, and how
// sidecars are configured.
type env struct {
	bin, binFrom string
	masters      []string
	knobs        knobs
	extra        []string // SIDELOCK_MAX_CONNS when asked for
	capRejected  bool     // the binary refused SIDELOCK_MAX_CONNS
	chartLimit   string
}

// sidecar starts a fresh sidecar for one measurement.
func (e *env) sidecar(t *testing.T, prefix string) *sidecar {
	s := startSidecar(t, e.bin, e.masters, prefix, e.extra...)
	e.capRejected = e.capRejected || s.capRejected
	return s
}

// connCap is the connection cap the sidecars run with: the one asked for,
// else the binary's default; 0 when the binary has none.
func (e *env) connCap() int {
	if _, ok := e.knobs["SIDELOCK_MAX_CONNS"]; !ok || e.capRejected {
		return 0
	}
	if v := os.Getenv("SIDELOCK_ABUSE_MAX_CONNS"); v != "" {
		n, _ := strconv.Atoi(v)
		return n
	}
	return e.knobs.intKnob("SIDELOCK_MAX_CONNS")
}

func TestAbuse(t *testing.T) {
	sz := sizesFor(t)
	e := &env{bin: buildSidecar(t), binFrom: "built from this tree", chartLimit: chartMemoryLimit("../../charts/sidelock/values.yaml")}
	if b := os.Getenv(binaryEnv); b != "" {
		e.binFrom = binaryEnv + "=" + b
	}
	e.knobs = readKnobs(t, e.bin)
	if v := os.Getenv("SIDELOCK_ABUSE_MAX_CONNS"); v != "" {
		e.extra = append(e.extra, "SIDELOCK_MAX_CONNS="+v)
	}
	raiseNoFile(uint64(max(sz.floodConns, sz.idleConns, sz.burst)) + 4096)
	e.masters = startMasters(t)
	began := time.Now()
	var rep report
	rep.sz, rep.e = sz, e
	rep.flood = runFlood(t, e, sz)
	t.Logf("(a) flood done after %v", time.Since(began).Round(time.Second))
	rep.mem = runMemory(t, e, sz)
	t.Logf("(b) memory done after %v", time.Since(began).Round(time.Second))
	rep.burst = runBurst(t, e, sz)
	rep.took = time.Since(began)
	rep.cpus = runtime.NumCPU()
	table := rep.render()
	fmt.Println(table)
	if sz.mode == "full" {
		if err := os.WriteFile("results.md", []byte(table), 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, c := range rep.checks() {
		if !c.ok {
			t.Errorf("FAIL %s: %s", c.name, c.detail)
		}
	}
}
