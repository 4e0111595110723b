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
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/sidelock/sidelock/internal/lease"
)

// Config is every setting, read from SIDELOCK_* environment variables.
type Config struct {
	Dev               bool          `envconfig:"DEV" desc:"run with 3 in-memory masters; nothing to install"`
	ListenAddr        string        `envconfig:"LISTEN_ADDR" default:"127.0.0.1:7420" desc:"lock API address; loopback unless SIDELOCK_API_TOKEN is set"`
	APIToken          string        `envconfig:"API_TOKEN" desc:"bearer token every lock API request must carry (Authorization: Bearer ...); required to listen beyond loopback"`
	AdminAddr         string        `envconfig:"ADMIN_ADDR" default:":7421" desc:"healthz, readyz and metrics address"`
	RedisAddrs        []string      `envconfig:"REDIS_ADDRS" desc:"comma-separated N independent Redis masters, each host:port or redis://[user[:password]@]host:port (rediss:// with SIDELOCK_REDIS_TLS); a URL's credentials are used for that master only and never shown (percent-encode , ; @ : / ? # in them)"`
	RedisGroups       string        `envconfig:"REDIS_GROUPS" desc:"instead of SIDELOCK_REDIS_ADDRS: quorum groups of independent masters, \"a1:6379,a2:6379,a3:6379;b1:6379,b2:6379,b3:6379\", optionally named \"east=a1:6379,...\", each master host:port or a redis:// URL as in SIDELOCK_REDIS_ADDRS; each lock name lives in one group (rendezvous hashing)"`
	RedisGroupsPrev   string        `envconfig:"REDIS_GROUPS_PREVIOUS" desc:"during a change of the group list: the list before the change; names that move are held in both groups (see docs/scale.md, migration rule)"`
	ReadyPolicy       string        `envconfig:"READY_POLICY" default:"all" desc:"with several groups, /readyz is 200 while all groups (all) or at least one group (any) has a quorum"`
	RedisUsername     string        `envconfig:"REDIS_USERNAME" desc:"Redis ACL user of the masters listed as host:port (not with credentials in redis:// URLs)"`
	RedisPassword     string        `envconfig:"REDIS_PASSWORD" desc:"Redis password of the masters listed as host:port (not with credentials in redis:// URLs)"`
	RedisTLS          bool          `envconfig:"REDIS_TLS" desc:"connect to the masters over TLS"`
	RedisTLSCAFile    string        `envconfig:"REDIS_TLS_CA_FILE" desc:"PEM CA bundle that signs the masters' certificates (default: system roots)"`
	RedisTLSCert      string        `envconfig:"REDIS_TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS"`
	RedisTLSKey       string        `envconfig:"REDIS_TLS_KEY_FILE" desc:"PEM client key for mutual TLS"`
	RedisMaxConns     int           `envconfig:"REDIS_MAX_CONNS" default:"2" desc:"command connections to each master, shared by every caller of the pod (2..64): one for pings and lone calls, the others for pipelines of coalesced calls; the Pub/Sub connection for waiters comes on top"`
	KeyPrefix         string        `envconfig:"KEY_PREFIX" default:"sidelock:" desc:"namespace of the keys on the masters"`
	NodeTimeout       time.Duration `envconfig:"NODE_TIMEOUT" default:"50ms" desc:"bound on each call to one master"`
	DriftFactor       float64       `envconfig:"DRIFT_FACTOR" default:"0.01" desc:"clock drift allowance, as a share of the key ttl"`
	DefaultTTL        time.Duration `envconfig:"DEFAULT_TTL" default:"30s" desc:"caller lease when none is asked for"`
	MaxTTL            time.Duration `envconfig:"MAX_TTL" default:"1h" desc:"longest caller lease"`
	KeyTTL            time.Duration `envconfig:"KEY_TTL" default:"10s" desc:"ttl of the keys on the masters, renewed every third of it"`
	MaxWait           time.Duration `envconfig:"MAX_WAIT" default:"5m" desc:"longest wait for a held lock"`
	NoQuorumRetry     time.Duration `envconfig:"NO_QUORUM_RETRY" default:"250ms" desc:"how long a try-once acquire retries rounds that found no quorum (a slow master, one being judged again) before answering 503 (0..5s; a waiting acquire retries until its wait ends)"`
	MaxHold           time.Duration `envconfig:"MAX_HOLD" default:"24h" desc:"cap on any lease's whole life, heartbeats or held connection alike (0: none)"`
	MaxLocks          int           `envconfig:"MAX_LOCKS" default:"4096" desc:"most leases held through this sidecar at once; beyond, acquire answers 429 too_many_locks"`
	MaxWaiters        int           `envconfig:"MAX_WAITERS" default:"1024" desc:"most callers waiting on this sidecar at once; beyond, a waiting acquire answers 429 too_many_waiters"`
	MaxWaitersPerName int           `envconfig:"MAX_WAITERS_PER_NAME" default:"0" desc:"most callers waiting for one lock name at once, so one hot name cannot take every waiting slot (0: a quarter of SIDELOCK_MAX_WAITERS); beyond, 429 too_many_waiters"`
	MaxConns          int           `envconfig:"MAX_CONNS" default:"1024" desc:"most lock API connections open at once (every waiter and held stream is one, so it bounds them too); at the cap a connection that never sent a request or an idle keep-alive one is closed to make room, else the newcomer gets 429 overloaded; must fit RLIMIT_NOFILE after a reserve for the masters and the admin listener"`
	Fencing           bool          `envconfig:"FENCING" default:"true" desc:"give every grant a fencing token (one more round to the masters on acquire)"`
	FenceRetention    time.Duration `envconfig:"FENCE_RETENTION" default:"1h" desc:"how long a lock's fence counter outlives its last grant on a master"`
	HealthInterval    time.Duration `envconfig:"HEALTH_INTERVAL" default:"1s" desc:"how often the masters are pinged for /readyz"`
	HealthInfoMaxAge  time.Duration `envconfig:"HEALTH_INFO_MAX_AGE" default:"10s" desc:"longest a master's server info (run id, role, persistence) is trusted while no connection to it was reopened; rounds within it only ping (0: read it every round)"`
	ShutdownTimeout   time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"5s" desc:"bound on ending held leases (their keys are left to lapse at the valid_until promised) and closing the listeners at shutdown"`
	LogFormat         string        `envconfig:"LOG_FORMAT" default:"text" desc:"text (coloured, for humans) or json"`
	LogLevel          string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`

	// The safety guards (package health) run in every health round.
	MastersPersistent bool          `envconfig:"MASTERS_PERSISTENT" default:"false" desc:"declare every master runs appendonly with appendfsync always, so a restarted master keeps its keys and needs no probation"`
	RestartGuard      time.Duration `envconfig:"RESTART_GUARD" default:"0" desc:"how long a master that may have restarted empty is kept out of every quorum; 0 = SIDELOCK_KEY_TTL; at least the longest SIDELOCK_KEY_TTL of the sidecars sharing the masters"`
}

const envPrefix = "SIDELOCK"

// Bounds of SIDELOCK_MAX_CONNS before the descriptor limit is known (it is
// checked against RLIMIT_NOFILE at start-up).
const (
	MinMaxConns = 16
	MaxMaxConns = 1 << 20
)

// DevMasters is how many in-memory masters dev mode runs: the smallest
// number with a real quorum.
const DevMasters = 3

// Bounds of SIDELOCK_REDIS_MAX_CONNS. Below 2 there is no pipeline; above 64 a sidecar would hold
// more connections than a master should give one pod, for pipelines that
// coalescing keeps idle anyway.
const (
	minRedisMaxConns = 2
	maxRedisMaxConns = 64
)

func Load() (Config, error) {
	var c Config
	if err := envconfig.Process(envPrefix, &c); err != nil {
		return c, fmt.Errorf("configuration: %w", err)
	}
	return c, nil
}

// validate stops start-up on any setting that cannot work, with one message
// naming every problem.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	switch {
	case c.Dev && len(c.RedisAddrs) > 0:
		bad("SIDELOCK_DEV runs in-memory masters: unset SIDELOCK_REDIS_ADDRS or SIDELOCK_DEV")
	case c.Dev && (c.RedisGroups != "" || c.RedisGroupsPrev != ""):
		bad("SIDELOCK_DEV runs in-memory masters: unset SIDELOCK_REDIS_GROUPS and SIDELOCK_REDIS_GROUPS_PREVIOUS or SIDELOCK_DEV")
	case len(c.RedisAddrs) > 0 && c.RedisGroups != "":
		bad("set SIDELOCK_REDIS_ADDRS (one quorum) or SIDELOCK_REDIS_GROUPS (several), not both")
	case !c.Dev && len(c.RedisAddrs) == 0 && c.RedisGroups == "":
		bad("SIDELOCK_REDIS_ADDRS is empty: list the Redis masters (host:port,...), or run with -dev")
	}
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
	if c.MaxLocks < 1 {
		bad("SIDELOCK_MAX_LOCKS %d must be at least 1", c.MaxLocks)
	}
	if c.RedisMaxConns < minRedisMaxConns || c.RedisMaxConns > maxRedisMaxConns {
		bad("SIDELOCK_REDIS_MAX_CONNS %d must be within [%d, %d]: one connection for pings and lone calls and at least one for pipelines; "+
			"every caller of the pod shares them, so more than a few rarely helps", c.RedisMaxConns, minRedisMaxConns, maxRedisMaxConns)
	}
	if c.MaxWaiters < 1 {
		bad("SIDELOCK_MAX_WAITERS %d must be at least 1 (use wait=0 to never wait)", c.MaxWaiters)
	}
	if c.MaxConns < MinMaxConns || c.MaxConns > MaxMaxConns {
		bad("SIDELOCK_MAX_CONNS %d must be within [%d, %d] (and fit RLIMIT_NOFILE, checked at start-up)", c.MaxConns, MinMaxConns, MaxMaxConns)
	}
	if c.MaxWaitersPerName < 0 || c.MaxWaitersPerName > c.MaxWaiters {
		bad("SIDELOCK_MAX_WAITERS_PER_NAME %d must be within [0, SIDELOCK_MAX_WAITERS %d] (0: a quarter of it)", c.MaxWaitersPerName, c.MaxWaiters)
	}
	if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
		bad("SIDELOCK_ADMIN_ADDR: %q is not host:port", c.AdminAddr)
	}
	errs = append(errs, c.validateTiming()...)
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("SIDELOCK_LOG_FORMAT must be text or json, not %q", c.LogFormat)
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		bad("SIDELOCK_LOG_LEVEL: %v", err)
	}
	if (c.RedisTLSCert == "") != (c.RedisTLSKey == "") {
		bad("SIDELOCK_REDIS_TLS_CERT_FILE and SIDELOCK_REDIS_TLS_KEY_FILE go together")
	}
	if !c.RedisTLS && (c.RedisTLSCAFile != "" || c.RedisTLSCert != "") {
		bad("TLS files are set but SIDELOCK_REDIS_TLS is false")
	}
	return errors.Join(errs...)
}

// validateTiming checks that renewal can work: a round to the masters must
// fit many times into the key ttl, and the key ttl within the caller's.
func (c Config) validateTiming() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.KeyTTL < time.Second {
		bad("SIDELOCK_KEY_TTL %v must be at least 1s", c.KeyTTL)
	}
	if c.KeyTTL > c.MaxTTL {
		bad("SIDELOCK_KEY_TTL %v must not exceed SIDELOCK_MAX_TTL %v", c.KeyTTL, c.MaxTTL)
	}
	if c.DefaultTTL < time.Second || c.DefaultTTL > c.MaxTTL {
		bad("SIDELOCK_DEFAULT_TTL %v must be within [1s, SIDELOCK_MAX_TTL %v]", c.DefaultTTL, c.MaxTTL)
	}
	if c.NodeTimeout <= 0 || c.NodeTimeout*10 > c.KeyTTL {
		bad("SIDELOCK_NODE_TIMEOUT %v must be positive and at most a tenth of SIDELOCK_KEY_TTL %v, so renewals fit within the key ttl", c.NodeTimeout, c.KeyTTL)
	}
	if c.DriftFactor < 0 || c.DriftFactor >= 0.5 {
		bad("SIDELOCK_DRIFT_FACTOR %v must be within [0, 0.5)", c.DriftFactor)
	}
	if c.FenceRetention < c.MaxTTL && c.Fencing {
		bad("SIDELOCK_FENCE_RETENTION %v must be at least SIDELOCK_MAX_TTL %v", c.FenceRetention, c.MaxTTL)
	}
	if c.MaxHold < 0 {
		bad("SIDELOCK_MAX_HOLD %v must not be negative", c.MaxHold)
	}
	if c.MaxWait < 0 {
		bad("SIDELOCK_MAX_WAIT %v must not be negative", c.MaxWait)
	}
	if c.NoQuorumRetry < 0 || c.NoQuorumRetry > lease.MaxNoQuorumRetry {
		bad("SIDELOCK_NO_QUORUM_RETRY %v must be within [0, %v]: an outage must still fail fast", c.NoQuorumRetry, lease.MaxNoQuorumRetry)
	}
	if c.RestartGuard != 0 && c.RestartGuard < c.KeyTTL {
		bad("SIDELOCK_RESTART_GUARD %v must be at least SIDELOCK_KEY_TTL %v (or 0 for the key ttl): a master that restarted empty must sit out until the keys it forgot would have lapsed", c.RestartGuard, c.KeyTTL)
	}
	if c.HealthInterval < 10*time.Millisecond {
		bad("SIDELOCK_HEALTH_INTERVAL %v must be at least 10ms", c.HealthInterval)
	}
	if c.HealthInfoMaxAge < 0 || c.HealthInfoMaxAge > time.Hour {
		bad("SIDELOCK_HEALTH_INFO_MAX_AGE %v must be between 0 (every round) and 1h", c.HealthInfoMaxAge)
	}
	if c.ShutdownTimeout <= 0 {
		bad("SIDELOCK_SHUTDOWN_TIMEOUT %v must be positive", c.ShutdownTimeout)
	}
	return errs
}

// restartGuard is how long the health checker keeps a master that may have
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

// checkListenAddr refuses to expose the lock API beyond the pod without
// an API token: anything that can reach it can take and release locks.
func (c Config) checkListenAddr() error {
	host, _, err := net.SplitHostPort(c.ListenAddr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", c.ListenAddr)
	}
	if isLoopback(host) || c.APIToken != "" {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address; anything that reaches the lock API can take and release locks, "+
		"so it listens beyond 127.0.0.1 or [::1] only when SIDELOCK_API_TOKEN is set", c.ListenAddr)
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

// tlsConfig builds the client TLS settings for the masters, verifying their
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

// Usage lists every setting with its default.
func Usage(w io.Writer) error {
	var c Config
	return envconfig.Usagef(envPrefix, &c, w, envconfig.DefaultTableFormat)
}

// ParseLevel reads SIDELOCK_LOG_LEVEL (and the injector's -log-level).
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return l, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}
