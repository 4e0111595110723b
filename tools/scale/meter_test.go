package scale

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// RoundTrips leaves out what the scripts call inside Redis, so the list
// must name every command any script calls, and no other.
func TestScriptCommandsAreThoseTheScriptsCall(t *testing.T) {
	scripts, err := filepath.Glob("../../pkg/redlock/redisnode/*.lua")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found: %v", err)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z]+)'`)
	called := map[string]bool{}
	for _, p := range scripts {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			called[strings.ToLower(m[1])] = true
		}
	}
	for c := range called {
		if !scriptCommands[c] {
			t.Errorf("the scripts call %s, which scriptCommands lacks: RoundTrips would count it as a request", c)
		}
	}
	for c := range scriptCommands {
		if !called[c] {
			t.Errorf("scriptCommands has %s, which no script calls", c)
		}
	}
}
