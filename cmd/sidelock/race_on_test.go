//go:build race

package main

// raceEnabled: tests that judge the sidecar's own speed skip under the race
// detector (the child sidecar is this race-built binary, about tenfold
// slower); `make test-load` runs them without it.
const raceEnabled = true
