package sidecartest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// productModule is the module whose cmd/sidelock Build compiles.
const productModule = "github.com/sidelock/sidelock"

// Build compiles this repository's cmd/sidelock into a directory of t's own
// and returns the binary's path: tests then measure the binary a pod runs,
// not an in-process server. flags go to `go build` as they are (-race,
// -trimpath, -ldflags ...).
//
// There is no memo across calls: Go's build cache keeps a repeated build
// to its link step, and a binary in t.TempDir cannot outlive its test.
// A package that wants one build for all its tests builds in TestMain
// with BuildTo.
func Build(t testing.TB, flags ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sidelock")
	if err := BuildTo(bin, flags...); err != nil {
		t.Fatal(err)
	}
	return bin
}

// PrebuiltOrBuild is the binary the environment variable envVar names,
// when it is set, or else Build's: how a harness measures or checks
// another commit's binary (git archive of it, go build, point envVar at
// it) against the same tests.
func PrebuiltOrBuild(t testing.TB, envVar string, flags ...string) string {
	t.Helper()
	if bin := os.Getenv(envVar); bin != "" {
		return bin
	}
	return Build(t, flags...)
}

// BuildTo is Build for TestMain, which has no t: it writes the binary to
// out. It builds in the product's module (the repository root, found
// above the working directory), with the product's go.mod and go.sum: a
// harness in a module of its own (test/spec, test/deploy) must not lend
// its dependency versions to the binary under test. CGO_ENABLED=0 as for
// the release binaries and the image, unless flags ask for -race, which
// needs cgo.
func BuildTo(out string, flags ...string) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is needed to build the sidecar: %w", err)
	}
	cmd := exec.Command(gobin, slices.Concat([]string{"build"}, flags, []string{"-o", out, "./cmd/sidelock"})...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgoFor(flags))
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building the sidecar (go %s in %s): %w\n%s", strings.Join(cmd.Args[1:], " "), root, err, b)
	}
	return nil
}

// cgoFor is CGO_ENABLED for a build with flags: the race detector needs cgo;
// everything else builds static, as the release does.
func cgoFor(flags []string) string {
	if slices.Contains(flags, "-race") {
		return "1"
	}
	return "0"
}

// moduleRoot is the nearest directory at or above the working directory
// (a test's package directory) whose go.mod declares the product module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if declaresProduct(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + productModule + " at or above the working directory")
		}
		dir = parent
	}
}

// declaresProduct reports whether the go.mod at path is the product's.
func declaresProduct(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer func() { _ = f.Close() }() // read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == productModule
		}
	}
	return false
}
