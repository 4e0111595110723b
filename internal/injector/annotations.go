package injector

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
)

// Labels and annotations of the injector.
const (
	// Prefix of every label and annotation the injector reads or writes.
	Prefix = "sidelock.io/"
	// InjectLabel set to OptIn opts a pod in, in any namespace; set to
	// OptOut, it keeps a pod of an opted-in namespace out. The webhook's
	// selectors match it (and the namespace label), so the API server
	// sends the injector no other pod. Injected pods carry it set to OptIn.
	InjectLabel = Prefix + "inject"
	OptIn       = "true"
	OptOut      = "false"
	// StatusAnnotation marks a pod the injector has handled, which makes
	// injection idempotent (reinvocation, replays).
	StatusAnnotation = Prefix + "status"
	// StatusInjected is the value of StatusAnnotation on injected pods.
	StatusInjected = "injected"
	// ComponentLabel set to ComponentInjector marks the injector's own
	// pods, which it never touches.
	ComponentLabel    = Prefix + "component"
	ComponentInjector = "injector"
)

// Annotation is one per-pod setting of the sidecar.
type Annotation struct {
	Key string // full annotation key
	// Setting is the SIDELOCK_* variable the annotation overrides, whose
	// row of the settings table (internal/config) gives the key and the
	// bounds; "" for an annotation of the container alone.
	Setting string
	Example string
	Help    string
	apply   func(o *overrides, v string) error
}

// overrides is a container being adjusted to a pod's annotations.
type overrides struct {
	c         container
	readiness bool
}

// Annotations are the settings a pod can tune, the same for every pod of
// the release otherwise. Deliberately few: what is safe to vary per pod.
// The key TTL, node timeout, masters and fencing are not among them: they
// must agree across every sidecar sharing the masters (the masters'
// restart delay is chosen against the key TTL), so they are chart values.
var Annotations = []Annotation{
	ofSetting(config.EnvDefaultTTL, "30s", "lock TTL when a request gives none", setDuration),
	ofSetting(config.EnvMaxTTL, "1h", "longest TTL a request may ask for", setDuration),
	ofSetting(config.EnvKeyPrefix, "orders:", "prefix of the lock keys in Redis", setKeyPrefix),
	ofSetting(config.EnvLogLevel, "debug", "", setLogLevel),
	ofPort(config.EnvListenAddr, "7420", "port of the lock API on 127.0.0.1, in", setListenPort),
	ofPort(config.EnvAdminAddr, "7421", "admin port (/healthz, /readyz, /metrics): containerPort sidelock-admin and", setAdminPort),
	{Key: Prefix + "readiness-probe", Example: "false", Help: "true or false: whether the sidecar's /readyz (quorum) counts toward the pod's readiness",
		apply: setReadiness},
	{Key: Prefix + "cpu-request", Example: "20m", Help: "resources.requests.cpu of the sidecar (a Kubernetes quantity)",
		apply: setResource("requests", "cpu")},
	{Key: Prefix + "memory-request", Example: "32Mi", Help: "resources.requests.memory",
		apply: setResource("requests", "memory")},
	{Key: Prefix + "cpu-limit", Example: "200m", Help: "resources.limits.cpu",
		apply: setResource("limits", "cpu")},
	{Key: Prefix + "memory-limit", Example: "128Mi", Help: "resources.limits.memory",
		apply: setResource("limits", "memory")},
}

// ofSetting is the annotation of the sidecar setting env: its key, and
// the bounds its value is checked against, are the setting's in the
// settings table; the help adds what it accepts there.
func ofSetting(env, example, help string, apply func(config.Setting) func(o *overrides, v string) error) Annotation {
	s := annotated(env)
	var parts []string
	for _, p := range []string{help, s.Allowed()} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	return Annotation{Key: s.Annotation, Setting: env, Example: example, Help: env + ": " + strings.Join(parts, "; "), apply: apply(s)}
}

// ofPort is the annotation that sets the port of the host:port setting
// env.
func ofPort(env, example, help string, apply func(config.Setting) func(o *overrides, v string) error) Annotation {
	s := annotated(env)
	return Annotation{Key: s.Annotation, Setting: env, Example: example, Help: fmt.Sprintf("%s %s (1-65535)", help, env), apply: apply(s)}
}

// annotated is the setting env, which the settings table gives an
// annotation.
func annotated(env string) config.Setting {
	s, ok := config.Lookup(env)
	if !ok || !strings.HasPrefix(s.Annotation, Prefix) {
		panic(fmt.Sprintf("injector: %s has no %s annotation in the settings table", env, Prefix))
	}
	return s
}

// errInvalid marks a problem with the pod (a denial), as opposed to a
// failure of the injector: errors.Is(err, errInvalid).
var errInvalid = errors.New("invalid pod")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == errInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// applyAnnotations applies the pod's sidelock.io annotations to c, then
// checks the combination, and returns the problems at once (the first few:
// see problemList). Unknown sidelock.io/ annotations are refused: a typo
// must not silently leave a default in place.
func applyAnnotations(s *Spec, c container, annotations sidelockEntries) error {
	if n := annotations.prefixed; n > maxSidelockAnnotations {
		return invalidf("%d %s annotations, at most %d (known: %s)", n, Prefix, maxSidelockAnnotations, strings.Join(annotationKeys(), ", "))
	}
	var problems problemList
	var unknown []string
	o := &overrides{c: c, readiness: s.ReadinessByDefault}
	for _, key := range slices.Sorted(maps.Keys(annotations.kept)) {
		if key == StatusAnnotation || key == InjectLabel {
			continue
		}
		i := slices.IndexFunc(Annotations, func(a Annotation) bool { return a.Key == key })
		if i < 0 {
			unknown = append(unknown, clip(key, maxQuotedBytes))
			continue
		}
		if err := applyAnnotation(Annotations[i], o, annotations.get(key)); err != nil {
			problems.add(err)
		}
	}
	if len(unknown) > 0 {
		problems.add(unknownAnnotations(unknown))
	}
	if !o.readiness {
		delete(c, "readinessProbe")
	}
	if problems.err() == nil {
		for _, err := range checkCombination(c) {
			problems.add(err)
		}
	}
	return problems.err()
}

// applyAnnotation applies one annotation; a value too long to be valid is
// refused without being quoted.
func applyAnnotation(a Annotation, o *overrides, value string) error {
	if len(value) > maxAnnotationValueBytes {
		return invalidf("%s: a value of %d bytes, at most %d", a.Key, len(value), maxAnnotationValueBytes)
	}
	if err := a.apply(o, value); err != nil {
		return invalidf("%s: %v", a.Key, err)
	}
	return nil
}

// unknownAnnotations is one problem for all the unknown keys, naming the
// first few and the known ones once.
func unknownAnnotations(keys []string) error {
	named := strings.Join(keys[:min(len(keys), maxReportedProblems)], ", ")
	if more := len(keys) - maxReportedProblems; more > 0 {
		named += fmt.Sprintf(" and %d more", more)
	}
	return invalidf("unknown annotation %s (known: %s)", named, strings.Join(annotationKeys(), ", "))
}

func annotationKeys() []string {
	keys := make([]string, len(Annotations))
	for i, a := range Annotations {
		keys[i] = a.Key
	}
	return keys
}

// setDuration checks a duration against the setting's fixed bounds (those
// that are another setting are checkCombination's).
func setDuration(s config.Setting) func(o *overrides, v string) error {
	within := s.FixedRange()
	if strings.HasPrefix(within, "at ") {
		within = "of " + within
	}
	return func(o *overrides, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || !s.InFixedRange(d) {
			return fmt.Errorf("%s is not a duration %s (e.g. 30s, 5m, 1h)", quote(v), within)
		}
		o.c.setEnv(s.Env, v)
		return nil
	}
}

// setKeyPrefix applies the sidecar's own rule (lease.ValidateKeyPrefix),
// so that a prefix it would refuse at start, or one whose keys could reach
// another prefix's fence counters, is refused at admission.
func setKeyPrefix(s config.Setting) func(o *overrides, v string) error {
	return func(o *overrides, v string) error {
		if err := lease.ValidateKeyPrefix(v); err != nil {
			return fmt.Errorf("%s %w", quote(v), err)
		}
		o.c.setEnv(s.Env, v)
		return nil
	}
}

// setLogLevel takes the words of the settings table (which the chart's
// schema takes), not every spelling the sidecar's parser would.
func setLogLevel(s config.Setting) func(o *overrides, v string) error {
	return func(o *overrides, v string) error {
		if !slices.Contains(s.Values, v) {
			return fmt.Errorf("%s is not %s", quote(v), config.OrList(s.Values))
		}
		o.c.setEnv(s.Env, v)
		return nil
	}
}

func parsePort(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return 0, fmt.Errorf("%s is not a port number (1-65535)", quote(v))
	}
	return n, nil
}

// withPort replaces the port of a host:port, keeping the host.
func withPort(addr string, port int) string {
	host, _, _ := net.SplitHostPort(addr) // checked by ParseSpec
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// setListenPort moves a listener to the annotation's port.
func setListenPort(s config.Setting) func(o *overrides, v string) error {
	return func(o *overrides, v string) error {
		if addr, _ := o.c.env(s.Env); isUnixSocket(addr) {
			return fmt.Errorf("does not apply: the sidecar serves the lock API on a Unix socket (the chart's sidecar.unixSocket), which has no port")
		}
		_, err := movePort(o, s, v)
		return err
	}
}

// setAdminPort moves the admin listener and its containerPort together;
// the probes follow, as they name the port.
func setAdminPort(s config.Setting) func(o *overrides, v string) error {
	return func(o *overrides, v string) error {
		n, err := movePort(o, s, v)
		if err != nil {
			return err
		}
		o.c.adminPort()["containerPort"] = json.Number(strconv.Itoa(n))
		return nil
	}
}

// movePort sets the port of setting s's host:port to v.
func movePort(o *overrides, s config.Setting, v string) (int, error) {
	n, err := parsePort(v)
	if err != nil {
		return 0, err
	}
	addr, _ := o.c.env(s.Env)
	o.c.setEnv(s.Env, withPort(addr, n))
	return n, nil
}

func setReadiness(o *overrides, v string) error {
	switch v {
	case "true", "false":
		o.readiness = v == "true"
		return nil
	}
	return fmt.Errorf("%s is not true or false", quote(v))
}

func setResource(kind, name string) func(o *overrides, v string) error {
	return func(o *overrides, v string) error {
		q, err := parseQuantity(v)
		if err != nil {
			return err
		}
		if q.Sign() <= 0 {
			return fmt.Errorf("%s is not positive", quote(v))
		}
		o.c.resources(kind)[name] = v
		return nil
	}
}

// checkCombination checks what the overrides may have broken: the rules
// between settings that the sidecar applies at start
// (config.CheckCombination), so that a bad combination is refused at
// admission instead of crash-looping the sidecar, and the container's own
// requests and limits.
func checkCombination(c container) []error {
	var errs []error
	cfg, known := configOf(c)
	for _, err := range config.CheckCombination(cfg, known) {
		errs = append(errs, invalidf("%v%s", err, settingsSource(err)))
	}
	for _, kind := range []string{"cpu", "memory"} {
		req, okReq := c.resource("requests", kind)
		lim, okLim := c.resource("limits", kind)
		if !okReq || !okLim {
			continue
		}
		r, err1 := parseQuantity(req)
		l, err2 := parseQuantity(lim)
		if err1 == nil && err2 == nil && r.Cmp(l) > 0 {
			errs = append(errs, invalidf("%s request %s exceeds its limit %s (%s-request, %s-limit)", kind, req, lim, Prefix+kind, Prefix+kind))
		}
	}
	return errs
}

// configOf is the sidecar's configuration as the container's environment
// gives it, the table's defaults for what it leaves out, and which
// settings have a value to judge: not those taken from elsewhere
// (valueFrom, a Secret) or that would not parse.
func configOf(c container) (config.Config, func(env string) bool) {
	cfg := config.Defaults()
	unknown := map[string]bool{}
	for _, s := range config.Settings() {
		text, given := c.env(s.Env)
		switch {
		case given:
			if v, err := s.Parse(text); err == nil {
				s.Set(&cfg, v)
			} else {
				unknown[s.Env] = true
			}
		case c.hasEnv(s.Env):
			unknown[s.Env] = true
		}
	}
	return cfg, func(env string) bool { return !unknown[env] }
}

// settingsSource names where the settings a broken rule involves are set
// for a pod: their annotations, or else their chart values.
func settingsSource(err error) string {
	var ce *config.CombinationError
	if !errors.As(err, &ce) {
		return ""
	}
	var where []string
	for _, env := range ce.Settings {
		if s, ok := config.Lookup(env); ok && s.Annotation != "" {
			where = append(where, s.Annotation)
		} else if ok && s.Chart != "" {
			where = append(where, s.Chart)
		}
	}
	if len(where) == 0 {
		return ""
	}
	return " (" + strings.Join(where, ", ") + ")"
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// quantityRE is the grammar of a Kubernetes resource quantity
// (k8s.io/apimachinery/pkg/api/resource): a signed decimal number and a
// binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or an exponent.
var quantityRE = regexp.MustCompile(`^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$`)

var suffixes = map[string]*big.Rat{
	"": big.NewRat(1, 1), "n": big.NewRat(1, 1e9), "u": big.NewRat(1, 1e6), "m": big.NewRat(1, 1e3),
	"k": big.NewRat(1e3, 1), "M": big.NewRat(1e6, 1), "G": big.NewRat(1e9, 1), "T": big.NewRat(1e12, 1),
	"P": big.NewRat(1e15, 1), "E": big.NewRat(1e18, 1),
	"Ki": big.NewRat(1<<10, 1), "Mi": big.NewRat(1<<20, 1), "Gi": big.NewRat(1<<30, 1), "Ti": big.NewRat(1<<40, 1),
	"Pi": big.NewRat(1<<50, 1), "Ei": big.NewRat(1<<60, 1),
}

// parseQuantity parses a Kubernetes quantity into an exact value.
func parseQuantity(s string) (*big.Rat, error) {
	m := quantityRE.FindStringSubmatch(s)
	if m == nil || len(s) > 32 {
		return nil, fmt.Errorf("%s is not a Kubernetes quantity (e.g. 100m, 0.5, 64Mi, 1G)", quote(s))
	}
	num, ok := new(big.Rat).SetString(m[1])
	if !ok {
		return nil, fmt.Errorf("%s is not a Kubernetes quantity", quote(s))
	}
	suffix := m[2]
	if f, ok := suffixes[suffix]; ok {
		return num.Mul(num, f), nil
	}
	exp, err := strconv.Atoi(suffix[1:])
	if err != nil || exp < -30 || exp > 30 {
		return nil, fmt.Errorf("%s: exponent out of range", quote(s))
	}
	pow := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(max(exp, -exp))), nil))
	if exp < 0 {
		pow.Inv(pow)
	}
	return num.Mul(num, pow), nil
}
