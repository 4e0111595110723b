package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Version is a release version as VERSION holds it and git tags it:
// vMAJOR.MINOR.PATCH, optionally -alpha.N, -beta.N or -rc.N. Each artifact
// writes it in its own form (Tag, SemVer, PEP440).
type Version struct {
	major, minor, patch string
	pre                 string // alpha, beta, rc or ""
	preN                string
}

var versionPattern = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-(alpha|beta|rc)\.(0|[1-9]\d*))?$`)

// ParseVersion reads a tag-form version ("v0.4.0", "v1.0.0-rc.1").
func ParseVersion(s string) (Version, error) {
	m := versionPattern.FindStringSubmatch(s)
	if m == nil {
		return Version{}, fmt.Errorf("version %q: want vMAJOR.MINOR.PATCH, optionally -alpha.N, -beta.N or -rc.N", s)
	}
	return Version{major: m[1], minor: m[2], patch: m[3], pre: m[4], preN: m[5]}, nil
}

// Tag is the git tag, the image tag, the binary's version and the chart's
// appVersion: v0.4.0, v1.0.0-rc.1.
func (v Version) Tag() string { return "v" + v.SemVer() }

// SemVer is the chart's version and the npm package's: 0.4.0, 1.0.0-rc.1.
func (v Version) SemVer() string {
	s := v.major + "." + v.minor + "." + v.patch
	if v.pre != "" {
		s += "-" + v.pre + "." + v.preN
	}
	return s
}

// PEP440 is the Python package's: 0.4.0, 1.0.0rc1 (alpha a1, beta b1).
func (v Version) PEP440() string {
	s := v.major + "." + v.minor + "." + v.patch
	short := map[string]string{"alpha": "a", "beta": "b", "rc": "rc"}
	if v.pre != "" {
		s += short[v.pre] + v.preN
	}
	return s
}

// form picks one of a version's spellings.
type form func(Version) string

// site is one place in the tree that spells the version: every match of
// pattern's first group in the file at path (relative to the repository
// root) is the version in that form.
type site struct {
	path    string
	pattern *regexp.Regexp
	form    form
	why     string
}

// sites are every copy of the version in the tree. VERSION is the source;
// `make version VERSION=vX.Y.Z` rewrites the others, make release stamps
// staged copies of the packages, and TestVersionsAgree fails when one
// disagrees.
var sites = []site{
	{"VERSION", regexp.MustCompile(`\A(\S+)\n\z`), Version.Tag, "the one source"},
	{"charts/sidelock/Chart.yaml", regexp.MustCompile(`(?m)^version: (\S+)$`), Version.SemVer, "the chart's version"},
	{"charts/sidelock/Chart.yaml", regexp.MustCompile(`(?m)^appVersion: "(\S+)"$`), Version.Tag, "the chart's appVersion, the sidecar's default image tag"},
	{"charts/sidelock/README.md", regexp.MustCompile(`(?m)^    version: (\S+)$`), Version.SemVer, "the chart dependency example"},
	{"internal/injector/testdata/sidecar.json", regexp.MustCompile(`ghcr\.io/sidelock/sidelock:([^"]+)"`), Version.Tag, "the injector's golden spec, rendered from the chart"},
	{"clients/python/pyproject.toml", regexp.MustCompile(`(?m)^version = "([^"]+)"$`), Version.PEP440, "the Python package"},
	{"clients/python/src/sidelock/__init__.py", regexp.MustCompile(`(?m)^__version__ = "([^"]+)"$`), Version.PEP440, "sidelock.__version__"},
	{"clients/node/package.json", regexp.MustCompile(`(?m)^  "version": "([^"]+)",$`), Version.SemVer, "the npm package"},
	{"clients/node/package-lock.json", regexp.MustCompile(`\A\{\n  "name": "sidelock",\n  "version": "([^"]+)",`), Version.SemVer, "the npm lockfile's root"},
	{"clients/node/package-lock.json", regexp.MustCompile(`"": \{\n      "name": "sidelock",\n      "version": "([^"]+)",`), Version.SemVer, "the npm lockfile's own package"},
	{"clients/python/README.md", regexp.MustCompile(`sidelock-(\S+)-py3-none-any\.whl`), Version.PEP440, "the wheel's name"},
	{"clients/node/README.md", regexp.MustCompile(`sidelock-node-(\S+)\.tgz`), Version.SemVer, "the npm tarball's name"},
	{"docs/clients.md", regexp.MustCompile(`sidelock-(\S+)-py3-none-any\.whl`), Version.PEP440, "the wheel's name"},
	{"docs/clients.md", regexp.MustCompile(`sidelock-node-(\S+)\.tgz`), Version.SemVer, "the npm tarball's name"},
	{"README.md", regexp.MustCompile(`--version (\S+) `), Version.SemVer, "helm install's --version"},
	{"docs/install.md", regexp.MustCompile(`--version (\S+) `), Version.SemVer, "helm install's --version"},
}

// mismatch is one copy that disagrees.
type mismatch struct {
	site site
	have string
	want string
}

func (m mismatch) String() string {
	return fmt.Sprintf("%s (%s): %q, want %q", m.site.path, m.site.why, m.have, m.want)
}

// check lists every copy under root that is not v (a missing file is one,
// unless skipMissing: a staged copy holds only some packages).
func check(root string, v Version, skipMissing bool) ([]mismatch, error) {
	var out []mismatch
	for _, s := range sites {
		b, err := os.ReadFile(filepath.Join(root, s.path))
		if os.IsNotExist(err) && skipMissing {
			continue
		}
		if err != nil {
			return nil, err
		}
		ms := s.pattern.FindAllSubmatch(b, -1)
		if len(ms) == 0 {
			out = append(out, mismatch{s, "(no match for " + s.pattern.String() + ")", s.form(v)})
		}
		for _, m := range ms {
			if string(m[1]) != s.form(v) {
				out = append(out, mismatch{s, string(m[1]), s.form(v)})
			}
		}
	}
	return out, nil
}

// stamp rewrites every copy under root to v (files that are missing are
// skipped: a staged copy holds only some packages).
func stamp(root string, v Version) error {
	for _, s := range sites {
		path := filepath.Join(root, s.path)
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if !s.pattern.Match(b) {
			return fmt.Errorf("%s: no match for %s", s.path, s.pattern)
		}
		out := s.pattern.ReplaceAllFunc(b, func(m []byte) []byte {
			sub := s.pattern.FindSubmatchIndex(m)
			return []byte(string(m[:sub[2]]) + s.form(v) + string(m[sub[3]:]))
		})
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// readVersion reads VERSION at root.
func readVersion(root string) (Version, error) {
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return Version{}, err
	}
	return ParseVersion(strings.TrimSpace(string(b)))
}
