package config

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseGroups(t *testing.T) {
	got, err := parseGroups(" east=a1:6379, a2:6379,a3:6379 ; b2:6379,b1:6379,b3:6379")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "east" || strings.Join(got[0].Addrs(), " ") != "a1:6379 a2:6379 a3:6379" {
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
	if u := UnionGroups(cur[:2], cur[1:]); len(u) != 3 || u[2].Name != "c" {
		t.Errorf("union: %+v", u)
	}
}

func TestConfigValidatesGroups(t *testing.T) {
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.RedisGroups = "a1:1,a2:1,a3:1" }, "not both"},
		{func(c *Config) { c.RedisAddrs, c.RedisGroups = nil, "a1:1,a2:1;a1:1" }, "listed twice"},
		{func(c *Config) { c.RedisAddrs, c.RedisGroups, c.RedisGroupsPrev = nil, "a=a1:1;b=b1:1", "a=a1:1,x:1" }, "different masters"},
		{func(c *Config) { c.ReadyPolicy = "most" }, "SIDELOCK_READY_POLICY"},
		{func(c *Config) { c.RedisAddrs, c.Dev, c.RedisGroups = nil, true, "a1:1" }, "SIDELOCK_DEV"},
	} {
		cfg := validConfig()
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error saying %q", cfg.RedisGroups, err, c.want)
		}
	}
	cfg := validConfig()
	cfg.RedisAddrs, cfg.RedisGroups, cfg.RedisGroupsPrev = nil, "a=a1:1,a2:1,a3:1;b=b1:1,b2:1,b3:1", "a=a1:1,a2:1,a3:1"
	if err := cfg.Validate(); err != nil {
		t.Errorf("a valid migration from one group to two: %v", err)
	}
}

// Masters may be redis:// URLs in groups too: a group is named after its
// masters' host:port, and an '=' in a URL's password does not make the
// text before it a group name.
func TestParseGroupsTakesURLs(t *testing.T) {
	const secret = "grp-S3cr3t"
	got, err := parseGroups("east=redis://:" + secret + "@a1:6379,redis://u:" + secret + "@a2:6379,a3:6379;" +
		"redis://:x=" + secret + "@b1:1,b2:1,redis://b3:1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "east" || strings.Join(got[0].Addrs(), " ") != "a1:6379 a2:6379 a3:6379" {
		t.Fatalf("first group: %v", got)
	}
	if got[1].Name != "b1:1,b2:1,b3:1" {
		t.Errorf("unnamed group of URLs is named %q, want its masters' host:port", got[1].Name)
	}
	if _, pw := got[1].Masters[0].Credentials(Config{}); pw != "x="+secret {
		t.Errorf("password with '=' parsed as %q", pw)
	}
	if s := fmt.Sprintf("%v %+v %#v", got, got, got); strings.Contains(s, secret) {
		t.Errorf("printing the groups shows the password: %s", s)
	}
}

// A bad entry or name in a group list is refused without being quoted.
func TestParseGroupsNeverQuotesABadEntry(t *testing.T) {
	const secret = "grp-S3cr3t"
	for _, in := range []string{
		"a1:1,a2:1;" + secret + "@b1:1,b2:1",
		"east=a1:1," + secret + "@a2:1",
		":" + secret + "=x@a1:1,a2:1", // a password, without its scheme, before an '='
		"redis://:" + secret + "@a1:1/2,a2:1",
		"redis://:" + secret + "@a1:1?db=0",
		"a1:1;redis://:" + secret + "@a1:1", // listed twice
	} {
		_, err := parseGroups(in)
		if err == nil {
			t.Errorf("%q accepted", in)
			continue
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the error quotes the password: %v", in, err)
		}
	}
}
