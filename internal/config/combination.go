package config

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
)

// The rules between settings, in one home: the binary checks them at
// start (Validate), the injector after a pod's annotations are applied
// (internal/injector), so that a combination the sidecar would refuse is
// refused at admission instead of crash-looping the sidecar.

// CombinationError is a rule between settings that a configuration
// breaks.
type CombinationError struct {
	Settings []string // the variables the rule involves
	Err      error
}

func (e *CombinationError) Error() string { return e.Err.Error() }

func (e *CombinationError) Unwrap() error { return e.Err }

// rule is one rule between settings: broken says how c breaks it (nil:
// it does not).
type rule struct {
	settings []string
	broken   func(c Config) error
}

// CheckCombination refuses every rule between settings that c breaks, each
// as a *CombinationError: the bounds of the settings table that are
// another setting (SIDELOCK_DEFAULT_TTL at most SIDELOCK_MAX_TTL...), and
// the rules below. known tells which settings have a value to judge (nil:
// all of them); a rule that involves one without (the injector cannot read
// a variable that comes from a Secret) is not checked.
func CheckCombination(c Config, known func(env string) bool) []error {
	if known == nil {
		known = func(string) bool { return true }
	}
	var errs []error
	for _, s := range settings {
		for _, b := range []*Bound{s.Min, s.Max} {
			if b == nil || b.Setting == "" || !known(s.Env) || !known(b.Setting) {
				continue
			}
			if err := c.checkBound(s, b); err != nil {
				errs = append(errs, &CombinationError{Settings: []string{s.Env, b.Setting}, Err: err})
			}
		}
	}
	for _, r := range rules() {
		if !allKnown(r.settings, known) {
			continue
		}
		if err := r.broken(c); err != nil {
			errs = append(errs, &CombinationError{Settings: r.settings, Err: err})
		}
	}
	return errs
}

func allKnown(envs []string, known func(string) bool) bool {
	for _, env := range envs {
		if !known(env) {
			return false
		}
	}
	return true
}

// rules are the rules between settings that are no bound of the table:
// where the masters come from, TLS files, the listeners, and timing (a
// round to the masters must fit many times into the key ttl, fence
// counters must outlive the leases, a master that restarted empty must sit
// out the keys it forgot).
func rules() []rule {
	return []rule{
		{[]string{envDev, envRedisAddrs}, func(c Config) error {
			return unless(!c.Dev || len(c.RedisAddrs) == 0, "SIDELOCK_DEV runs in-memory masters: unset SIDELOCK_REDIS_ADDRS or SIDELOCK_DEV")
		}},
		{[]string{envDev, envRedisGroups, envRedisGroupsPrev}, func(c Config) error {
			return unless(!c.Dev || c.RedisGroups == "" && c.RedisGroupsPrev == "",
				"SIDELOCK_DEV runs in-memory masters: unset SIDELOCK_REDIS_GROUPS and SIDELOCK_REDIS_GROUPS_PREVIOUS or SIDELOCK_DEV")
		}},
		{[]string{envRedisAddrs, envRedisGroups}, func(c Config) error {
			return unless(len(c.RedisAddrs) == 0 || c.RedisGroups == "", "set SIDELOCK_REDIS_ADDRS (one quorum) or SIDELOCK_REDIS_GROUPS (several), not both")
		}},
		{[]string{envDev, envRedisAddrs, envRedisGroups}, func(c Config) error {
			return unless(c.Dev || len(c.RedisAddrs) > 0 || c.RedisGroups != "",
				"SIDELOCK_REDIS_ADDRS is empty: list the Redis masters (host:port,...), or run with -dev")
		}},
		{[]string{EnvListenAddr, envAPIToken}, func(c Config) error {
			host, _, err := net.SplitHostPort(c.ListenAddr)
			_, unix := c.UnixSocket()
			return unless(unix || err != nil || isLoopback(host) || c.APIToken != "", fmt.Sprintf(
				"SIDELOCK_LISTEN_ADDR: %q is not a loopback address; anything that reaches the lock API can take and release locks, "+
					"so it listens beyond 127.0.0.1 or [::1] only when SIDELOCK_API_TOKEN is set", c.ListenAddr))
		}},
		{[]string{EnvListenAddr, EnvAdminAddr}, func(c Config) error {
			_, listen, err1 := net.SplitHostPort(c.ListenAddr)
			_, admin, err2 := net.SplitHostPort(c.AdminAddr)
			return unless(err1 != nil || err2 != nil || listen != admin || listen == "0", fmt.Sprintf( // 0: any free port
				"the lock API (SIDELOCK_LISTEN_ADDR=%s) and the admin port (SIDELOCK_ADMIN_ADDR=%s) must differ", c.ListenAddr, c.AdminAddr))
		}},
		{[]string{envRedisTLSCert, envRedisTLSKey}, func(c Config) error {
			return unless((c.RedisTLSCert == "") == (c.RedisTLSKey == ""), "SIDELOCK_REDIS_TLS_CERT_FILE and SIDELOCK_REDIS_TLS_KEY_FILE go together")
		}},
		{[]string{envRedisTLS, envRedisTLSCAFile, envRedisTLSCert}, func(c Config) error {
			return unless(c.RedisTLS || c.RedisTLSCAFile == "" && c.RedisTLSCert == "", "TLS files are set but SIDELOCK_REDIS_TLS is false")
		}},
		{[]string{envNodeTimeout, envKeyTTL}, func(c Config) error {
			return unless(c.NodeTimeout <= 0 || c.NodeTimeout*10 <= c.KeyTTL, fmt.Sprintf(
				"SIDELOCK_NODE_TIMEOUT %v must be positive and at most a tenth of SIDELOCK_KEY_TTL %v, so renewals fit within the key ttl", c.NodeTimeout, c.KeyTTL))
		}},
		{[]string{envFencing, envFenceRetention, EnvMaxTTL}, func(c Config) error {
			return unless(!c.Fencing || c.FenceRetention >= c.MaxTTL, fmt.Sprintf(
				"SIDELOCK_FENCE_RETENTION %v must be at least SIDELOCK_MAX_TTL %v", c.FenceRetention, c.MaxTTL))
		}},
		{[]string{envLinger, envKeyTTL}, func(c Config) error {
			most := time.Duration(float64(c.KeyTTL) * lease.MaxLingerShare)
			return unless(c.Linger <= most, fmt.Sprintf(
				"SIDELOCK_LINGER %v must be at most %v of SIDELOCK_KEY_TTL (%v): a sidecar that dies while it lingers keeps the lock "+
					"from others until its keys lapse", c.Linger, lease.MaxLingerShare, most))
		}},
		{[]string{envRestartGuard, envKeyTTL}, func(c Config) error {
			return unless(c.RestartGuard == 0 || c.RestartGuard >= c.KeyTTL, fmt.Sprintf(
				"SIDELOCK_RESTART_GUARD %v must be at least SIDELOCK_KEY_TTL %v (or 0 for the key ttl): "+
					"a master that restarted empty must sit out until the keys it forgot would have lapsed", c.RestartGuard, c.KeyTTL))
		}},
	}
}

// unless is a refusal saying why, unless ok.
func unless(ok bool, why string) error {
	if ok {
		return nil
	}
	return errors.New(why)
}
