package httpapi

import (
	"encoding/json"
	"errors"
	"math/big"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// specDurationPattern is the pattern of the spec's Duration schema, the
// grammar documented to clients.
func specDurationPattern(t testing.TB) *regexp.Regexp {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas struct {
				Duration struct{ Pattern string }
			}
		}
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	re, err := regexp.Compile(doc.Components.Schemas.Duration.Pattern)
	if err != nil {
		t.Fatalf("the spec's Duration pattern: %v", err)
	}
	return re
}

// Every accepted and every refused form of a duration parameter, and the
// spec's pattern agrees on each.
func TestDurationForms(t *testing.T) {
	pattern := specDurationPattern(t)
	accepted := map[string]time.Duration{
		"30": 30 * time.Second, "1.5": 1500 * time.Millisecond, "0.001": time.Millisecond, "1.250": 1250 * time.Millisecond,
		"5.000": 5 * time.Second, "007": 7 * time.Second, "0": 0, "999999999": 999999999 * time.Second,
		"30s": 30 * time.Second, "1m30s": 90 * time.Second, "1.5h": 90 * time.Minute, "250ms": 250 * time.Millisecond,
		".5s": 500 * time.Millisecond, "1.s": time.Second, "0s": 0, "100us": 100 * time.Microsecond, "1\u00b5s": time.Microsecond,
		"1\u03bcs": time.Microsecond, "2h45m": 165 * time.Minute, "1h0m0s": time.Hour,
	}
	refused := []string{
		"", " 5", "5 ", "5\n", "-1", "+5", "-5s", "+5s", "-0s", "-0", "1e3", "1E3", "0x10", "1.0005", "1.", ".5", "1,5", "1_000",
		"1000000000", "NaN", "Inf", "inf", "5S", "5 s", "1.5.2", "5sec", "s", ".s", "١", "30s ", "true", "null",
	}
	const overflow = "9999999999999999h" // the pattern's grammar, beyond time.Duration
	for s, want := range accepted {
		got, err := durationOf(lease.ParamWait, s)
		if err != nil || got != want {
			t.Errorf("%q: %v %v, want %v", s, got, err, want)
		}
		if !pattern.MatchString(s) {
			t.Errorf("%q is accepted but the spec's pattern refuses it", s)
		}
	}
	for _, s := range append(refused, overflow) {
		for _, param := range []string{lease.ParamTTL, lease.ParamWait, lease.ParamMaxHold} {
			_, err := durationOf(param, s)
			var api *apiError
			if !errors.As(err, &api) || api.code != paramCode(param) {
				t.Errorf("%s=%q: %v, want the code %s", param, s, err, paramCode(param))
			}
		}
		if pattern.MatchString(s) && s != overflow {
			t.Errorf("%q is refused but the spec's pattern accepts it", s)
		}
	}
}

// FuzzDurationGrammar: the sidecar accepts no duration the spec's pattern
// refuses, a refusal is always 400 with the parameter's code, a bare
// number of seconds means exactly its decimal value, and the only strings
// the pattern allows but the sidecar refuses are Go durations too long for
// time.Duration (which Go refuses too).
func FuzzDurationGrammar(f *testing.F) {
	for _, s := range []string{"30", "1.5", "0.001", "30s", "1m30s", ".5s", "1e3", "-1", "+5s", "1.0005", "999999999", "9999999999999999h", "1\u00b5s", " 5", "+0", "+5"} {
		f.Add(s)
	}
	pattern := specDurationPattern(f)
	f.Fuzz(func(t *testing.T, s string) {
		d, err := durationOf(lease.ParamMaxHold, s)
		if err != nil {
			var api *apiError
			if !errors.As(err, &api) || api.code != codeInvalidMaxHold || api.status != 400 {
				t.Fatalf("%q: refused with %v, want 400 %s", s, err, codeInvalidMaxHold)
			}
			if pattern.MatchString(s) {
				if _, goErr := time.ParseDuration(s); goErr == nil || !strings.ContainsAny(s, "numsh") {
					t.Fatalf("%q: the spec's pattern allows it, the sidecar refuses it: %v", s, err)
				}
			}
			return
		}
		if !pattern.MatchString(s) {
			t.Fatalf("%q: accepted as %v, but the spec's pattern refuses it", s, d)
		}
		if d < 0 {
			t.Fatalf("%q: a negative duration %v", s, d)
		}
		if r, ok := new(big.Rat).SetString(s); ok && !strings.ContainsAny(s, "eE/") {
			ns := new(big.Rat).Mul(r, big.NewRat(int64(time.Second), 1))
			if !ns.IsInt() || ns.Num().Int64() != int64(d) {
				t.Fatalf("%q: read as %v, not its value in seconds", s, d)
			}
		}
	})
}

// durationOf is duration for the parameter name.
func durationOf(name, s string) (time.Duration, error) {
	p, _ := paramNamed(name)
	return duration(p, s)
}
