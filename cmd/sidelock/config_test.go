package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

func validConfig() config {
	return config{
		RedisAddrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ListenAddr: "127.0.0.1:7420", AdminAddr: ":7421", KeyPrefix: "sidelock:",
		NodeTimeout: 50 * time.Millisecond, DriftFactor: 0.01, DefaultTTL: 30 * time.Second, MaxTTL: time.Hour,
		KeyTTL: 10 * time.Second, MaxWait: 5 * time.Minute, HealthInterval: time.Second, ShutdownTimeout: 5 * time.Second,
		LogFormat: "text", LogLevel: "info", Fencing: true, FenceRetention: time.Hour,
		MaxLocks: 4096, MaxWaiters: 1024, MaxConns: 1024, RedisMaxConns: 2, ReadyPolicy: "all",
	}
}

func TestConfigValidation(t *testing.T) {
	if err := validConfig().validate(); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	cases := map[string]func(*config){
		"empty masters":              func(c *config) { c.RedisAddrs = nil },
		"dev with masters":           func(c *config) { c.Dev = true },
		"master without port":        func(c *config) { c.RedisAddrs = []string{"redis"} },
		"duplicate master":           func(c *config) { c.RedisAddrs = []string{"a:1", "A:1"} },
		"public lock API":            func(c *config) { c.ListenAddr = "0.0.0.0:7420" },
		"pod-IP lock API":            func(c *config) { c.ListenAddr = "10.1.2.3:7420" },
		"key ttl above max ttl":      func(c *config) { c.KeyTTL = 2 * time.Hour },
		"node timeout >= key ttl":    func(c *config) { c.NodeTimeout = 10 * time.Second },
		"node timeout 1/5 key ttl":   func(c *config) { c.NodeTimeout = 2 * time.Second },
		"default ttl above max":      func(c *config) { c.DefaultTTL = 2 * time.Hour },
		"drift factor too large":     func(c *config) { c.DriftFactor = 0.5 },
		"log format":                 func(c *config) { c.LogFormat = "xml" },
		"log level":                  func(c *config) { c.LogLevel = "loud" },
		"TLS files without TLS":      func(c *config) { c.RedisTLSCAFile = "/ca.pem" },
		"client cert without key":    func(c *config) { c.RedisTLS, c.RedisTLSCert = true, "/c.pem" },
		"key ttl below one second":   func(c *config) { c.KeyTTL = 500 * time.Millisecond },
		"non-positive shutdown":      func(c *config) { c.ShutdownTimeout = 0 },
		"health interval too short":  func(c *config) { c.HealthInterval = time.Millisecond },
		"negative info max age":      func(c *config) { c.HealthInfoMaxAge = -time.Second },
		"info max age above 1h":      func(c *config) { c.HealthInfoMaxAge = 2 * time.Hour },
		"fence retention below ttl":  func(c *config) { c.FenceRetention = time.Minute },
		"negative max hold":          func(c *config) { c.MaxHold = -time.Second },
		"restart guard below ttl":    func(c *config) { c.RestartGuard = 5 * time.Second },
		"negative restart guard":     func(c *config) { c.RestartGuard = -time.Second },
		"short API token":            func(c *config) { c.APIToken = "short" },
		"API token with a space":     func(c *config) { c.APIToken = "0123456789 abcdef" },
		"API token with a newline":   func(c *config) { c.APIToken = "0123456789abcdef\n" },
		"zero max locks":             func(c *config) { c.MaxLocks = 0 },
		"zero max waiters":           func(c *config) { c.MaxWaiters = 0 },
		"empty-host lock API":        func(c *config) { c.ListenAddr = ":7420" },
		"max conns below 16":         func(c *config) { c.MaxConns = 15 },
		"max conns above 2^20":       func(c *config) { c.MaxConns = 1<<20 + 1 },
		"waiters per name above all": func(c *config) { c.MaxWaitersPerName = c.MaxWaiters + 1 },
		"key prefix with #":          func(c *config) { c.KeyPrefix = "sidelock:victim#" },
		"key prefix without colon":   func(c *config) { c.KeyPrefix = "sidelock" },
		"key prefix with two colons": func(c *config) { c.KeyPrefix = "a:b:" },
	}
	for name, mutate := range cases {
		c := validConfig()
		mutate(&c)
		if err := c.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, ok := range []string{"127.0.0.1:7420", "[::1]:7420", "localhost:7420", "127.0.0.2:80"} {
		c := validConfig()
		c.ListenAddr = ok
		if err := c.validate(); err != nil {
			t.Errorf("%s rejected: %v", ok, err)
		}
	}
}

// The restart guard defaults to the key ttl, the longest ttl sidelock sets
// on a master; in-memory masters cannot restart behind the process's back.
func TestRestartGuard(t *testing.T) {
	c := validConfig()
	if g := c.restartGuard(); g != c.KeyTTL {
		t.Errorf("default restart guard %v, want the key ttl %v", g, c.KeyTTL)
	}
	c.RestartGuard = time.Minute
	if err := c.validate(); err != nil || c.restartGuard() != time.Minute {
		t.Errorf("restart guard 1m: %v, %v", c.restartGuard(), err)
	}
	c.Dev, c.RedisAddrs = true, nil
	if g := c.restartGuard(); g != 0 {
		t.Errorf("dev mode restart guard %v, want none", g)
	}
}

// run stops at start-up with one message naming every bad setting.
func TestRunRejectsBadConfigWithOneMessage(t *testing.T) {
	t.Setenv("SIDELOCK_REDIS_ADDRS", "")
	t.Setenv("SIDELOCK_KEY_TTL", "2h")
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"sidelock"}, os.Getenv, &bytes.Buffer{}, &stderr)
	if err == nil {
		t.Fatal("started with no masters")
	}
	for _, want := range []string{"SIDELOCK_REDIS_ADDRS is empty", "SIDELOCK_KEY_TTL 2h0m0s must not exceed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	t.Setenv("SIDELOCK_KEY_TTL", "soon")
	if err := run(context.Background(), []string{"sidelock"}, os.Getenv, &bytes.Buffer{}, &stderr); err == nil || !strings.Contains(err.Error(), "KEY_TTL") {
		t.Fatalf("unparsable duration: %v", err)
	}
}

// Dev mode works with nothing installed and prints a curl quick start.
func TestRunDevModeServesAndStops(t *testing.T) {
	api, admin := freeAddr(t), freeAddr(t)
	t.Setenv("SIDELOCK_LISTEN_ADDR", api)
	t.Setenv("SIDELOCK_ADMIN_ADDR", admin)
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sidelock", "-dev"}, func(string) string { return "" }, &stdout, &stderr)
	}()
	eventually(t, 5*time.Second, "dev mode ready", func() bool {
		res, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			res.Body.Close()
		}
		return err == nil && res.StatusCode == 200
	})
	res, err := http.Post("http://"+api+"/locks/demo?ttl=30s", "", nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("acquire in dev mode: %v %v", res, err)
	}
	res.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(stdout.String(), "curl -s -X POST 'http://"+api+"/locks/demo?ttl=30s'") {
		t.Fatalf("no quick start on stdout: %q", stdout.String())
	}
}

func TestRunVersionAndUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"sidelock", "-version"}, os.Getenv, &out, &out); err != nil || !strings.Contains(out.String(), "sidelock") {
		t.Fatalf("-version: %v %q", err, out.String())
	}
	if err := run(context.Background(), []string{"sidelock", "frobnicate"}, os.Getenv, &out, &out); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// The lock API listens beyond loopback only with an API token, and the
// refusal says how to fix it.
func TestNonLoopbackLockAPINeedsAToken(t *testing.T) {
	c := validConfig()
	c.ListenAddr = "0.0.0.0:7420"
	err := c.validate()
	if err == nil || !strings.Contains(err.Error(), "SIDELOCK_API_TOKEN") {
		t.Fatalf("public lock API without a token: %v, want a refusal naming SIDELOCK_API_TOKEN", err)
	}
	const token = "s3cret-api-token-0123456789"
	c.APIToken = token
	for _, addr := range []string{"0.0.0.0:7420", "10.1.2.3:7420", ":7420", "[::]:7420"} {
		c.ListenAddr = addr
		if err := c.validate(); err != nil {
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
	err := c.validate()
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
	if err := envconfigUsage(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SIDELOCK_API_TOKEN", "SIDELOCK_MAX_LOCKS", "SIDELOCK_MAX_WAITERS"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("usage lacks %s", want)
		}
	}
}
