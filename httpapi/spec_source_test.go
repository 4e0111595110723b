package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	gotoken "go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// typedSource is this package's non-test source, type-checked: the tests
// that hold the spec to the code read what the code can answer from it
// rather than from a list kept by hand next to it.
type typedSource struct {
	pkg   *types.Package
	files []*ast.File
	info  *types.Info
}

// loadTypedSource type-checks this package's non-test files against the
// export data the go command builds for its imports (go list -export).
func loadTypedSource(t *testing.T) *typedSource {
	t.Helper()
	exports := exportData(t)
	fset := gotoken.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, errors.New("no export data for " + path)
		}
		return os.Open(file)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", lookup)}
	pkg, err := conf.Check("github.com/sidelock/sidelock/httpapi", fset, files, info)
	if err != nil {
		t.Fatalf("type-checking httpapi: %v", err)
	}
	return &typedSource{pkg: pkg, files: files, info: info}
}

// exportData maps every import path this package depends on to its
// export data file.
func exportData(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	return exports
}

// constantsOf is the value of every constant of the named type declared
// in pkg (by name).
func constantsOf(pkg *types.Package, typeName string) map[string]string {
	out := map[string]string{}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		c, ok := scope.Lookup(name).(*types.Const)
		if !ok {
			continue
		}
		if named, ok := c.Type().(*types.Named); ok && named.Obj().Name() == typeName && named.Obj().Pkg() == pkg {
			out[name] = constantString(c)
		}
	}
	return out
}

func constantString(c *types.Const) string {
	s := c.Val().ExactString()
	return strings.Trim(s, `"`)
}

// importedPackage is the package at path among pkg's imports.
func importedPackage(t *testing.T, pkg *types.Package, path string) *types.Package {
	t.Helper()
	for _, p := range pkg.Imports() {
		if p.Path() == path {
			return p
		}
	}
	t.Fatalf("%s does not import %s", pkg.Path(), path)
	return nil
}

// usedCodes is every problem code the source uses outside the
// declarations of the codes: each is a code some path can answer. A code
// written as a literal, or computed, where a problemCode is expected
// cannot be checked against the spec and is reported in misuses.
func (s *typedSource) usedCodes() (used map[string]bool, misuses []string) {
	codeType := s.pkg.Scope().Lookup("problemCode").Type()
	used = map[string]bool{}
	for _, f := range s.files {
		ast.Inspect(f, func(n ast.Node) bool {
			if decl, ok := n.(*ast.GenDecl); ok && decl.Tok == gotoken.CONST {
				return false // the declarations themselves emit nothing
			}
			switch n := n.(type) {
			case *ast.Ident:
				if c, ok := s.info.Uses[n].(*types.Const); ok && types.Identical(c.Type(), codeType) {
					used[constantString(c)] = true
				}
			case *ast.BasicLit:
				if tv, ok := s.info.Types[n]; ok && types.Identical(tv.Type, codeType) {
					misuses = append(misuses, "the literal "+n.Value+" is used as a problem code: declare it with the others in encode.go")
				}
			case *ast.CallExpr:
				if tv, ok := s.info.Types[n.Fun]; ok && tv.IsType() && types.Identical(tv.Type, codeType) {
					misuses = append(misuses, "a problem code is computed by a conversion: use a declared code")
				}
			}
			return true
		})
	}
	return used, misuses
}
