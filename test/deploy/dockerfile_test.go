package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"golang.org/x/mod/modfile"
)

const (
	repoRoot     = "../.."
	runtimeImage = "gcr.io/distroless/static-debian12:nonroot"
	nonrootUser  = "65532:65532" // distroless "nonroot"; numeric for runAsNonRoot
	goModCache   = "/go/pkg/mod"
	goBuildCache = "/root/.cache/go-build"
)

// parseDockerfile parses the Dockerfile with BuildKit's own parser and
// instruction decoder (what `docker build` runs first), failing on its
// warnings and lint findings (those of `docker build --check` that need no
// build context).
func parseDockerfile(t *testing.T) ([]instructions.Stage, []instructions.ArgCommand) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile: %s", w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		t.Errorf("Dockerfile lint %s: %s (%v)", rule, msg, loc)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatal(err)
	}
	return stages, metaArgs
}

func TestDockerfile(t *testing.T) {
	stages, metaArgs := parseDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("%d stages, want a builder and the runtime image", len(stages))
	}
	checkBuilder(t, stages[0], metaArgs)
	checkRuntime(t, stages[1], stages[0].Name)
}

// checkBuilder: a golang image matching go.mod, a static reproducible
// build of ./cmd/sidelock stamped with ARG VERSION, module and build caches
// in cache mounts.
func checkBuilder(t *testing.T, st instructions.Stage, metaArgs []instructions.ArgCommand) {
	t.Helper()
	image := expandArgs(st.BaseName, metaArgs)
	goVersion, ok := strings.CutPrefix(image, "golang:")
	if !ok {
		t.Fatalf("builder FROM %s, want golang:<go version>", image)
	}
	if want := goDirective(t); !strings.HasPrefix(goVersion+".", want+".") {
		t.Errorf("builder Go %s does not match go.mod's go %s", goVersion, want)
	}

	var builds int
	var versionDeclared bool
	for _, cmd := range st.Commands {
		switch c := cmd.(type) {
		case *instructions.ArgCommand:
			versionDeclared = versionDeclared || slices.ContainsFunc(c.Args, func(a instructions.KeyValuePairOptional) bool { return a.Key == "VERSION" })
		case *instructions.RunCommand:
			line := strings.Join(c.CmdLine, " ")
			if !regexp.MustCompile(`\bgo (build|mod|install|generate)\b`).MatchString(line) {
				continue
			}
			if !slices.Contains(cacheMounts(t, c), goModCache) {
				t.Errorf("%q: no cache mount on %s", line, goModCache)
			}
			if !strings.Contains(line, "go build") {
				continue
			}
			builds++
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w -X main.version=${VERSION}"`, "./cmd/sidelock"} {
				if !strings.Contains(line, want) {
					t.Errorf("go build %q lacks %s", line, want)
				}
			}
			if !slices.Contains(cacheMounts(t, c), goBuildCache) {
				t.Errorf("go build: no cache mount on %s", goBuildCache)
			}
			if !versionDeclared {
				t.Error("go build uses ${VERSION} before ARG VERSION in its stage")
			}
		}
	}
	if builds != 1 {
		t.Errorf("%d go build steps, want 1", builds)
	}
}

// checkRuntime: distroless, the binary alone, numeric non-root user,
// exec-form entrypoint, both ports.
func checkRuntime(t *testing.T, st instructions.Stage, builder string) {
	t.Helper()
	if st.BaseName != runtimeImage {
		t.Errorf("runtime FROM %s, want %s", st.BaseName, runtimeImage)
	}
	var user string
	var entrypoint *instructions.EntrypointCommand
	var ports []string
	var copied bool
	for _, cmd := range st.Commands {
		switch c := cmd.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.EntrypointCommand:
			entrypoint = c
		case *instructions.ExposeCommand:
			ports = append(ports, c.Ports...)
		case *instructions.CopyCommand:
			copied = copied || c.From == builder && c.DestPath == "/sidelock"
		case *instructions.RunCommand:
			t.Errorf("RUN in the runtime stage: distroless has no shell")
		}
	}
	if !copied {
		t.Errorf("runtime stage does not COPY --from=%s .. /sidelock", builder)
	}
	if user != nonrootUser {
		t.Errorf("USER %q, want %q", user, nonrootUser)
	}
	if entrypoint == nil || entrypoint.PrependShell || !slices.Equal(entrypoint.CmdLine, []string{"/sidelock"}) {
		t.Errorf("ENTRYPOINT must be exec form [\"/sidelock\"], is %+v", entrypoint)
	}
	_, listen := addrPort(defaultListenAddr)
	_, admin := addrPort("0.0.0.0" + defaultAdminAddr)
	if want := []string{fmt.Sprint(listen), fmt.Sprint(admin)}; !slices.Equal(slices.Sorted(slices.Values(ports)), want) {
		t.Errorf("EXPOSE %v, want %v", ports, want)
	}
}

// cacheMounts returns the targets of a RUN's cache mounts. Mount options
// are only fully parsed (and validated) on expansion; nothing in them needs
// a variable, so the identity expander does.
func cacheMounts(t *testing.T, c *instructions.RunCommand) []string {
	t.Helper()
	if err := c.Expand(func(word string) (string, error) { return word, nil }); err != nil {
		t.Errorf("RUN %v: %v", c.CmdLine, err)
	}
	var targets []string
	for _, m := range instructions.GetMounts(c) {
		if m.Type == instructions.MountTypeCache {
			targets = append(targets, m.Target)
		}
	}
	return targets
}

// expandArgs substitutes the defaults of global ARGs into a FROM image.
func expandArgs(s string, args []instructions.ArgCommand) string {
	for _, a := range args {
		for _, kv := range a.Args {
			if kv.Value != nil {
				s = strings.ReplaceAll(s, "${"+kv.Key+"}", *kv.Value)
				s = strings.ReplaceAll(s, "$"+kv.Key, *kv.Value)
			}
		}
	}
	return s
}

// goDirective returns major.minor of the root module's go directive.
func goDirective(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := modfile.ParseLax("go.mod", data, nil)
	if err != nil || f.Go == nil {
		t.Fatalf("root go.mod: no go directive (%v)", err)
	}
	parts := strings.SplitN(f.Go.Version, ".", 3)
	return strings.Join(parts[:min(2, len(parts))], ".")
}

// The build context carries the Go sources and nothing else of size.
func TestDockerignore(t *testing.T) {
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for path, sent := range map[string]bool{
		"go.mod": true, "go.sum": true,
		"cmd/sidelock/main.go": true, "pkg/redlock/redlock.go": true, "httpapi/encode.go": true,
		"internal/x/x.go": true,
		".git/HEAD":       false, "test/deploy/go.mod": false, "charts/sidelock/Chart.yaml": false,
		"k8s/kustomization.yaml": false, "pkg/redlock/redlock_test.go": false, "README.md": false,
		"tools/go.mod": false, "tools/scale-model/plot.go": false,
	} {
		excluded, err := pm.MatchesOrParentMatches(path)
		if err != nil {
			t.Fatal(err)
		}
		if excluded == sent {
			t.Errorf("%s: sent in the build context: %v, want %v", path, !excluded, sent)
		}
	}
}
