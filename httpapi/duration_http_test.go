package httpapi_test

import (
	"fmt"
	"testing"
	"time"
)

// ttl, wait and max_hold take a bare number of seconds in the query and
// in a JSON body (a number or a string) as well as a Go duration; out of
// range or malformed is the parameter's own code. (The grammar itself:
// TestDurationForms and FuzzDurationGrammar.)
func TestDurationsAsSecondsOverHTTP(t *testing.T) {
	srv := newAPI(t)
	for i, c := range []struct {
		query, body string
		ttl         string        // the lease's ttl, as answered
		maxHold     time.Duration // max_hold_at - acquired_at, when asked
	}{
		{query: "ttl=30", ttl: "30s"},
		{query: "ttl=1.5", ttl: "1.5s"},
		{query: "ttl=90s&wait=0.5&max_hold=120", ttl: "1m30s", maxHold: 2 * time.Minute},
		{body: `{"ttl":5}`, ttl: "5s"},
		{body: `{"ttl":1.5,"wait":0,"max_hold":60}`, ttl: "1.5s", maxHold: time.Minute},
		{body: `{"ttl":"5"}`, ttl: "5s"},
		{body: `{"ttl":"2m","max_hold":"3.25"}`, ttl: "2m0s", maxHold: 3250 * time.Millisecond},
	} {
		path := fmt.Sprintf("/locks/seconds/%d", i)
		if c.query != "" {
			path += "?" + c.query
		}
		got := call(t, srv, "POST", path, c.body)
		if got.status != 200 || got.body["ttl"] != c.ttl {
			t.Errorf("POST %s %s: %d %v, want ttl %s", path, c.body, got.status, got.body, c.ttl)
			continue
		}
		if c.maxHold != 0 {
			acquired, _ := time.Parse(time.RFC3339Nano, got.body["acquired_at"].(string))
			capAt, _ := time.Parse(time.RFC3339Nano, got.body["max_hold_at"].(string))
			if capAt.Sub(acquired) != c.maxHold {
				t.Errorf("POST %s %s: max_hold_at is %v after acquired_at, want %v", path, c.body, capAt.Sub(acquired), c.maxHold)
			}
		}
		if c.query == "ttl=30" {
			tok := got.body["token"].(string)
			if ext := call(t, srv, "PUT", path[:len(path)-len("?ttl=30")]+"?ttl=45", "", "Lock-Token", tok); ext.status != 200 || ext.body["ttl"] != "45s" {
				t.Errorf("PUT ?ttl=45: %d %v", ext.status, ext.body)
			}
			if ext := call(t, srv, "PUT", path[:len(path)-len("?ttl=30")], `{"ttl":20.5}`, "Lock-Token", tok); ext.status != 200 || ext.body["ttl"] != "20.5s" {
				t.Errorf(`PUT {"ttl":20.5}: %d %v`, ext.status, ext.body)
			}
		}
	}
	for _, c := range []struct{ query, body, code string }{
		{"ttl=0.5", "", "invalid_ttl"},
		{"ttl=3601", "", "invalid_ttl"},
		{"ttl=-30", "", "invalid_ttl"},
		{"ttl=1e3", "", "invalid_ttl"},
		{"wait=61", "", "invalid_wait"},
		{"wait=1.0005", "", "invalid_wait"},
		{"max_hold=-1", "", "invalid_max_hold"},
		{"", `{"ttl":5.0001}`, "invalid_ttl"},
		{"", `{"ttl":1e1}`, "invalid_ttl"},
		{"", `{"ttl":-1}`, "invalid_ttl"},
		{"", `{"ttl":1000000000}`, "invalid_ttl"},
		{"", `{"wait":"soon"}`, "invalid_wait"},
		{"", `{"max_hold":true}`, "invalid_body"},
		{"", `{"ttl":[5]}`, "invalid_body"},
	} {
		got := call(t, srv, "POST", "/locks/seconds/refused?"+c.query, c.body)
		if got.status != 400 || got.body["code"] != c.code {
			t.Errorf("POST ?%s %s: %d %v, want 400 %s", c.query, c.body, got.status, got.body["code"], c.code)
		}
	}
}
