package config

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// The table has one row per Config field, in the fields' order, named by
// the field's envconfig tag, with a default and bounds of the field's type
// (indexFields refuses the rest at init; this says which).
func TestSettingsTableIsConfig(t *testing.T) {
	var envs []string
	for i := range configType.NumField() {
		f := configType.Field(i)
		tag, ok := f.Tag.Lookup("envconfig")
		if !ok {
			t.Errorf("Config.%s has no envconfig tag: every field is a setting", f.Name)
			continue
		}
		if extra := strings.TrimSpace(strings.Replace(string(f.Tag), `envconfig:"`+tag+`"`, "", 1)); extra != "" {
			t.Errorf("Config.%s has tags %s besides envconfig: its default and description belong in the settings table", f.Name, extra)
		}
		envs = append(envs, envPrefix+"_"+tag)
	}
	var rows []string
	for _, s := range Settings() {
		rows = append(rows, s.Env)
		if s.Doc == "" {
			t.Errorf("%s has no Doc", s.Env)
		}
		if s.Default == nil && (s.Min != nil || s.Max != nil || len(s.Values) > 0) {
			t.Errorf("%s is bounded but has no default", s.Env)
		}
		if len(s.Values) > 0 && !slices.Contains(s.Values, s.Default.(string)) {
			t.Errorf("%s: default %v is none of %v", s.Env, s.Default, s.Values)
		}
		if s.Annotation != "" && !strings.HasPrefix(s.Annotation, annotationsPrefix) {
			t.Errorf("%s: annotation %s is not under %s", s.Env, s.Annotation, annotationsPrefix)
		}
	}
	if !slices.Equal(rows, envs) {
		t.Errorf("settings table rows %v,\nConfig fields' variables %v", rows, envs)
	}
}

// Load starts from the table's defaults: with no variable set it is
// Defaults, which pass Validate once masters are given.
func TestLoadTakesTheTablesDefaults(t *testing.T) {
	for _, s := range Settings() {
		unsetenv(t, s.Env)
		unsetenv(t, strings.TrimPrefix(s.Env, envPrefix+"_")) // envconfig's fallback name
	}
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Defaults()) {
		t.Errorf("Load() with nothing set = %+v,\nDefaults() = %+v", c, Defaults())
	}
	for _, s := range Settings() {
		if s.Default != nil && !reflect.DeepEqual(s.Value(c), s.Default) {
			t.Errorf("%s loaded as %v, default %v", s.Env, s.Value(c), s.Default)
		}
	}
	t.Setenv("SIDELOCK_REDIS_ADDRS", "a:6379,b:6379,c:6379")
	t.Setenv("SIDELOCK_KEY_TTL", "20s")
	c, err = Load()
	if err != nil || c.KeyTTL != 20*time.Second || c.MaxTTL != time.Hour || len(c.RedisAddrs) != 3 {
		t.Fatalf("Load() = %+v, %v", c, err)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the defaults with masters: %v", err)
	}
}

func unsetenv(t *testing.T, key string) {
	t.Setenv(key, "") // restored after the test
	os.Unsetenv(key)
}

// Every default reads back as itself from the form in which it is shown.
func TestDefaultsRoundTrip(t *testing.T) {
	for _, s := range Settings() {
		if s.Default == nil {
			continue
		}
		for _, v := range []any{s.Default, s.ChartDefault} {
			if v == nil {
				continue
			}
			got, err := s.Parse(FormatValue(v))
			if err != nil || !reflect.DeepEqual(got, v) {
				t.Errorf("%s: %v shown as %q reads as %v, %v", s.Env, v, FormatValue(v), got, err)
			}
		}
	}
}

// Validate enforces every bound of the table, fixed or another setting,
// refusing just beyond it with a message naming the setting, and taking
// the bound itself unless it is exclusive.
func TestValidateEnforcesTheTablesBounds(t *testing.T) {
	probed := 0
	for _, s := range Settings() {
		for _, b := range []*Bound{s.Min, s.Max} {
			if b == nil {
				continue
			}
			probed++
			c := validConfig()
			at := boundValue(c, b)
			beyond := step(at, b == s.Min)
			s.Set(&c, at)
			if err := complaintsAbout(c, s); (err != "") != b.Exclusive {
				t.Errorf("%s = %v (the bound, exclusive %v): %q", s.Env, at, b.Exclusive, err)
			}
			s.Set(&c, beyond)
			if err := complaintsAbout(c, s); err == "" {
				t.Errorf("%s = %v (beyond %v) accepted", s.Env, beyond, at)
			} else if b.Setting != "" && !strings.Contains(err, b.Setting) {
				t.Errorf("%s = %v: %q does not name the bound %s", s.Env, beyond, err, b.Setting)
			}
		}
	}
	if probed < 20 {
		t.Errorf("only %d bounds", probed)
	}
}

// step is the value next to v, below it or above it.
func step(v any, down bool) any {
	d := 1
	if down {
		d = -1
	}
	switch v := v.(type) {
	case int:
		return v + d
	case time.Duration:
		return v + time.Duration(d)
	case float64:
		return math.Nextafter(v, float64(d)*math.Inf(1))
	}
	panic(v)
}

// complaintsAbout is what Validate says of s (its lines that start with
// its name).
func complaintsAbout(c Config, s Setting) string {
	err := c.Validate()
	if err == nil {
		return ""
	}
	var mine []string
	for line := range strings.SplitSeq(err.Error(), "\n") {
		if strings.HasPrefix(line, s.Env+" ") {
			mine = append(mine, line)
		}
	}
	return strings.Join(mine, "\n")
}

// sidelock -h is the table: every variable with its default in the third
// column (test/abuse reads it there) and its range.
func TestUsageIsTheTable(t *testing.T) {
	var out bytes.Buffer
	if err := Usage(&out); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for line := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Split(line, "\t"); len(f) == 5 && strings.HasPrefix(f[0], envPrefix+"_") {
			rows[f[0]] = f
		}
	}
	for _, s := range Settings() {
		f, ok := rows[s.Env]
		switch {
		case !ok:
			t.Errorf("usage lacks %s", s.Env)
		case f[2] != FormatValue(s.Default):
			t.Errorf("usage: %s default %q, table %q", s.Env, f[2], FormatValue(s.Default))
		case !strings.Contains(f[4], s.Range()):
			t.Errorf("usage: %s %q does not say %q", s.Env, f[4], s.Range())
		}
	}
	if len(rows) != len(Settings()) {
		t.Errorf("usage has %d settings, the table %d", len(rows), len(Settings()))
	}
}

func TestFormatValue(t *testing.T) {
	for v, want := range map[any]string{
		time.Duration(0): "0", time.Hour: "1h", 90 * time.Minute: "1h30m", 5 * time.Minute: "5m", 24 * time.Hour: "24h",
		250 * time.Millisecond: "250ms", time.Hour + time.Second: "1h0m1s", 0.01: "0.01", 4096: "4096", true: "true", "all": "all",
	} {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

// docs/configuration.md is generated from the table.
func TestConfigurationReference(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReference(&b); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "..", ReferencePath)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || !bytes.Equal(got, b.Bytes()) {
		t.Errorf("%s is not what the settings table generates (%v); regenerate it with\n\t%s", ReferencePath, err, RegenerateReference)
	}
	for _, s := range Settings() {
		if !bytes.Contains(b.Bytes(), []byte("| `"+s.Env+"` |")) {
			t.Errorf("the reference lacks %s", s.Env)
		}
	}
}
