// Package sim is a seeded simulation of sidelock's real code, in the
// spirit of FoundationDB's simulation and TigerBeetle's VOPR: simulated
// Redis masters (memnode behind fault-injecting links), sidecars assembled
// as internal/sidecar assembles them (redlock, health, lease) and
// callers that take, renew and drop leases (locks mostly; a small share
// are semaphore permits, read/write locks and lock sets) all run inside one
// testing/synctest bubble, so hours of lease time pass in seconds of wall
// time without touching production code. A recorder keeps the history and
// a checker (the oracle, check_test.go) judges it afterwards against
// sidelock's promises; scenario tests (bugs_test.go) replay known ways of
// breaking them on a fixed schedule.
//
// Everything lives in _test.go files; this file only carries the package
// documentation. Run:
//
//	go test ./test/sim                                       # 50s of random seeds from seed 1, + the scenarios
//	SIM_SEEDS=17 SIM_REPEAT=10 go test ./test/sim -run TestSim -v    # replay a seed
//	SIM_BASE=$(date +%s) SIM_BUDGET=10m SIM_TIME=5m go test ./test/sim -run '^TestSim$' -timeout 0
//
// The knobs (SIM_SEEDS, SIM_BASE, SIM_BUDGET, SIM_TIME, SIM_REPEAT,
// SIM_SKIP, SIM_TRACES, SIM_DUMP, SIM_VERBOSE) are described at TestSim.
//
// Time model: synctest stops the virtual clock while any goroutine waits
// for a sync.Mutex, and sidelock holds a lease's mutex across that lease's
// rounds to the masters, so only calls made without such a lock held wait
// their latency in virtual time; the others are answered at once or time
// out at once (see link.do).
package sim
