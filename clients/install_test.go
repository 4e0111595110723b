//go:build linux

package clients_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// packagesEnv names the directory of the built client packages: the Python
// sdist and wheel and the npm tarball (make clients-dist-test builds them as
// make release does; make release-install-test points at dist/).
const packagesEnv = "SIDELOCK_PACKAGES"

// TestInstalledPackages installs each built package the way a user would,
// into a clean environment: the wheel and the sdist each into a fresh
// virtualenv with no package index (pip install --no-index), the npm
// tarball into an empty npm project; then runs the client's example
// (examples/python/client.py, examples/node/client.mjs) from outside the
// tree against a real sidecar over three real masters. The version each
// package says at run time is the one its file is named for, and each
// installed package carries LICENSE.
func TestInstalledPackages(t *testing.T) {
	dir := os.Getenv(packagesEnv)
	if dir == "" {
		t.Skipf("set %s to a directory of built packages (make clients-dist-test, make release)", packagesEnv)
	}
	python, node, npm := need(t, "python3"), need(t, "node"), need(t, "npm")
	wheel, sdist, tarball := onePackage(t, dir, "sidelock-*-py3-none-any.whl"), onePackage(t, dir, "sidelock-[0-9]*.tar.gz"),
		onePackage(t, dir, "sidelock-node-*.tgz")
	pyVersion := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(wheel), "sidelock-"), "-py3-none-any.whl")
	npmVersion := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(tarball), "sidelock-node-"), ".tgz")
	examples, err := filepath.Abs("../examples")
	if err != nil {
		t.Fatal(err)
	}
	api := startSidecar(t)
	for _, pkg := range []struct{ name, file string }{{"wheel", wheel}, {"sdist", sdist}} {
		t.Run("python "+pkg.name, func(t *testing.T) {
			t.Parallel()
			venv := filepath.Join(t.TempDir(), "venv")
			run(t, "venv", ".", nil, python, "-m", "venv", venv)
			pip := []string{"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1"}
			run(t, "pip install", ".", pip, filepath.Join(venv, "bin", "pip"), "install", "--no-index", pkg.file)
			work := t.TempDir() // outside the tree: sidelock comes from the virtualenv
			out := run(t, "example", work, []string{"SIDELOCK_ADDR=" + api}, filepath.Join(venv, "bin", "python"), filepath.Join(examples, "python", "client.py"))
			for _, want := range []string{"sidelock " + pyVersion + ": holding examples/client-py", "released: True", "asyncio released: True"} {
				if !strings.Contains(out, want) {
					t.Errorf("the example printed no %q:\n%s", want, out)
				}
			}
			files := run(t, "metadata", work, nil, filepath.Join(venv, "bin", "python"), "-c",
				"import importlib.metadata as m; print(m.version('sidelock'), m.metadata('sidelock')['License'], [f.name for f in m.files('sidelock')])")
			if !strings.HasPrefix(files, pyVersion+" Apache-2.0 ") || !strings.Contains(files, "'LICENSE'") {
				t.Errorf("installed metadata: %s", files)
			}
		})
	}
	t.Run("npm tarball", func(t *testing.T) {
		t.Parallel()
		project := t.TempDir()
		npmEnv := []string{"npm_config_audit=false", "npm_config_fund=false", "npm_config_update_notifier=false"}
		run(t, "npm init", project, npmEnv, npm, "init", "-y")
		run(t, "npm install", project, npmEnv, npm, "install", "--ignore-scripts", tarball)
		example := writeFile(t, project, "client.mjs", readFile(t, filepath.Join(examples, "node", "client.mjs")))
		out := run(t, "example", project, []string{"SIDELOCK_ADDR=" + api}, node, example)
		for _, want := range []string{"sidelock " + npmVersion + ": holding examples/client-node", "released: true"} {
			if !strings.Contains(out, want) {
				t.Errorf("the example printed no %q:\n%s", want, out)
			}
		}
		if _, err := os.Stat(filepath.Join(project, "node_modules", "sidelock", "LICENSE")); err != nil {
			t.Errorf("the installed package has no LICENSE: %v", err)
		}
	})
}

// onePackage is the one file of dir that matches pattern.
func onePackage(t *testing.T, dir, pattern string) string {
	t.Helper()
	found, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(found) != 1 || !regexp.MustCompile(`\d`).MatchString(filepath.Base(found[0])) {
		t.Fatalf("want one %s in %s, found %v", pattern, dir, found)
	}
	return found[0]
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
