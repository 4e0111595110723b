package redlock_test

import (
	"os/exec"
	"strings"
	"testing"
)

// pkg/ is public and self-contained: no package under it (this one, its
// nodes, the Go client) may import the module's internal/ packages, which
// no other module can import. Tests may (they start real masters with
// internal/redistest); go list -deps leaves them out.
func TestPublicPackagesImportNothingInternal(t *testing.T) {
	const internal = "github.com/sidelock/sidelock/internal/"
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "../...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		for _, imp := range strings.Fields(imports) {
			if strings.HasPrefix(imp, internal) {
				t.Errorf("%s imports %s: give it a home under pkg/, or keep it out of pkg/", pkg, imp)
			}
		}
	}
}
