package deploy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// The connection budget and the ready policy reach the sidecar; the
// masters' maxclients follows redis.maxClients, and only the masters'
// settings restart them.
func TestChartConnectionsAndReadyPolicy(t *testing.T) {
	cases := []struct {
		name, values     string
		maxConns, policy string
		maxClients       string // "" when redis.conf leaves Redis's default
	}{
		{name: "defaults", maxConns: "2", policy: "all"},
		{name: "any group, 8 connections", values: "sidecar: {config: {readyPolicy: any, redisMaxConns: 8}}", maxConns: "8", policy: "any"},
		{name: "bounds", values: "sidecar: {config: {redisMaxConns: 64}}\nredis: {maxClients: 1000000}", maxConns: "64", policy: "all", maxClients: "1000000"},
		{name: "more clients", values: "redis: {maxClients: 30000}", maxConns: "2", policy: "all", maxClients: "30000"},
		{name: "Redis's default said out loud", values: "redis: {maxClients: 10000}", maxConns: "2", policy: "all"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := render(loadChart(t), parseValues(t, tc.values), releaseName)
			if err != nil {
				t.Fatal(err)
			}
			c := sidecarOf(t, helmTestPod(t, r.objs))
			if v, _ := env(c, "SIDELOCK_REDIS_MAX_CONNS"); v != tc.maxConns {
				t.Errorf("SIDELOCK_REDIS_MAX_CONNS=%q, want %q", v, tc.maxConns)
			}
			if v, _ := env(c, "SIDELOCK_READY_POLICY"); v != tc.policy {
				t.Errorf("SIDELOCK_READY_POLICY=%q, want %q", v, tc.policy)
			}
			m, ok := checkMasters(t, r.objs, releaseNS)
			if !ok {
				t.Fatal("no masters")
			}
			if got := strings.Join(m.conf["maxclients"], " "); got != tc.maxClients {
				t.Errorf("redis.conf maxclients %q, want %q", got, tc.maxClients)
			}
		})
	}

	// The masters restart when their configuration changes (a checksum on
	// their pod template), so a sidecar setting must not be part of it.
	template := func(values string) any {
		r, err := render(loadChart(t), parseValues(t, values), releaseName)
		if err != nil {
			t.Fatal(err)
		}
		m, _ := checkMasters(t, r.objs, releaseNS)
		return m.sts.Spec.Template
	}
	base := template("")
	if !equality.Semantic.DeepEqual(base, template("sidecar: {config: {redisMaxConns: 8, readyPolicy: any}}")) {
		t.Error("changing the sidecar's connections or ready policy changes the masters' pod template (restarts them)")
	}
	if !equality.Semantic.DeepEqual(base, template("redis: {maxClients: 10000}")) {
		t.Error("redis.maxClients at Redis's default changes the masters' pod template (restarts them on upgrade)")
	}
	if equality.Semantic.DeepEqual(base, template("redis: {maxClients: 20000}")) {
		t.Error("changing redis.maxClients does not restart the masters")
	}
}

// NOTES.txt names the groups, and says when a migration is under way and
// how it ends.
func TestChartNotesQuorumGroups(t *testing.T) {
	r, err := render(loadChart(t), parseValues(t, `redis:
  enabled: false
  auth: {enabled: false}
  externalGroups:
    - {name: east, addrs: [e-0:6379, e-1:6379, e-2:6379]}
    - addrs: [w-0:6379, w-1:6379, w-2:6379]
  previousGroups:
    - {name: east, addrs: [e-0:6379, e-1:6379, e-2:6379]}
sidecar: {config: {readyPolicy: any}}`), releaseName)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"SIDELOCK_REDIS_GROUPS, /readyz policy any", "east: e-0:6379, e-1:6379, e-2:6379", "(unnamed): w-0:6379, w-1:6379, w-2:6379",
		"MIGRATING", "redis.previousGroups=[]", "10s (sidecar.config.keyTTL)",
	} {
		if !strings.Contains(r.notes, want) {
			t.Errorf("NOTES.txt lacks %q:\n%s", want, r.notes)
		}
	}
	if strings.Contains(r.notes, "SIDELOCK_REDIS_ADDRS") {
		t.Errorf("NOTES.txt speaks of SIDELOCK_REDIS_ADDRS with groups:\n%s", r.notes)
	}

	plain, err := render(loadChart(t), nil, releaseName)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.notes, "MIGRATING") || strings.Contains(plain.notes, "SIDELOCK_REDIS_GROUPS") {
		t.Errorf("NOTES.txt speaks of groups without any:\n%s", plain.notes)
	}
}

// Masters settings that the schema cannot judge, and that the sidecar
// would refuse at start in every pod (crash loop), fail the render with a
// message naming the values. The sidecar's own rules, in cmd/sidelock:
// config.validate, checkGroupSpecs and checkMigration.
func TestChartRejectsBadMasters(t *testing.T) {
	const (
		ext = "redis:\n  enabled: false\n  auth: {enabled: false}\n"
		a   = "{name: a, addrs: [a-0:6379, a-1:6379, a-2:6379]}"
		b   = "{name: b, addrs: [b-0:6379, b-1:6379, b-2:6379]}"
	)
	cases := []struct{ name, values, want string }{
		{"groups with the chart's own masters", "redis: {externalGroups: [" + a + "]}", "redis.externalGroups lists masters you run yourself: set redis.enabled=false"},
		{"groups with own masters, explicitly", "redis: {enabled: true, masters: 5, externalGroups: [" + a + "]}", "set redis.enabled=false"},
		{"addresses and groups together", ext + "  externalAddrs: [c:6379]\n  externalGroups: [" + a + "]", "set redis.externalAddrs (one quorum group) or redis.externalGroups (several), not both"},
		{"two groups of one name", ext + "  externalGroups: [" + a + ", {name: a, addrs: [x:6379]}]", `redis.externalGroups: two groups are named "a"`},
		{"two unnamed groups of the same masters", ext + "  externalGroups: [{addrs: [x:1, y:1]}, {addrs: [y:1, x:1]}]", `redis.externalGroups: two groups are named "x:1,y:1"`},
		{"a master in two groups", ext + "  externalGroups: [" + a + ", {name: c, addrs: [c-0:6379, a-1:6379]}]", `redis.externalGroups: master a-1:6379 is in groups "a" and "c"`},
		{"a master in two previous groups", ext + "  externalGroups: [" + a + "]\n  previousGroups: [" + b + ", {addrs: [b-1:6379]}]", `redis.previousGroups: master b-1:6379 is in groups "b" and "b-1:6379"`},
		{"a group that changes masters", ext + "  externalGroups: [" + a + "]\n  previousGroups: [{name: a, addrs: [a-0:6379, a-1:6379, a-9:6379]}]", `redis.previousGroups: group "a" has other masters than in the current list`},
		{"a group renamed", ext + "  externalGroups: [" + a + "]\n  previousGroups: [{name: old, addrs: [a-0:6379, a-1:6379, a-2:6379]}]", `redis.previousGroups: master a-0:6379 is in group "a" now and in group "old" before`},
		{"one quorum named on its way into groups", ext + "  externalGroups: [" + a + ", " + b + "]\n  previousGroups: [{addrs: [a-0:6379, a-1:6379, a-2:6379]}]", `master a-0:6379 is in group "a" now and in group "a-0:6379,a-1:6379,a-2:6379" before`},
		{"addresses moving to groups", ext + "  externalAddrs: [a-0:6379, a-1:6379, a-2:6379]\n  previousGroups: [" + a + "]", `master a-0:6379 is in group "a-0:6379,a-1:6379,a-2:6379" now and in group "a" before`},
		{"external masters without a password", "redis:\n  enabled: false\n  externalAddrs: [a:6379]", "redis.auth.enabled is on (the default) but the external masters have no password"},
		{"own masters in a previous group", "redis:\n  previousGroups: [{name: a, addrs: [shop-sidelock-redis-0.shop-sidelock-redis-headless.payments.svc.cluster.local:6379]}]", `redis.previousGroups: master shop-sidelock-redis-0.`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := parseValues(t, tc.values)
			_, err := render(loadChart(t), vals, releaseName)
			if err == nil {
				t.Fatal("rendered; want an error")
			}
			if strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("want a render error saying %q, got: %v", tc.want, err)
			}
			// (helm lint cannot see these: it renders with `fail` turned
			// into a log line; install, upgrade and template fail.)
			// A parent chart including the sidecar gets the same refusal.
			if _, err := render(parentChart(t), map[string]any{"sidelock": vals}, releaseName); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("as a dependency: want an error saying %q, got: %v", tc.want, err)
			}
		})
	}
}
