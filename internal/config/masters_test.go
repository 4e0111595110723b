package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// unitSecret is the password in the parser's cases: distinctive, so a
// leak is unmistakable.
const unitSecret = "S3cr3t-u9Kf"

func TestParseMasterAcceptsHostPortAndRedisURLs(t *testing.T) {
	for _, c := range []struct {
		in                         string
		hostPort, scheme, user, pw string
	}{
		{in: "10.0.0.1:6379", hostPort: "10.0.0.1:6379"},
		{in: " redis-0.redis.ns.svc.cluster.local:6379 ", hostPort: "redis-0.redis.ns.svc.cluster.local:6379"},
		{in: "[::1]:6379", hostPort: "[::1]:6379"},
		{in: "_redis._tcp.example:6379", hostPort: "_redis._tcp.example:6379"},
		{in: "redis://h:6379", hostPort: "h:6379", scheme: "redis"},
		{in: "redis://:" + unitSecret + "@h:6379", hostPort: "h:6379", scheme: "redis", pw: unitSecret},
		{in: "redis://locker:" + unitSecret + "@h:6379/0", hostPort: "h:6379", scheme: "redis", user: "locker", pw: unitSecret},
		{in: "redis://locker@h:6379/", hostPort: "h:6379", scheme: "redis", user: "locker"},
		{in: "REDIS://:" + unitSecret + "@h:6379", hostPort: "h:6379", scheme: "redis", pw: unitSecret},
		{in: "rediss://:" + unitSecret + "@[fd00::1]:6380", hostPort: "[fd00::1]:6380", scheme: "rediss", pw: unitSecret},
		{in: "redis://:" + unitSecret + "%40%2C%3B%2F%3A%3F%23@h:6379", hostPort: "h:6379", scheme: "redis", pw: unitSecret + "@,;/:?#"},
		// The host follows the last '@', as no host holds one.
		{in: "redis://:" + unitSecret + "@x@h:6379", hostPort: "h:6379", scheme: "redis", pw: unitSecret + "@x"},
	} {
		m, err := parseMaster(c.in)
		if err != nil {
			t.Errorf("%q refused: %v", c.in, err)
			continue
		}
		if m.hostPort != c.hostPort || m.scheme != c.scheme || m.username != c.user || m.password != c.pw {
			t.Errorf("%q parsed as %s %q user %q password %q", c.in, m.hostPort, m.scheme, m.username, m.password)
		}
		assertPrintsOnlyHostPort(t, m)
	}
}

// assertPrintsOnlyHostPort checks every way a master could reach a log or
// an error message: fmt verbs, slog (text and JSON), encoding/json.
func assertPrintsOnlyHostPort(t *testing.T, m MasterAddr) {
	t.Helper()
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("m", "master", m, "in", struct{ M MasterAddr }{m})
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("m", "master", m)
	encoded, _ := json.Marshal(struct{ M MasterAddr }{m})
	printed := fmt.Sprintf("%v %+v %#v %s %q %x %d %v", m, m, m, m, m, m, m, []MasterAddr{m}) + logged.String() + string(encoded)
	if m.password != "" && strings.Contains(printed, m.password) || strings.Contains(printed, unitSecret) {
		t.Errorf("printing %s shows its password: %s", m.hostPort, printed)
	}
	if !strings.Contains(fmt.Sprint(m), m.hostPort) {
		t.Errorf("%s prints as %v", m.hostPort, m)
	}
}

// Anything else is refused, and the message names neither the entry nor
// any part of it: it holds the password whenever it is a mistyped URL.
func TestParseMastersRefusesOtherFormsWithoutQuotingThem(t *testing.T) {
	for _, in := range []string{
		unitSecret + "@127.0.0.1:16382", // a URL without its scheme: net.SplitHostPort takes it
		":" + unitSecret + "@127.0.0.1:16382",
		"redis:" + unitSecret + "@h:6379",
		unitSecret,
		"h:" + unitSecret,
		"h:6379/" + unitSecret,
		"h :6379" + unitSecret,
		"h:0", "h:65536", "h:06379", ":6379", "",
		"redis://:" + unitSecret + "@h:6379/1",                  // db 1: the keys live in db 0
		"redis://:" + unitSecret + "@h:6379/0?protocol=3",       // no parameters
		"redis://:" + unitSecret + "@h:6379?",                   // not even an empty query
		"redis://:" + unitSecret + "@h:6379#x",                  // nor a fragment
		"redis://:" + unitSecret + "@h",                         // no port
		"redis://:" + unitSecret + "@:6379",                     // no host
		"redis://:" + unitSecret + "@h:99999",                   // port out of range
		"redis://:" + unitSecret + "/x@h:6379",                  // '/' not percent-encoded
		"redis://:" + unitSecret + "#x@h:6379",                  // '#' not percent-encoded
		"redis://:" + unitSecret + "?x@h:6379",                  // '?' not percent-encoded
		"redis://:" + unitSecret + "%zz@h:6379",                 // a bad escape (net/url quotes it)
		"redis://:" + unitSecret + " x@h:6379",                  // a space
		"http://:" + unitSecret + "@h:6379",                     // another scheme
		"unix://:" + unitSecret + "@/var/run/redis.sock",        // a socket
		"redis-sentinel://:" + unitSecret + "@h:26379/mymaster", // Sentinel is not a master
	} {
		_, err := parseMasters([]string{"a:1", in})
		if err == nil {
			t.Errorf("%q accepted", in)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, unitSecret) || (in != "" && strings.Contains(msg, in)) {
			t.Errorf("%q: the error quotes the entry: %v", in, msg)
		}
		if !strings.Contains(msg, "entry 2 is not host:port or redis") {
			t.Errorf("%q: the error does not say which entry is wrong and what it may be: %v", in, msg)
		}
	}
}

// One master is one host:port, whether written as a URL or not, in any
// letter case; the refusal names it by its host:port only.
func TestParseMastersRefusesAMasterListedTwice(t *testing.T) {
	for _, list := range [][]string{
		{"h:6379", "redis://:" + unitSecret + "@h:6379"},
		{"redis://:" + unitSecret + "@H:6379", "rediss://u:" + unitSecret + "@h:6379/0"},
	} {
		_, err := parseMasters(list)
		if err == nil || !strings.Contains(err.Error(), "listed twice") || strings.Contains(err.Error(), unitSecret) {
			t.Errorf("%d masters, one twice: %v", len(list), err)
		}
	}
}

// Each master authenticates with its URL's credentials, or else with
// SIDELOCK_REDIS_USERNAME and SIDELOCK_REDIS_PASSWORD.
func TestMasterCredentials(t *testing.T) {
	cfg := Config{RedisUsername: "env-user", RedisPassword: "env-pass"}
	for in, want := range map[string][2]string{
		"h:1":                       {"env-user", "env-pass"},
		"redis://h:1":               {"env-user", "env-pass"},
		"redis://:url-pass@h:1":     {"", "url-pass"},
		"redis://u:url-pass@h:1/0":  {"u", "url-pass"},
		"redis://url-user@h:1":      {"url-user", ""},
		"rediss://u:url-pass@h:1/0": {"u", "url-pass"},
	} {
		m, err := parseMaster(in)
		if err != nil {
			t.Fatal(err)
		}
		if u, p := m.Credentials(cfg); u != want[0] || p != want[1] {
			t.Errorf("%s: user %q password %q, want %q %q", in, u, p, want[0], want[1])
		}
	}
}

// The configuration refuses what the URLs contradict (credentials given
// twice, a scheme against SIDELOCK_REDIS_TLS), naming masters by host:port.
func TestConfigChecksURLsAgainstTheOtherRedisSettings(t *testing.T) {
	url := func(scheme string) []string {
		return []string{scheme + "://:" + unitSecret + "@a:1", "b:1", "c:1"}
	}
	for _, c := range []struct {
		name string
		edit func(*Config)
		want string // "" for valid
	}{
		{"URLs with credentials", func(c *Config) { c.RedisAddrs = url("redis") }, ""},
		{"URL credentials and SIDELOCK_REDIS_PASSWORD", func(c *Config) { c.RedisAddrs, c.RedisPassword = url("redis"), "env-pass" }, "not both"},
		{"URL credentials and SIDELOCK_REDIS_USERNAME", func(c *Config) { c.RedisAddrs, c.RedisUsername = url("redis"), "env-user" }, "not both"},
		{"URL without credentials and SIDELOCK_REDIS_PASSWORD", func(c *Config) {
			c.RedisAddrs, c.RedisPassword = []string{"redis://a:1", "b:1", "c:1"}, "env-pass"
		}, ""},
		{"rediss:// with TLS", func(c *Config) { c.RedisAddrs, c.RedisTLS = url("rediss"), true }, ""},
		{"rediss:// without TLS", func(c *Config) { c.RedisAddrs = url("rediss") }, "SIDELOCK_REDIS_TLS is false"},
		{"redis:// with TLS", func(c *Config) { c.RedisAddrs, c.RedisTLS = url("redis"), true }, "SIDELOCK_REDIS_TLS is true"},
		{"rediss:// in the previous groups without TLS", func(c *Config) {
			c.RedisAddrs, c.RedisGroups, c.RedisGroupsPrev = nil, "g=a:1,b:1,c:1", "g=rediss://a:1,b:1,c:1"
		}, "SIDELOCK_REDIS_TLS is false"},
		{"a bad entry in SIDELOCK_REDIS_ADDRS", func(c *Config) { c.RedisAddrs = []string{"a:1", unitSecret + "@b:1", "c:1"} }, "SIDELOCK_REDIS_ADDRS: entry 2 is not"},
		{"a bad entry in SIDELOCK_REDIS_GROUPS_PREVIOUS", func(c *Config) {
			c.RedisAddrs, c.RedisGroups, c.RedisGroupsPrev = nil, "a:1,b:1,c:1", "redis://:"+unitSecret+"@a:1/3"
		}, "SIDELOCK_REDIS_GROUPS_PREVIOUS: group 1: entry 1 is not"},
		{"a master listed twice", func(c *Config) { c.RedisAddrs = []string{"redis://:" + unitSecret + "@a:1", "A:1", "c:1"} }, "listed twice"},
	} {
		cfg := validConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		case err != nil && strings.Contains(err.Error(), unitSecret):
			t.Errorf("%s: the error shows the password: %v", c.name, err)
		}
	}
}

// A master is the same group member, and its group the same default name,
// whether its credentials are in a URL or in the settings: moving them
// into URLs moves no lock name and splits no member list.
func TestURLMastersAreNamedByHostPort(t *testing.T) {
	plain, url := validConfig(), validConfig()
	url.RedisAddrs = []string{"redis://:" + unitSecret + "@10.0.0.1:6379", "redis://u:" + unitSecret + "@10.0.0.2:6379/0", "10.0.0.3:6379"}
	want, _, err := plain.Groups()
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := url.Groups()
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Name != want[0].Name || strings.Join(got[0].Addrs(), ",") != strings.Join(want[0].Addrs(), ",") {
		t.Errorf("URLs give group %q of %v, host:port gives %q of %v", got[0].Name, got[0].Addrs(), want[0].Name, want[0].Addrs())
	}
}
