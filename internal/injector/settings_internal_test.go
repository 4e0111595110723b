package injector

import (
	"strings"
	"testing"
	"time"

	"github.com/sidelock/sidelock/internal/config"
	"github.com/sidelock/sidelock/internal/lease"
)

// The annotations that override a sidecar setting are the settings
// table's: each row with an Annotation has that annotation here, and no
// other annotation claims a setting.
func TestAnnotationsAreTheSettingsTables(t *testing.T) {
	byKey := map[string]Annotation{}
	for _, a := range Annotations {
		byKey[a.Key] = a
		if a.Setting == "" {
			continue
		}
		if s, ok := config.Lookup(a.Setting); !ok || s.Annotation != a.Key {
			t.Errorf("annotation %s overrides %s, whose annotation in the settings table is %q", a.Key, a.Setting, s.Annotation)
		}
	}
	for _, s := range config.Settings() {
		if s.Annotation == "" {
			continue
		}
		if a, ok := byKey[s.Annotation]; !ok || a.Setting != s.Env {
			t.Errorf("the settings table gives %s the annotation %s; the injector has %+v", s.Env, s.Annotation, a)
		}
	}
}

// An annotation of a sidecar setting admits exactly the values with which
// the injected sidecar starts (config.Validate on its environment): at
// and beyond each bound of the settings table, and a few more. Ports are
// the injector's own rule (1-65535), so there it only admits values the
// sidecar takes.
func TestAnnotationsTakeWhatTheSidecarTakes(t *testing.T) {
	spec, err := LoadSpec("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range Annotations {
		if a.Setting == "" {
			continue
		}
		s, _ := config.Lookup(a.Setting)
		port := strings.HasSuffix(a.Key, "-port")
		for _, v := range probes(t, spec, s, port) {
			c, err := spec.newContainer()
			if err != nil {
				t.Fatal(err)
			}
			admitted := applyAnnotations(spec, c, entries(a.Key, v)) == nil
			if admitted {
				if err := sidecarStarts(t, c); err != nil {
					t.Errorf("%s: %q admitted, but the sidecar would refuse it: %v", a.Key, v, err)
				}
				continue
			}
			if port {
				continue
			}
			// Refused: the sidecar, given the value, refuses it too.
			c, _ = spec.newContainer()
			c.setEnv(s.Env, v)
			if sidecarStarts(t, c) == nil {
				t.Errorf("%s: %q refused, but the sidecar takes it as %s", a.Key, v, s.Env)
			}
		}
	}
}

// probes are values to try for the setting s: each side of each of its
// bounds in the settings table (another setting's bound as the spec sets
// that one), its words, and values of other kinds.
func probes(t *testing.T, spec *Spec, s config.Setting, port bool) []string {
	t.Helper()
	vs := []string{"", "30", "-5s", "0", "forever", "1h", "orders:", "a:b:", "sidelock:victim#", "verbose",
		strings.Repeat("p", lease.MaxKeyPrefixLen-1) + ":", strings.Repeat("p", lease.MaxKeyPrefixLen) + ":"}
	vs = append(vs, s.Values...)
	if port {
		return append(vs, "1", "7500", "65535", "65536", "+7421", "http")
	}
	c, _ := spec.newContainer()
	specValue := func(env string) any {
		text, ok := c.env(env)
		o, _ := config.Lookup(env)
		v, err := o.Parse(text)
		if !ok || err != nil {
			t.Fatalf("the spec sets %s to %q (%v)", env, text, err)
		}
		return v
	}
	var at []any
	for _, b := range []*config.Bound{s.Min, s.Max} {
		switch {
		case b == nil:
		case b.Setting != "":
			at = append(at, specValue(b.Setting))
		default:
			at = append(at, b.Value)
		}
	}
	// The settings bounded by this one.
	for _, o := range config.Settings() {
		for _, b := range []*config.Bound{o.Min, o.Max} {
			if b != nil && b.Setting == s.Env {
				at = append(at, specValue(o.Env))
			}
		}
	}
	for _, v := range at {
		d, ok := v.(time.Duration)
		if !ok {
			t.Fatalf("%s: no probes for a bound %v", s.Env, v)
		}
		vs = append(vs, config.FormatValue(d), config.FormatValue(d-time.Nanosecond), config.FormatValue(d+time.Nanosecond))
	}
	return vs
}

// entries are the annotations of a pod that has key: value.
func entries(key, value string) sidelockEntries {
	return sidelockEntries{kept: map[string]string{key: value}, prefixed: 1, any: true}
}

// sidecarStarts is the sidecar's verdict on the container's environment:
// Validate of the settings its literal values set (those from Secrets
// are not the injector's) over the defaults.
func sidecarStarts(t *testing.T, c container) error {
	t.Helper()
	cfg := config.Defaults()
	for _, e := range c.envList() {
		m, _ := e.(map[string]any)
		name, _ := m["name"].(string)
		text, literal := m["value"].(string)
		s, ok := config.Lookup(name)
		if !ok {
			t.Fatalf("the container sets %s, no setting of the sidecar", name)
		}
		if !literal {
			continue
		}
		v, err := s.Parse(text)
		if err != nil {
			return err
		}
		s.Set(&cfg, v)
	}
	return cfg.Validate()
}

// The duration annotations' refusal quotes the table's bound, as
// docs/kubernetes.md shows it.
func TestDurationAnnotationsQuoteTheTablesBound(t *testing.T) {
	spec, err := LoadSpec("testdata/sidecar.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{config.EnvDefaultTTL, config.EnvMaxTTL} {
		s, _ := config.Lookup(env)
		c, _ := spec.newContainer()
		err := applyAnnotations(spec, c, entries(s.Annotation, "30"))
		want := `"30" is not a duration of at least ` + config.FormatValue(s.Min.Value) + " (e.g. 30s, 5m, 1h)"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: 30: %v, want %q", s.Annotation, err, want)
		}
	}
}
