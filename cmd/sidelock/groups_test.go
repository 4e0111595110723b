package main

import (
	"strings"
	"testing"
)

func TestParseGroups(t *testing.T) {
	got, err := parseGroups(" east=a1:6379, a2:6379,a3:6379 ; b2:6379,b1:6379,b3:6379")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "east" || strings.Join(got[0].Addrs, " ") != "a1:6379 a2:6379 a3:6379" {
		t.Fatalf("first group: %+v", got)
	}
	if got[1].Name != "b1:6379,b2:6379,b3:6379" {
		t.Errorf("an unnamed group is named after its sorted masters, got %q", got[1].Name)
	}
	if g, err := parseGroups(""); g != nil || err != nil {
		t.Errorf("empty: %v %v", g, err)
	}
}

func TestParseGroupsRefusesBadLists(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"a1:6379;a1:6379", "listed twice"},
		{"x=a1:1;x=b1:1", "two groups are named"},
		{"a1:6379,;b1:1", "not host:port"},
		{"bad name!=a1:1", "name"},
		{"a1", "not host:port"},
	} {
		_, err := parseGroups(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error saying %q", c.in, err, c.want)
		}
	}
}

func TestCheckMigration(t *testing.T) {
	cur, _ := parseGroups("a=a1:1,a2:1,a3:1;b=b1:1,b2:1,b3:1;c=c1:1,c2:1,c3:1")
	ok, _ := parseGroups("a=a3:1,a2:1,a1:1;b=b1:1,b2:1,b3:1")
	if err := checkMigration(cur, ok); err != nil {
		t.Errorf("adding a group: %v", err)
	}
	changed, _ := parseGroups("a=a1:1,a2:1,x:1")
	if err := checkMigration(cur, changed); err == nil || !strings.Contains(err.Error(), "different masters") {
		t.Errorf("a group redefined: %v", err)
	}
	moved, _ := parseGroups("z=a1:1,q1:1,q2:1")
	if err := checkMigration(cur, moved); err == nil || !strings.Contains(err.Error(), "in group") {
		t.Errorf("a master moved between groups: %v", err)
	}
	if u := unionGroups(cur[:2], cur[1:]); len(u) != 3 || u[2].Name != "c" {
		t.Errorf("union: %+v", u)
	}
}

func TestConfigValidatesGroups(t *testing.T) {
	for _, c := range []struct {
		edit func(*config)
		want string
	}{
		{func(c *config) { c.RedisGroups = "a1:1,a2:1,a3:1" }, "not both"},
		{func(c *config) { c.RedisAddrs, c.RedisGroups = nil, "a1:1,a2:1;a1:1" }, "listed twice"},
		{func(c *config) { c.RedisAddrs, c.RedisGroups, c.RedisGroupsPrev = nil, "a=a1:1;b=b1:1", "a=a1:1,x:1" }, "different masters"},
		{func(c *config) { c.ReadyPolicy = "most" }, "SIDELOCK_READY_POLICY"},
		{func(c *config) { c.RedisAddrs, c.Dev, c.RedisGroups = nil, true, "a1:1" }, "SIDELOCK_DEV"},
	} {
		cfg := validConfig()
		c.edit(&cfg)
		if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", cfg.RedisGroups, err, c.want)
		}
	}
	cfg := validConfig()
	cfg.RedisAddrs, cfg.RedisGroups, cfg.RedisGroupsPrev = nil, "a=a1:1,a2:1,a3:1;b=b1:1,b2:1,b3:1", "a=a1:1,a2:1,a3:1"
	if err := cfg.validate(); err != nil {
		t.Errorf("a valid migration from one group to two: %v", err)
	}
}
