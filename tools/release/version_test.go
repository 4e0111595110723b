package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every copy of the version in the tree (the chart's version and
// appVersion, the injector's golden spec, both clients, the install docs)
// is VERSION's, in its own spelling.
func TestVersionsAgree(t *testing.T) {
	v, err := readVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := check("../..", v, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("%s", m)
	}
}

// The changelog has an entry for VERSION: a release says what it holds.
func TestChangelogHasTheVersion(t *testing.T) {
	v, err := readVersion("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if want := "## [" + v.Tag() + "]"; !strings.Contains("\n"+string(b), "\n"+want) {
		t.Errorf("CHANGELOG.md has no entry %q", want)
	}
}

func TestVersionForms(t *testing.T) {
	for _, c := range []struct{ in, tag, semver, pep440 string }{
		{"v0.4.0", "v0.4.0", "0.4.0", "0.4.0"},
		{"v1.10.2-rc.3", "v1.10.2-rc.3", "1.10.2-rc.3", "1.10.2rc3"},
		{"v2.0.0-alpha.1", "v2.0.0-alpha.1", "2.0.0-alpha.1", "2.0.0a1"},
		{"v2.0.0-beta.0", "v2.0.0-beta.0", "2.0.0-beta.0", "2.0.0b0"},
	} {
		v, err := ParseVersion(c.in)
		if err != nil {
			t.Fatalf("%s: %v", c.in, err)
		}
		if v.Tag() != c.tag || v.SemVer() != c.semver || v.PEP440() != c.pep440 {
			t.Errorf("%s: %s %s %s", c.in, v.Tag(), v.SemVer(), v.PEP440())
		}
	}
	for _, bad := range []string{"0.4.0", "v0.4", "v01.2.3", "v1.2.3-dev", "v1.2.3+meta", "v1.2.3-rc1", ""} {
		if _, err := ParseVersion(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// stamp rewrites every copy of a staged tree, and check then finds none
// that disagrees; files the stage lacks are skipped.
func TestStampRewritesEveryCopy(t *testing.T) {
	root := t.TempDir()
	for _, s := range sites {
		src, err := os.ReadFile(filepath.Join("../..", s.path))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, s.path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, _ := ParseVersion("v9.8.7-rc.6")
	if err := stamp(root, v); err != nil {
		t.Fatal(err)
	}
	ms, err := check(root, v, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Errorf("after stamp: %s", m)
	}
	if err := os.Remove(filepath.Join(root, "README.md")); err != nil {
		t.Fatal(err)
	}
	if err := stamp(root, v); err != nil {
		t.Errorf("a stage without README.md: %v", err)
	}
}
