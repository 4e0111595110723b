// Package config is the sidecar's configuration: the SIDELOCK_* variables
// read into a Config (Load), checked (Validate) and described (Usage) from
// one settings table (settings.go), where each default and bound is
// written once.
package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/sidelock/sidelock/internal/lease"
)

// Config is every setting, read from SIDELOCK_* environment variables.
// The default, the bounds and the meaning of each are in the settings
// table (settings.go), the one place they are written; a field's
// envconfig tag names its variable there.
type Config struct {
	Dev               bool          `envconfig:"DEV"`
	ListenAddr        string        `envconfig:"LISTEN_ADDR"`
	APIToken          string        `envconfig:"API_TOKEN"`
	AdminAddr         string        `envconfig:"ADMIN_ADDR"`
	RedisAddrs        []string      `envconfig:"REDIS_ADDRS"`
	RedisGroups       string        `envconfig:"REDIS_GROUPS"`
	RedisGroupsPrev   string        `envconfig:"REDIS_GROUPS_PREVIOUS"`
	ReadyPolicy       string        `envconfig:"READY_POLICY"`
	RedisUsername     string        `envconfig:"REDIS_USERNAME"`
	RedisPassword     string        `envconfig:"REDIS_PASSWORD"`
	RedisTLS          bool          `envconfig:"REDIS_TLS"`
	RedisTLSCAFile    string        `envconfig:"REDIS_TLS_CA_FILE"`
	RedisTLSCert      string        `envconfig:"REDIS_TLS_CERT_FILE"`
	RedisTLSKey       string        `envconfig:"REDIS_TLS_KEY_FILE"`
	RedisMaxConns     int           `envconfig:"REDIS_MAX_CONNS"`
	KeyPrefix         string        `envconfig:"KEY_PREFIX"`
	NodeTimeout       time.Duration `envconfig:"NODE_TIMEOUT"`
	DriftFactor       float64       `envconfig:"DRIFT_FACTOR"`
	DefaultTTL        time.Duration `envconfig:"DEFAULT_TTL"`
	MaxTTL            time.Duration `envconfig:"MAX_TTL"`
	KeyTTL            time.Duration `envconfig:"KEY_TTL"`
	MaxWait           time.Duration `envconfig:"MAX_WAIT"`
	NoQuorumRetry     time.Duration `envconfig:"NO_QUORUM_RETRY"`
	MaxHold           time.Duration `envconfig:"MAX_HOLD"`
	MaxLocks          int           `envconfig:"MAX_LOCKS"`
	MaxWaiters        int           `envconfig:"MAX_WAITERS"`
	MaxWaitersPerName int           `envconfig:"MAX_WAITERS_PER_NAME"`
	MaxWatchers       int           `envconfig:"MAX_WATCHERS"`
	MaxConns          int           `envconfig:"MAX_CONNS"`
	Fencing           bool          `envconfig:"FENCING"`
	FenceRetention    time.Duration `envconfig:"FENCE_RETENTION"`
	FenceBlock        int           `envconfig:"FENCE_BLOCK"`
	Linger            time.Duration `envconfig:"LINGER"`
	WaiterMarks       bool          `envconfig:"WAITER_MARKS"`
	HealthInterval    time.Duration `envconfig:"HEALTH_INTERVAL"`
	HealthInfoMaxAge  time.Duration `envconfig:"HEALTH_INFO_MAX_AGE"`
	HealthDownAfter   time.Duration `envconfig:"HEALTH_DOWN_AFTER"`
	ShutdownTimeout   time.Duration `envconfig:"SHUTDOWN_TIMEOUT"`
	LogFormat         string        `envconfig:"LOG_FORMAT"`
	LogLevel          string        `envconfig:"LOG_LEVEL"`

	MastersPersistent bool          `envconfig:"MASTERS_PERSISTENT"`
	RestartGuard      time.Duration `envconfig:"RESTART_GUARD"`
}

const envPrefix = "SIDELOCK"

// Bounds of SIDELOCK_MAX_CONNS before the descriptor limit is known (it is
// checked against RLIMIT_NOFILE at start-up).
const (
	MinMaxConns = 16
	MaxMaxConns = 1 << 20
)

// MaxMaxLocks bounds SIDELOCK_MAX_LOCKS and SIDELOCK_MAX_WAITERS: far above
// any pod's need (each lease costs a few KiB), low enough that a typo
// cannot lift the memory bound that the chart's limit is derived from.
const MaxMaxLocks = 10_000_000

// DevMasters is how many in-memory masters dev mode runs: the smallest
// number with a real quorum.
const DevMasters = 3

// Load reads the configuration from the environment: the table's
// defaults (Defaults), and whatever variable is set instead. It does not
// validate.
func Load() (Config, error) {
	c := Defaults()
	// A field whose variable is unset is left as it is (the field has no
	// default tag: the table holds the defaults).
	if err := envconfig.Process(envPrefix, &c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// Validate stops start-up on any setting that cannot work, with one message
// naming every problem: every value outside its bounds in the settings
// table or of the wrong form, and the rules between settings
// (CheckCombination, which the injector applies too).
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	// The masters' entries, in SIDELOCK_REDIS_ADDRS too, are checked by
	// validateGroups (parseMasters), which never quotes one.
	errs = append(errs, c.validateGroups()...)
	if err := c.checkListenAddr(); err != nil {
		bad("SIDELOCK_LISTEN_ADDR: %v", err)
	}
	if err := checkAPIToken(c.APIToken); err != nil {
		bad("SIDELOCK_API_TOKEN: %v", err)
	}
	if err := lease.ValidateKeyPrefix(c.KeyPrefix); err != nil {
		bad("SIDELOCK_KEY_PREFIX %v", err)
	}
	errs = append(errs, c.checkBounds()...)
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
		bad("SIDELOCK_ADMIN_ADDR: %q is not host:port", c.AdminAddr)
	}
	errs = append(errs, CheckCombination(c, nil)...)
	if err := oneOf(envLogFormat, c.LogFormat); err != nil {
		errs = append(errs, err)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		bad("SIDELOCK_LOG_LEVEL: %v", err)
	}
	return errors.Join(errs...)
}

// EffectiveRestartGuard is how long the health checker keeps a master that may have
// restarted empty out of every quorum. In-memory masters live and die with
// the process, so they never come back empty behind its back.
func (c Config) EffectiveRestartGuard() time.Duration {
	switch {
	case c.Dev:
		return 0
	case c.RestartGuard == 0:
		return c.KeyTTL // the longest ttl sidelock sets on a master
	default:
		return c.RestartGuard
	}
}

// checkListenAddr checks the lock API's address: host:port, or a Unix
// socket's path (reached only through the filesystem, so it needs no API
// token; a host:port beyond loopback does: CheckCombination).
func (c Config) checkListenAddr() error {
	if path, ok := c.UnixSocket(); ok {
		return checkUnixSocketPath(path)
	}
	if strings.HasPrefix(c.ListenAddr, "unix:") {
		return fmt.Errorf("%q: a Unix socket is written %s and an absolute path, e.g. %s/run/sidelock/api.sock", c.ListenAddr, UnixScheme, UnixScheme)
	}
	if _, _, err := net.SplitHostPort(c.ListenAddr); err != nil {
		return fmt.Errorf("%q is neither host:port nor %s/absolute/path", c.ListenAddr, UnixScheme)
	}
	return nil // beyond loopback only with an API token: CheckCombination
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// API token bounds: short tokens can be guessed, and the token travels in
// an HTTP header, so it must be one header-safe word.
const (
	minAPITokenLen = 16
	maxAPITokenLen = 1024
)

// checkAPIToken validates the token without ever quoting it: start-up
// errors are logged, and the token must not be.
func checkAPIToken(token string) error {
	if token == "" {
		return nil
	}
	if len(token) < minAPITokenLen || len(token) > maxAPITokenLen {
		return fmt.Errorf("must be %d to %d bytes long (it has %d); generate one with `openssl rand -hex 32`", minAPITokenLen, maxAPITokenLen, len(token))
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] >= 0x7f {
			return fmt.Errorf("may contain only printable ASCII without spaces (byte %d is not)", i)
		}
	}
	return nil
}

// TLSConfig builds the client TLS settings for the masters, verifying their
// certificates against the CA file or the system roots.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.RedisTLS {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.RedisTLSCAFile != "" {
		pem, err := os.ReadFile(c.RedisTLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading SIDELOCK_REDIS_TLS_CA_FILE: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("SIDELOCK_REDIS_TLS_CA_FILE %s holds no PEM certificate", c.RedisTLSCAFile)
		}
	}
	if c.RedisTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(c.RedisTLSCert, c.RedisTLSKey)
		if err != nil {
			return nil, fmt.Errorf("loading the Redis client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Usage lists every setting from the settings table, a header and then
// one line each, in tab-separated columns: variable, type, default, an
// empty column (envconfig's "required", kept so that the default stays
// the third column, where readers of envconfig's table find it) and what
// it means with its range. `sidelock help serve` aligns it.
func Usage(w io.Writer) error {
	var b strings.Builder
	b.WriteString("VARIABLE\tTYPE\tDEFAULT\t\tMEANING\n")
	for _, s := range settings {
		doc := s.Doc
		if r := s.Range(); r != "" {
			doc += "; " + r
		}
		if len(s.Values) > 0 {
			doc += "; " + OrList(s.Values)
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t\t%s\n", s.Env, typeName(s.Type()), FormatValue(s.Default), doc)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// typeName names a setting's type for Usage.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType:
		return "Duration"
	case t.Kind() == reflect.Slice:
		return "List of " + typeName(t.Elem()) // comma-separated, as each setting's meaning says
	case t.Kind() == reflect.Bool:
		return "True or False"
	case t.Kind() == reflect.Int:
		return "Integer"
	case t.Kind() == reflect.Float64:
		return "Float"
	}
	return "String"
}

// ParseLevel reads SIDELOCK_LOG_LEVEL (and the injector's -log-level).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		levels, _ := Lookup(EnvLogLevel)
		return l, fmt.Errorf("%q is not %s", s, OrList(levels.Values))
	}
	return l, nil
}
