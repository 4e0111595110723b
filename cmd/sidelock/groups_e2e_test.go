package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/redistest"
	"github.com/sidelock/sidelock/internal/shard"
)

// groupsEnv is SIDELOCK_REDIS_GROUPS for named groups of real masters.
func groupsEnv(groups map[string][]*redistest.Server, names ...string) string {
	parts := make([]string, len(names))
	for i, name := range names {
		addrs := make([]string, len(groups[name]))
		for j, s := range groups[name] {
			addrs[j] = s.Addr()
		}
		parts[i] = name + "=" + strings.Join(addrs, ",")
	}
	return strings.Join(parts, ";")
}

// groupOf is the group a list of group names maps a lock name to.
func groupOf(name string, list ...string) string {
	return list[shard.Pick(list, "e2e:"+name)]
}

// namesIn returns n lock names that the group list maps to group.
func namesIn(group string, n int, list ...string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if name := fmt.Sprintf("job-%d", i); groupOf(name, list...) == group {
			out = append(out, name)
		}
	}
	return out
}

// movingName is a lock name that moves from group `from` under the list
// before to group `to` under the list after.
func movingName(before, after []string, from, to string) string {
	for i := range 10_000 {
		name := fmt.Sprintf("job-%d", i)
		if groupOf(name, before...) == from && groupOf(name, after...) == to {
			return name
		}
	}
	return ""
}

type readyzGroups struct {
	Ready       bool   `json:"ready"`
	ReadyPolicy string `json:"ready_policy"`
	Groups      []struct {
		Name  string `json:"name"`
		Ready bool   `json:"ready"`
		Up    int    `json:"up"`
	} `json:"groups"`
}

func (s *sidecar) readyzGroups(t *testing.T) (int, readyzGroups) {
	t.Helper()
	res, err := http.Get(s.admin + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var r readyzGroups
	if err := json.NewDecoder(res.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, r
}

// Two groups of three real masters; group b loses its quorum: only b's
// names become unavailable, /readyz reports each group, and the ready
// policy decides whether partial loss is "not ready".
func TestE2EGroupLosingItsQuorumFailsOnlyItsNames(t *testing.T) {
	groups := map[string][]*redistest.Server{"a": durableMasters(t, 3), "b": durableMasters(t, 3)}
	env := "SIDELOCK_REDIS_GROUPS=" + groupsEnv(groups, "a", "b")
	all := startSidecarAt(t, nil, env)
	anyGroup := startSidecarAt(t, nil, env, "SIDELOCK_READY_POLICY=any")
	for _, s := range []*sidecar{all, anyGroup} {
		eventually(t, 3*time.Second, "ready", func() bool { return s.readyz(t) == 200 })
	}
	inA, inB := namesIn("a", 3, "a", "b"), namesIn("b", 3, "a", "b")
	for _, name := range append(inA, inB...) {
		tok := all.acquire(t, "/locks/"+name)
		if code, _ := all.do(t, "DELETE", "/locks/"+name, tok); code != 204 {
			t.Fatalf("release %s: %d", name, code)
		}
	}

	groups["b"][0].Kill()
	groups["b"][1].Kill()
	eventually(t, 3*time.Second, "policy all: /readyz 503", func() bool { return all.readyz(t) == 503 })
	code, r := all.readyzGroups(t)
	if code != 503 || r.ReadyPolicy != "all" || len(r.Groups) != 2 || !r.Groups[0].Ready || r.Groups[1].Ready || r.Groups[1].Up != 1 {
		t.Fatalf("policy all, group b down: %d %+v", code, r)
	}
	eventually(t, 3*time.Second, "policy any: group b reported down", func() bool {
		_, r := anyGroup.readyzGroups(t)
		return !r.Groups[1].Ready
	})
	if code, r := anyGroup.readyzGroups(t); code != 200 || r.ReadyPolicy != "any" || !r.Ready {
		t.Fatalf("policy any, group b down: %d %+v", code, r)
	}
	for _, name := range inA {
		all.acquire(t, "/locks/"+name+"?ttl=30s")
	}
	for _, name := range inB {
		if code, body := all.do(t, "POST", "/locks/"+name, ""); code != 503 || body["code"] != "no_quorum" {
			t.Fatalf("name %s of the group without quorum: %d %v", name, code, body)
		}
	}
	if v := metricValue(t, all, `sidelock_group_ready{group="b"}`); v != 0 {
		t.Errorf("sidelock_group_ready for b = %v, want 0", v)
	}
}

// A change from groups {a, b} to {a, b, c}, with sidecars on the old list,
// in the migration phase (new list plus SIDELOCK_REDIS_GROUPS_PREVIOUS) and
// on the new list alone: a name moving from a to c has one holder among
// neighbouring phases, and fences keep increasing.
func TestE2EGroupMigrationKeepsOneHolder(t *testing.T) {
	groups := map[string][]*redistest.Server{"a": durableMasters(t, 3), "b": durableMasters(t, 3), "c": durableMasters(t, 3)}
	before, after := groupsEnv(groups, "a", "b"), groupsEnv(groups, "a", "b", "c")
	old := startSidecarAt(t, nil, "SIDELOCK_REDIS_GROUPS="+before)
	migrating := startSidecarAt(t, nil, "SIDELOCK_REDIS_GROUPS="+after, "SIDELOCK_REDIS_GROUPS_PREVIOUS="+before)
	newList := startSidecarAt(t, nil, "SIDELOCK_REDIS_GROUPS="+after)
	for _, s := range []*sidecar{old, migrating, newList} {
		eventually(t, 3*time.Second, "ready", func() bool { return s.readyz(t) == 200 })
	}
	name := movingName([]string{"a", "b"}, []string{"a", "b", "c"}, "a", "c")
	if name == "" {
		t.Fatal("no name moves from a to c")
	}
	path := "/locks/" + name
	var lastFence float64
	steps := []struct {
		holder, rival *sidecar
		what          string
	}{
		{old, migrating, "old holds, migrating tries"},
		{migrating, old, "migrating holds, old tries"},
		{migrating, newList, "migrating holds, new tries"},
		{newList, migrating, "new holds, migrating tries"},
	}
	// DELETE answers before the masters hear the release (docs/api.md), so
	// each next holder waits for the lock a moment, as a caller of another
	// pod would; the rival's try-once meets a held lock.
	for _, s := range steps {
		code, body := s.holder.do(t, "POST", path+"?wait=5s", "")
		if code != 200 {
			t.Fatalf("%s: holder got %d %v", s.what, code, body)
		}
		if f := body["fence"].(float64); f <= lastFence {
			t.Errorf("%s: fence %v not above %v", s.what, f, lastFence)
		} else {
			lastFence = f
		}
		if code, body := s.rival.do(t, "POST", path, ""); code != 409 {
			t.Fatalf("%s: rival got %d %v, want 409", s.what, code, body)
		}
		if code, _ := s.holder.do(t, "DELETE", path, body["token"].(string)); code != 204 {
			t.Fatalf("%s: release %d", s.what, code)
		}
	}
	// The migrating sidecar holds the name in both groups: once the last
	// release has reached every master, its grant writes all of them.
	eventually(t, 5*time.Second, "the last release on every master", func() bool {
		for _, g := range []string{"a", "c"} {
			for _, m := range groups[g] {
				if v, _ := keyOn(t, m, name); v != "" {
					return false
				}
			}
		}
		return true
	})
	tok := migrating.acquire(t, path)
	for _, g := range []string{"a", "c"} {
		held := 0
		for _, m := range groups[g] {
			if v, _ := keyOn(t, m, name); v != "" {
				held++
			}
		}
		if held != 3 {
			t.Errorf("group %s: key on %d of 3 masters while the migrating sidecar holds it", g, held)
		}
	}
	migrating.do(t, "DELETE", path, tok)
}

// Replacing a master of a named group in one step would split its quorum
// while old and new sidecars run side by side: old ones on {m1,m2,m3},
// new ones on {m1,m2,m4}, each able to grant the lock on a majority of
// its own. The masters record the lists in use, so the new sidecar
// refuses to start and names the procedure; one master at a time (remove
// m3, then add m4) is accepted at every step.
func TestE2EReplacingAMasterOfANamedGroupInOneStepIsRefused(t *testing.T) {
	m := durableMasters(t, 4)
	groups := map[string][]*redistest.Server{"old": m[:3], "new": {m[0], m[1], m[3]}, "shrunk": m[:2]}
	named := func(list string) string {
		return "SIDELOCK_REDIS_GROUPS=" + strings.Replace(groupsEnv(groups, list), list+"=", "east=", 1)
	}
	old := startSidecarAt(t, nil, named("old"))
	old.acquire(t, "/locks/report?ttl=1h")

	out := refusedStart(t, nil, named("new"))
	for _, want := range []string{"refusing to start", `group "east"`, "one at a time"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output does not say %q:\n%s", want, out)
		}
	}
	// The safe path: without m3 first (majorities of {m1,m2,m3} and {m1,m2}
	// always meet), and the old sidecar keeps serving.
	shrunk := startSidecarAt(t, nil, named("shrunk"))
	if code, body := shrunk.do(t, "POST", "/locks/report", ""); code != 409 {
		t.Fatalf("the shrunk list's sidecar got %d %v for a lock the old one holds, want 409", code, body)
	}
	if code := old.readyz(t); code != 200 {
		t.Fatalf("old sidecar /readyz %d after a compatible list started", code)
	}
}
