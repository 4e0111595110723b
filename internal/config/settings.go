package config

// The settings table: the one place where each SIDELOCK_* variable's
// default and bounds are written. Everything else reads it:
//
//   - Load starts from Defaults, and Validate checks every Min, Max and
//     Values here; a bound that is another setting, and the rules between
//     settings that are not a plain bound (code in combination.go,
//     described in Rules), are CheckCombination's, which the injector
//     applies too;
//   - sidelock -h (Usage) and docs/configuration.md (WriteReference) are
//     generated from it;
//   - the injector (internal/injector) takes its per-pod annotations' keys
//     and bounds from it.
//
// Tests keep in step what cannot read it: the Config fields and their
// envconfig tags, the Helm chart's values.yaml, values.schema.json and
// sidecar template (settings_sync_test.go), the injector's annotations
// (internal/injector), and docs/configuration.md.
//
// A bound that a lower package enforces itself (internal/lease) is that
// package's exported constant, never a copy of its literal.

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/lease"
	"github.com/sidelock/sidelock/pkg/redlock"
)

// Setting is one SIDELOCK_* variable of the sidecar.
type Setting struct {
	// Env is the variable, SIDELOCK_ and the envconfig tag of its Config
	// field.
	Env string
	// Default is the value when the variable is unset, of the type of the
	// Config field (time.Duration, int, float64, bool, string); nil: none
	// (the zero value, and no default shown).
	Default any
	// Min and Max bound the value (nil: unbounded); Validate refuses
	// anything outside.
	Min, Max *Bound
	// Values are the words the setting accepts, for one that is a choice.
	Values []string
	// Doc says what the setting does (sidelock -h, docs/configuration.md).
	Doc string
	// Rules are what the value must also satisfy, in words: the checks of
	// Validate that are no plain bound (formats, relations between
	// settings).
	Rules string
	// Why ends Validate's refusal of a value outside the bounds.
	Why string
	// Chart is the Helm chart value that sets the variable
	// (charts/sidelock/values.yaml); "": the chart never sets it.
	Chart string
	// ChartDefault is the chart's default where it departs from Default
	// on purpose; nil: the chart's default is Default.
	ChartDefault any
	// Annotation is the pod annotation with which the injector overrides
	// the setting for one pod; "": none.
	Annotation string

	field int // index of the Config field
}

// Bound is one end of a setting's range: a fixed value, or the value of
// another setting.
type Bound struct {
	// Value is a fixed bound, of the setting's type.
	Value any
	// Setting is the variable whose value is the bound, when Value is nil.
	Setting string
	// Exclusive: the bound itself is outside the range.
	Exclusive bool
}

func atLeast[T number](v T) *Bound    { return &Bound{Value: v} }
func above[T number](v T) *Bound      { return &Bound{Value: v, Exclusive: true} }
func atMost[T number](v T) *Bound     { return &Bound{Value: v} }
func below[T number](v T) *Bound      { return &Bound{Value: v, Exclusive: true} }
func atMostSetting(env string) *Bound { return &Bound{Setting: env} }

type number interface{ ~int | ~int64 | ~float64 }

// Names the code refers to; those exported, the injector too (its
// annotations' settings).
const (
	EnvListenAddr      = envPrefix + "_LISTEN_ADDR"
	EnvAdminAddr       = envPrefix + "_ADMIN_ADDR"
	EnvKeyPrefix       = envPrefix + "_KEY_PREFIX"
	EnvDefaultTTL      = envPrefix + "_DEFAULT_TTL"
	EnvMaxTTL          = envPrefix + "_MAX_TTL"
	EnvLogLevel        = envPrefix + "_LOG_LEVEL"
	envDev             = envPrefix + "_DEV"
	envAPIToken        = envPrefix + "_API_TOKEN"
	envRedisAddrs      = envPrefix + "_REDIS_ADDRS"
	envRedisGroups     = envPrefix + "_REDIS_GROUPS"
	envRedisGroupsPrev = envPrefix + "_REDIS_GROUPS_PREVIOUS"
	envRedisTLS        = envPrefix + "_REDIS_TLS"
	envRedisTLSCAFile  = envPrefix + "_REDIS_TLS_CA_FILE"
	envRedisTLSCert    = envPrefix + "_REDIS_TLS_CERT_FILE"
	envRedisTLSKey     = envPrefix + "_REDIS_TLS_KEY_FILE"
	envNodeTimeout     = envPrefix + "_NODE_TIMEOUT"
	envKeyTTL          = envPrefix + "_KEY_TTL"
	envFenceBlock      = envPrefix + "_FENCE_BLOCK"
	envLinger          = envPrefix + "_LINGER"
	envFencing         = envPrefix + "_FENCING"
	envFenceRetention  = envPrefix + "_FENCE_RETENTION"
	envRestartGuard    = envPrefix + "_RESTART_GUARD"
	envMaxWaiters      = envPrefix + "_MAX_WAITERS"
	envLogFormat       = envPrefix + "_LOG_FORMAT"
	envReadyPolicy     = envPrefix + "_READY_POLICY"
	annotationsPrefix  = "sidelock.io/"
)

// settings is the table, in the order of the Config fields.
var settings = indexFields([]Setting{
	{Env: "SIDELOCK_DEV",
		Doc:   fmt.Sprintf("run with %d in-memory masters; nothing to install", DevMasters),
		Rules: "not with SIDELOCK_REDIS_ADDRS, SIDELOCK_REDIS_GROUPS or SIDELOCK_REDIS_GROUPS_PREVIOUS"},
	{Env: "SIDELOCK_LISTEN_ADDR", Default: "127.0.0.1:7420",
		Doc: "lock API address: host:port, on loopback unless SIDELOCK_API_TOKEN is set; or unix:///run/sidelock/api.sock, a Unix domain socket " +
			"with mode 0660 (the sidecar's user and group: in a pod, the containers sharing its fsGroup; see docs/api.md)",
		Rules: fmt.Sprintf("host:port with a loopback host (127.0.0.0/8, ::1, localhost) unless SIDELOCK_API_TOKEN is set; "+
			"or unix:// and an absolute path of at most %d bytes in an existing directory", MaxUnixSocketPath),
		Chart: "sidecar.listenPort", Annotation: annotationsPrefix + "listen-port"},
	{Env: "SIDELOCK_API_TOKEN",
		Doc:   "bearer token every lock API request must carry (Authorization: Bearer ...); required to listen beyond loopback",
		Rules: fmt.Sprintf("%d to %d bytes of printable ASCII without spaces", minAPITokenLen, maxAPITokenLen),
		Chart: "sidecar.apiToken.existingSecret"},
	{Env: "SIDELOCK_ADMIN_ADDR", Default: ":7421",
		Doc:   "healthz, readyz and metrics address",
		Rules: "host:port",
		Chart: "sidecar.adminPort", Annotation: annotationsPrefix + "admin-port"},
	{Env: "SIDELOCK_REDIS_ADDRS",
		Doc: "comma-separated N independent Redis masters, each host:port or redis://[user[:password]@]host:port (rediss:// with SIDELOCK_REDIS_TLS); " +
			"a URL's credentials are used for that master only and never shown (percent-encode , ; @ : / ? # in them)",
		Rules: "required unless SIDELOCK_DEV or SIDELOCK_REDIS_GROUPS (not both); no master twice",
		Chart: "redis.externalAddrs"},
	{Env: "SIDELOCK_REDIS_GROUPS",
		Doc: "instead of SIDELOCK_REDIS_ADDRS: quorum groups of independent masters, \"a1:6379,a2:6379,a3:6379;b1:6379,b2:6379,b3:6379\", " +
			"optionally named \"east=a1:6379,...\", each master host:port or a redis:// URL as in SIDELOCK_REDIS_ADDRS; each lock name lives in one group (rendezvous hashing)",
		Rules: "group names of 1-64 letters, digits, '_', '.' or '-'; no group name or master twice",
		Chart: "redis.externalGroups"},
	{Env: "SIDELOCK_REDIS_GROUPS_PREVIOUS",
		Doc:   "during a change of the group list: the list before the change; names that move are held in both groups (see docs/scale.md, migration rule)",
		Rules: "as SIDELOCK_REDIS_GROUPS; a group name means the same masters in both lists, a master is in one group only",
		Chart: "redis.previousGroups"},
	{Env: envReadyPolicy, Default: "all", Values: []string{"all", "any"},
		Doc:   "with several groups, /readyz is 200 while all groups (all) or at least one group (any) has a quorum",
		Chart: "sidecar.config.readyPolicy"},
	{Env: "SIDELOCK_REDIS_USERNAME",
		Doc:   "Redis ACL user of the masters listed as host:port (not with credentials in redis:// URLs)",
		Chart: "redis.auth.username"},
	{Env: "SIDELOCK_REDIS_PASSWORD",
		Doc:   "Redis password of the masters listed as host:port (not with credentials in redis:// URLs)",
		Chart: "redis.auth.password"},
	{Env: "SIDELOCK_REDIS_TLS",
		Doc:   "connect to the masters over TLS",
		Chart: "redis.tls.enabled"},
	{Env: "SIDELOCK_REDIS_TLS_CA_FILE",
		Doc:   "PEM CA bundle that signs the masters' certificates (default: system roots)",
		Rules: "only with SIDELOCK_REDIS_TLS",
		Chart: "redis.tls.caFile"},
	{Env: "SIDELOCK_REDIS_TLS_CERT_FILE",
		Doc:   "PEM client certificate for mutual TLS",
		Rules: "only with SIDELOCK_REDIS_TLS, and with SIDELOCK_REDIS_TLS_KEY_FILE",
		Chart: "redis.tls.certFile"},
	{Env: "SIDELOCK_REDIS_TLS_KEY_FILE",
		Doc:   "PEM client key for mutual TLS",
		Rules: "with SIDELOCK_REDIS_TLS_CERT_FILE",
		Chart: "redis.tls.keyFile"},
	// Below 2 there is no pipeline; above 64 a sidecar would hold more
	// connections than a master should give one pod, for pipelines that
	// coalescing keeps idle anyway.
	{Env: "SIDELOCK_REDIS_MAX_CONNS", Default: 2, Min: atLeast(2), Max: atMost(64),
		Doc: "command connections to each master, shared by every caller of the pod: one for pings and lone calls, " +
			"the others for pipelines of coalesced calls; the Pub/Sub connection for waiters comes on top",
		Why: ": one connection for pings and lone calls and at least one for pipelines; " +
			"every caller of the pod shares them, so more than a few rarely helps",
		Chart: "sidecar.config.redisMaxConns"},
	{Env: "SIDELOCK_KEY_PREFIX", Default: "sidelock:",
		Doc: "namespace of the keys on the masters",
		Rules: fmt.Sprintf("1 to %d bytes of A-Z a-z 0-9 . _ / - ending in its only ':', so that no two prefixes' keys collide",
			lease.MaxKeyPrefixLen),
		Chart: "sidecar.config.keyPrefix", Annotation: annotationsPrefix + "key-prefix"},
	{Env: "SIDELOCK_NODE_TIMEOUT", Default: 50 * time.Millisecond, Min: above(time.Duration(0)),
		Doc:   "bound on each call to one master",
		Rules: "at most a tenth of SIDELOCK_KEY_TTL, so renewals fit within the key ttl",
		Chart: "sidecar.config.nodeTimeout"},
	{Env: "SIDELOCK_DRIFT_FACTOR", Default: 0.01, Min: atLeast(0.0), Max: below(redlock.MaxDriftFactor),
		Doc:   "clock drift allowance, as a share of the key ttl (0 is taken as 0.01, the Redlock engine's default)",
		Chart: "sidecar.config.driftFactor"},
	{Env: "SIDELOCK_DEFAULT_TTL", Default: 30 * time.Second, Min: atLeast(lease.MinTTL), Max: atMostSetting(EnvMaxTTL),
		Doc:   "caller lease when none is asked for",
		Chart: "sidecar.config.defaultTTL", Annotation: annotationsPrefix + "default-ttl"},
	{Env: EnvMaxTTL, Default: time.Hour, Min: atLeast(lease.MinTTL),
		Doc:   "longest caller lease",
		Rules: "at least SIDELOCK_KEY_TTL and SIDELOCK_DEFAULT_TTL; at most SIDELOCK_FENCE_RETENTION when SIDELOCK_FENCING is on",
		Chart: "sidecar.config.maxTTL", Annotation: annotationsPrefix + "max-ttl"},
	{Env: envKeyTTL, Default: 10 * time.Second, Min: atLeast(lease.MinTTL), Max: atMostSetting(EnvMaxTTL),
		Doc:   "ttl of the keys on the masters, renewed every third of it",
		Rules: "at least ten times SIDELOCK_NODE_TIMEOUT",
		Chart: "sidecar.config.keyTTL"},
	{Env: "SIDELOCK_MAX_WAIT", Default: 5 * time.Minute, Min: atLeast(time.Duration(0)),
		Doc:   "longest wait for a held lock",
		Chart: "sidecar.config.maxWait"},
	{Env: "SIDELOCK_NO_QUORUM_RETRY", Default: 250 * time.Millisecond, Min: atLeast(time.Duration(0)), Max: atMost(lease.MaxNoQuorumRetry),
		Doc: "how long a try-once acquire retries rounds that found no quorum (a slow master, one being judged again) before answering 503 " +
			"(a waiting acquire retries until its wait ends)",
		Why:   ": an outage must still fail fast",
		Chart: "sidecar.config.noQuorumRetry"},
	{Env: "SIDELOCK_MAX_HOLD", Default: 24 * time.Hour, Min: atLeast(time.Duration(0)),
		Doc:   "cap on any lease's whole life, heartbeats or held connection alike (0: none)",
		Chart: "sidecar.config.maxHold"},
	{Env: "SIDELOCK_MAX_LOCKS", Default: 4096, Min: atLeast(1), Max: atMost(MaxMaxLocks),
		Doc:   "most leases held through this sidecar at once; beyond, acquire answers 429 too_many_locks",
		Chart: "sidecar.config.maxLocks"},
	{Env: envMaxWaiters, Default: 1024, Min: atLeast(1), Max: atMost(MaxMaxLocks),
		Doc:   "most callers waiting on this sidecar at once; beyond, a waiting acquire answers 429 too_many_waiters",
		Rules: "at least SIDELOCK_MAX_WAITERS_PER_NAME",
		Why:   " (use wait=0 to never wait)",
		Chart: "sidecar.config.maxWaiters"},
	{Env: "SIDELOCK_MAX_WAITERS_PER_NAME", Default: 0, Min: atLeast(0), Max: atMostSetting(envMaxWaiters),
		Doc: "most callers waiting for one lock name at once, so one hot name cannot take every waiting slot " +
			"(0: a quarter of SIDELOCK_MAX_WAITERS); beyond, 429 too_many_waiters",
		Why:   " (0: a quarter of it)",
		Chart: "sidecar.config.maxWaitersPerName"},
	{Env: "SIDELOCK_MAX_WATCHERS", Default: 256, Min: atLeast(1), Max: atMost(MaxMaxLocks),
		Doc: "most watch streams (GET /locks/{name}?watch=true) open on this sidecar at once; each watched name costs a read of the masters " +
			"every second; beyond, 429 too_many_watchers (every stream is also a connection under SIDELOCK_MAX_CONNS)",
		Chart: "sidecar.config.maxWatchers"},
	{Env: "SIDELOCK_MAX_CONNS", Default: 1024, Min: atLeast(MinMaxConns), Max: atMost(MaxMaxConns),
		Doc: "most lock API connections open at once (every waiter and held stream is one, so it bounds them too); " +
			"at the cap a connection that never sent a request or an idle keep-alive one is closed to make room, else the newcomer gets 429 overloaded; " +
			"must fit RLIMIT_NOFILE after a reserve for the masters and the admin listener",
		Why:   " (and fit RLIMIT_NOFILE, checked at start-up)",
		Chart: "sidecar.config.maxConns"},
	{Env: "SIDELOCK_FENCING", Default: true,
		Doc:   "give every grant a fencing token (a little more work per acquire; one more round to the masters when the fence proposal is refused)",
		Chart: "sidecar.config.fencing"},
	{Env: "SIDELOCK_FENCE_RETENTION", Default: time.Hour,
		Doc:   "how long a lock's fence counter outlives its last grant on a master",
		Rules: "at least SIDELOCK_MAX_TTL when SIDELOCK_FENCING is on",
		Chart: "sidecar.config.fenceRetention"},
	// Tenures (internal/lease/tenure.go, docs/fencing.md#tenures).
	{Env: envFenceBlock, Default: lease.DefaultFenceBlock, Min: atLeast(1), Max: atMost(lease.MaxFenceBlock),
		Doc: "fences a lock's grant reserves on the masters, so that the sidecar hands the lock from caller to caller of its pod " +
			"without a round to the masters until they are used up (1: every hand-over is a round)",
		Why:   ": a block reserves fences on the masters' counters",
		Chart: "sidecar.config.fenceBlock"},
	{Env: envLinger, Default: lease.DefaultLinger, Min: atLeast(time.Duration(0)),
		Doc: "how long the sidecar keeps a lock's keys after its last caller let go, to grant the next caller of its pod at once " +
			"(another sidecar that wants it gets it within one more round; 0: none)",
		Rules: fmt.Sprintf("at most %v of SIDELOCK_KEY_TTL", lease.MaxLingerShare),
		Chart: "sidecar.config.linger"},
	{Env: "SIDELOCK_WAITER_MARKS", Default: true,
		Doc: "leave a mark on the masters for this sidecar's waiting callers, and hand a lock inside the pod only to callers that arrived " +
			"before every other sidecar's mark (false: first come, first served inside the pod only)",
		Chart: "sidecar.config.waiterMarks"},
	{Env: "SIDELOCK_HEALTH_INTERVAL", Default: time.Second, Min: atLeast(10 * time.Millisecond),
		Doc:   "how often the masters are pinged for /readyz",
		Chart: "sidecar.config.healthInterval"},
	{Env: "SIDELOCK_HEALTH_INFO_MAX_AGE", Default: 10 * time.Second, Min: atLeast(time.Duration(0)), Max: atMost(time.Hour),
		Doc: "longest a master's server info (run id, role, persistence) is trusted while no connection to it was reopened; " +
			"rounds within it only ping (0: read it every round)",
		Why:   " (0: every round)",
		Chart: "sidecar.config.healthInfoMaxAge"},
	// A stall of the sidecar or of its machine misses pings of healthy
	// masters; above a minute a master that hangs would stay "up" too long.
	{Env: "SIDELOCK_HEALTH_DOWN_AFTER", Default: time.Second, Min: atLeast(time.Duration(0)), Max: atMost(time.Minute),
		Doc: "how long a master's pings must go unanswered (each within SIDELOCK_NODE_TIMEOUT) before it is called down for /readyz " +
			"and try-once acquires; meanwhile it is pinged every quarter of this (at least 100ms); a refused connection or an error reply " +
			"calls it down at once; lock calls count only the answers that come in time, whatever it says (0: at the first missed ping)",
		Why:   " (0: at the first missed ping)",
		Chart: "sidecar.config.healthDownAfter"},
	{Env: "SIDELOCK_SHUTDOWN_TIMEOUT", Default: 5 * time.Second, Min: above(time.Duration(0)),
		Doc:   "bound on ending held leases (their keys are left to lapse at the valid_until promised) and closing the listeners at shutdown",
		Chart: "sidecar.config.shutdownTimeout"},
	// In a cluster the logs go to a collector: the chart asks for JSON.
	{Env: envLogFormat, Default: "text", Values: []string{"text", "json"},
		Doc:   "log format: text is coloured, for humans; json is for log collectors",
		Chart: "sidecar.config.logFormat", ChartDefault: "json"},
	// The binary also takes slog's other spellings (INFO, warn+2);
	// the chart and the annotation take these words only.
	{Env: EnvLogLevel, Default: "info", Values: []string{"debug", "info", "warn", "error"},
		Doc:   "least severe level logged",
		Chart: "sidecar.config.logLevel", Annotation: annotationsPrefix + "log-level"},
	// The safety guards (package health) run in every health round.
	{Env: "SIDELOCK_MASTERS_PERSISTENT", Default: false,
		Doc:   "declare every master runs appendonly with appendfsync always, so a restarted master keeps its keys and needs no probation",
		Chart: "sidecar.config.mastersPersistent"},
	{Env: "SIDELOCK_RESTART_GUARD", Default: time.Duration(0),
		Doc: "how long a master that may have restarted empty is kept out of every quorum; 0 = SIDELOCK_KEY_TTL; " +
			"at least the longest SIDELOCK_KEY_TTL of the sidecars sharing the masters",
		Rules: "0 (the key ttl) or at least SIDELOCK_KEY_TTL",
		Chart: "sidecar.config.restartGuard"},
})

// Settings is the table: every SIDELOCK_* variable of the sidecar, in
// the order of the Config fields.
func Settings() []Setting { return slices.Clone(settings) }

// Lookup is the setting of the variable env.
func Lookup(env string) (Setting, bool) {
	i := slices.IndexFunc(settings, func(s Setting) bool { return s.Env == env })
	if i < 0 {
		return Setting{}, false
	}
	return settings[i], true
}

// Defaults is the configuration with every default of the table and
// nothing else set.
func Defaults() Config {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	for _, s := range settings {
		if s.Default != nil {
			v.Field(s.field).Set(reflect.ValueOf(s.Default))
		}
	}
	return c
}

// Field is the name of the setting's Config field.
func (s Setting) Field() string { return configType.Field(s.field).Name }

// Type is the Go type of the setting's value.
func (s Setting) Type() reflect.Type { return configType.Field(s.field).Type }

// Value is the setting's value in c.
func (s Setting) Value(c Config) any { return reflect.ValueOf(c).Field(s.field).Interface() }

// Set sets the setting's value in c; v is of the setting's type.
func (s Setting) Set(c *Config, v any) {
	reflect.ValueOf(c).Elem().Field(s.field).Set(reflect.ValueOf(v))
}

// Parse reads text as the setting's value, as Load does.
func (s Setting) Parse(text string) (any, error) {
	switch t := s.Type(); {
	case t == durationType:
		return time.ParseDuration(text)
	case t.Kind() == reflect.Int:
		n, err := strconv.ParseInt(text, 0, t.Bits())
		return int(n), err
	case t.Kind() == reflect.Float64:
		return strconv.ParseFloat(text, 64)
	case t.Kind() == reflect.Bool:
		return strconv.ParseBool(text)
	case t.Kind() == reflect.String:
		return text, nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return strings.Split(text, ","), nil
	default:
		return nil, fmt.Errorf("%s: no parser for %v", s.Env, t)
	}
}

// InFixedRange tells whether v (of the setting's type) is within the
// setting's fixed bounds; the bounds that are other settings are not
// checked.
func (s Setting) InFixedRange(v any) bool {
	return s.violated(v, func(b *Bound) any { return b.Value }) == nil
}

// FixedRange is the setting's fixed bounds in words ("at least 1s",
// "within [2, 64]"), or "" when it has none.
func (s Setting) FixedRange() string {
	lo, hi := fixedOnly(s.Min), fixedOnly(s.Max)
	return rangeText(lo, hi, func(b *Bound) string { return FormatValue(b.Value) })
}

// Range is all the setting's bounds in words ("at least 1s, at most
// SIDELOCK_MAX_TTL"), or "" when it has none.
func (s Setting) Range() string {
	return rangeText(s.Min, s.Max, func(b *Bound) string {
		if b.Setting != "" {
			return b.Setting
		}
		return FormatValue(b.Value)
	})
}

// Allowed is everything the value must be, in words: the range, the
// words accepted and the rules.
func (s Setting) Allowed() string {
	var parts []string
	if r := s.Range(); r != "" {
		parts = append(parts, r)
	}
	if len(s.Values) > 0 {
		parts = append(parts, OrList(s.Values))
	}
	if s.Rules != "" {
		parts = append(parts, s.Rules)
	}
	return strings.Join(parts, "; ")
}

func fixedOnly(b *Bound) *Bound {
	if b == nil || b.Setting != "" {
		return nil
	}
	return b
}

func rangeText(lo, hi *Bound, show func(*Bound) string) string {
	switch {
	case lo != nil && hi != nil && lo.Setting == "" && hi.Setting == "":
		open, closed := "[", "]"
		if lo.Exclusive {
			open = "("
		}
		if hi.Exclusive {
			closed = ")"
		}
		return "within " + open + show(lo) + ", " + show(hi) + closed
	case lo != nil && hi != nil:
		return minText(lo, show) + ", " + maxText(hi, show)
	case lo != nil:
		return minText(lo, show)
	case hi != nil:
		return maxText(hi, show)
	}
	return ""
}

func minText(b *Bound, show func(*Bound) string) string {
	switch {
	case b.Setting == "" && isZero(b.Value) && b.Exclusive:
		return "positive"
	case b.Setting == "" && isZero(b.Value):
		return "not negative"
	case b.Exclusive:
		return "above " + show(b)
	}
	return "at least " + show(b)
}

func maxText(b *Bound, show func(*Bound) string) string {
	if b.Exclusive {
		return "below " + show(b)
	}
	return "at most " + show(b)
}

// checkBounds refuses every value of c outside its setting's fixed bounds
// (a bound that is another setting is a rule between settings:
// CheckCombination).
func (c Config) checkBounds() []error {
	var errs []error
	for _, s := range settings {
		for _, b := range []*Bound{s.Min, s.Max} {
			if b == nil || b.Setting != "" {
				continue
			}
			if err := c.checkBound(s, b); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// checkBound refuses s's value in c when it breaks the bound b, one of
// s's.
func (c Config) checkBound(s Setting, b *Bound) error {
	v := s.Value(c)
	only := func(x *Bound) any {
		if x != b {
			return nil
		}
		return boundValue(c, b)
	}
	if s.violated(v, only) == nil {
		return nil
	}
	fixed := func(b *Bound) string { return FormatValue(b.Value) }
	var must string
	switch {
	case s.Min != nil && s.Max != nil && s.Min.Setting == "" && s.Max.Setting == "":
		must = "be " + s.Range()
	case b == s.Min && b.Setting == "" && isZero(b.Value) && !b.Exclusive:
		must = "not be negative"
	case b == s.Min && b.Setting == "":
		must = "be " + minText(b, fixed)
	case b == s.Min:
		must = fmt.Sprintf("be at least %s %v", b.Setting, boundValue(c, b))
	case b.Setting == "":
		must = "be " + maxText(b, fixed)
	default:
		must = fmt.Sprintf("not exceed %s %v", b.Setting, boundValue(c, b))
	}
	return fmt.Errorf("%s %v must %s%s", s.Env, v, must, s.Why)
}

// violated is the first of the setting's bounds that v breaks (nil:
// none), with value giving each bound's value (nil: not checked).
func (s Setting) violated(v any, value func(*Bound) any) *Bound {
	if b := s.Min; b != nil {
		if bv := value(b); bv != nil && (compare(v, bv) < 0 || b.Exclusive && compare(v, bv) == 0) {
			return b
		}
	}
	if b := s.Max; b != nil {
		if bv := value(b); bv != nil && (compare(v, bv) > 0 || b.Exclusive && compare(v, bv) == 0) {
			return b
		}
	}
	return nil
}

// boundValue is the value of b in c.
func boundValue(c Config, b *Bound) any {
	if b.Setting == "" {
		return b.Value
	}
	other, _ := Lookup(b.Setting) // indexFields checked it
	return other.Value(c)
}

// compare orders two values of one of the table's numeric types.
func compare(a, b any) int {
	switch a := a.(type) {
	case int:
		return cmp.Compare(a, b.(int))
	case float64:
		return cmp.Compare(a, b.(float64))
	case time.Duration:
		return cmp.Compare(a, b.(time.Duration))
	}
	panic(fmt.Sprintf("config: no order on %T", a))
}

func isZero(v any) bool { return v != nil && reflect.ValueOf(v).IsZero() }

// oneOf refuses a value of a choice setting that is none of its words.
func oneOf(env, v string) error {
	s, _ := Lookup(env)
	if slices.Contains(s.Values, v) {
		return nil
	}
	return fmt.Errorf("%s must be %s, not %q", env, OrList(s.Values), v)
}

// OrList joins words as "a, b or c".
func OrList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// FormatValue writes a setting's value as its variable would be set:
// durations in their shortest form ("1h", not "1h0m0s"; 0 as "0").
func FormatValue(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case time.Duration:
		if v == 0 {
			return "0"
		}
		s := v.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []string:
		return strings.Join(v, ",")
	}
	return fmt.Sprint(v)
}

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[time.Duration]()
)

// indexFields ties every row to its Config field by the envconfig tag,
// and stops the program on a table that does not fit Config: a row
// without a field or a field without a row, a default or a bound not of
// the field's type, a bound on a setting that does not exist.
func indexFields(table []Setting) []Setting {
	fields := map[string]int{}
	for i := range configType.NumField() {
		if tag, ok := configType.Field(i).Tag.Lookup("envconfig"); ok {
			fields[envPrefix+"_"+tag] = i
		}
	}
	bad := func(format string, args ...any) { panic(fmt.Sprintf("config: settings table: "+format, args...)) }
	for env := range fields {
		if !slices.ContainsFunc(table, func(s Setting) bool { return s.Env == env }) {
			bad("Config's %s has no row", env)
		}
	}
	if len(table) != len(fields) {
		bad("%d rows for %d fields with an envconfig tag", len(table), len(fields))
	}
	for i := range table {
		s := &table[i]
		f, ok := fields[s.Env]
		if !ok {
			bad("%s is no Config field's envconfig tag", s.Env)
		}
		s.field = f
		t := configType.Field(f).Type
		for what, v := range map[string]any{"default": s.Default, "chart default": s.ChartDefault} {
			if v != nil && reflect.TypeOf(v) != t {
				bad("%s: %s %v is a %T, the field a %v", s.Env, what, v, v, t)
			}
		}
		for _, b := range []*Bound{s.Min, s.Max} {
			switch {
			case b == nil:
			case (b.Value == nil) == (b.Setting == ""):
				bad("%s: a bound is a value or a setting", s.Env)
			case b.Value != nil && reflect.TypeOf(b.Value) != t:
				bad("%s: bound %v is a %T, the field a %v", s.Env, b.Value, b.Value, t)
			case b.Setting != "" && !slices.ContainsFunc(table, func(o Setting) bool {
				return o.Env == b.Setting && configType.Field(fields[o.Env]).Type == t
			}):
				bad("%s: bound %s is no setting of the same type", s.Env, b.Setting)
			}
		}
	}
	return table
}
