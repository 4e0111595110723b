package config

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// validConfig is the defaults with masters to lock on.
func validConfig() Config {
	c := Defaults()
	c.RedisAddrs = []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}
	return c
}

func TestConfigValidation(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	cases := map[string]func(*Config){
		"empty masters":              func(c *Config) { c.RedisAddrs = nil },
		"dev with masters":           func(c *Config) { c.Dev = true },
		"master without port":        func(c *Config) { c.RedisAddrs = []string{"redis"} },
		"duplicate master":           func(c *Config) { c.RedisAddrs = []string{"a:1", "A:1"} },
		"public lock API":            func(c *Config) { c.ListenAddr = "0.0.0.0:7420" },
		"pod-IP lock API":            func(c *Config) { c.ListenAddr = "10.1.2.3:7420" },
		"key ttl above max ttl":      func(c *Config) { c.KeyTTL = 2 * time.Hour },
		"node timeout >= key ttl":    func(c *Config) { c.NodeTimeout = 10 * time.Second },
		"node timeout 1/5 key ttl":   func(c *Config) { c.NodeTimeout = 2 * time.Second },
		"default ttl above max":      func(c *Config) { c.DefaultTTL = 2 * time.Hour },
		"drift factor too large":     func(c *Config) { c.DriftFactor = 0.5 },
		"log format":                 func(c *Config) { c.LogFormat = "xml" },
		"log level":                  func(c *Config) { c.LogLevel = "loud" },
		"TLS files without TLS":      func(c *Config) { c.RedisTLSCAFile = "/ca.pem" },
		"client cert without key":    func(c *Config) { c.RedisTLS, c.RedisTLSCert = true, "/c.pem" },
		"key ttl below one second":   func(c *Config) { c.KeyTTL = 500 * time.Millisecond },
		"non-positive shutdown":      func(c *Config) { c.ShutdownTimeout = 0 },
		"health interval too short":  func(c *Config) { c.HealthInterval = time.Millisecond },
		"negative info max age":      func(c *Config) { c.HealthInfoMaxAge = -time.Second },
		"info max age above 1h":      func(c *Config) { c.HealthInfoMaxAge = 2 * time.Hour },
		"fence retention below ttl":  func(c *Config) { c.FenceRetention = time.Minute },
		"negative max hold":          func(c *Config) { c.MaxHold = -time.Second },
		"restart guard below ttl":    func(c *Config) { c.RestartGuard = 5 * time.Second },
		"negative restart guard":     func(c *Config) { c.RestartGuard = -time.Second },
		"short API token":            func(c *Config) { c.APIToken = "short" },
		"API token with a space":     func(c *Config) { c.APIToken = "0123456789 abcdef" },
		"API token with a newline":   func(c *Config) { c.APIToken = "0123456789abcdef\n" },
		"zero max locks":             func(c *Config) { c.MaxLocks = 0 },
		"zero max waiters":           func(c *Config) { c.MaxWaiters = 0 },
		"empty-host lock API":        func(c *Config) { c.ListenAddr = ":7420" },
		"max conns below 16":         func(c *Config) { c.MaxConns = 15 },
		"max conns above 2^20":       func(c *Config) { c.MaxConns = 1<<20 + 1 },
		"waiters per name above all": func(c *Config) { c.MaxWaitersPerName = c.MaxWaiters + 1 },
		"key prefix with #":          func(c *Config) { c.KeyPrefix = "sidelock:victim#" },
		"key prefix without colon":   func(c *Config) { c.KeyPrefix = "sidelock" },
		"key prefix with two colons": func(c *Config) { c.KeyPrefix = "a:b:" },
		"lock API on the admin port": func(c *Config) { c.ListenAddr = "127.0.0.1:7421" },
	}
	for name, mutate := range cases {
		c := validConfig()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	free := validConfig()
	free.ListenAddr, free.AdminAddr = "127.0.0.1:0", "127.0.0.1:0" // each any free port
	if err := free.Validate(); err != nil {
		t.Errorf("two free ports rejected: %v", err)
	}
	for _, ok := range []string{"127.0.0.1:7420", "[::1]:7420", "localhost:7420", "127.0.0.2:80"} {
		c := validConfig()
		c.ListenAddr = ok
		if err := c.Validate(); err != nil {
			t.Errorf("%s rejected: %v", ok, err)
		}
	}
}

// The restart guard defaults to the key ttl, the longest ttl sidelock sets
// on a master; in-memory masters cannot restart behind the process's back.
func TestRestartGuard(t *testing.T) {
	c := validConfig()
	if g := c.EffectiveRestartGuard(); g != c.KeyTTL {
		t.Errorf("default restart guard %v, want the key ttl %v", g, c.KeyTTL)
	}
	c.RestartGuard = time.Minute
	if err := c.Validate(); err != nil || c.EffectiveRestartGuard() != time.Minute {
		t.Errorf("restart guard 1m: %v, %v", c.EffectiveRestartGuard(), err)
	}
	c.Dev, c.RedisAddrs = true, nil
	if g := c.EffectiveRestartGuard(); g != 0 {
		t.Errorf("dev mode restart guard %v, want none", g)
	}
}

// The lock API listens beyond loopback only with an API token, and the
// refusal says how to fix it.
func TestNonLoopbackLockAPINeedsAToken(t *testing.T) {
	c := validConfig()
	c.ListenAddr = "0.0.0.0:7420"
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "SIDELOCK_API_TOKEN") {
		t.Fatalf("public lock API without a token: %v, want a refusal naming SIDELOCK_API_TOKEN", err)
	}
	const token = "s3cret-api-token-0123456789"
	c.APIToken = token
	for _, addr := range []string{"0.0.0.0:7420", "10.1.2.3:7420", ":7420", "[::]:7420"} {
		c.ListenAddr = addr
		if err := c.Validate(); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
}

// No start-up error quotes the API token or the Redis password, even when
// they are what is wrong.
func TestConfigErrorsNeverQuoteSecrets(t *testing.T) {
	c := validConfig()
	c.APIToken = "bad token zebra-7 0123456789"
	c.RedisPassword = "redis-pass-0123456789"
	c.KeyTTL = 2 * time.Hour // another problem, so the message lists several
	err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, secret := range []string{c.APIToken, "zebra-7", c.RedisPassword} {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("error quotes a secret (%q): %v", secret, err)
		}
	}
}

// sidelock -h documents the new settings.
func TestUsageListsTheLimitsAndTheToken(t *testing.T) {
	var out bytes.Buffer
	if err := Usage(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIDELOCK_API_TOKEN", "SIDELOCK_MAX_LOCKS", "SIDELOCK_MAX_WAITERS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %s", want)
		}
	}
}

func TestConfigRedisMaxConnsIsBounded(t *testing.T) {
	for conns, ok := range map[int]bool{-1: false, 0: false, 1: false, 2: true, 64: true, 65: false} {
		c := validConfig()
		c.RedisMaxConns = conns
		err := c.Validate()
		if ok != (err == nil) {
			t.Errorf("SIDELOCK_REDIS_MAX_CONNS=%d: validate() = %v", conns, err)
		}
		if want := fmt.Sprintf("SIDELOCK_REDIS_MAX_CONNS %d must be within [2, 64]", conns); err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("message %q does not say %q", err, want)
		}
	}
	t.Setenv("SIDELOCK_REDIS_ADDRS", "r1:6379")
	if c, err := Load(); err != nil || c.RedisMaxConns != 2 {
		t.Errorf("default SIDELOCK_REDIS_MAX_CONNS = %d, %v; want 2", c.RedisMaxConns, err)
	}
}

// Every rule between settings names settings of the table, so that the
// injector can tell which it can judge and where a pod sets them.
func TestCombinationRulesNameSettings(t *testing.T) {
	for _, r := range rules() {
		for _, env := range r.settings {
			if _, ok := Lookup(env); !ok {
				t.Errorf("a rule names %s, which is not in the settings table", env)
			}
		}
	}
}
