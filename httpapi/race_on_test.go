//go:build race

package httpapi_test

// raceEnabled: load tests that judge the sidecar's own speed skip under
// the race detector (it slows the sidecar about tenfold, which is itself an
// overload); `make test-load` runs them without it.
const raceEnabled = true
