package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const doc = `# Performance

Written by hand.

<!-- bench:begin -->
| an old table |
<!-- bench:end -->

Also by hand.
`

func TestUpdateReplacesOnlyTheGeneratedSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "performance.md")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	table := "| target | measured |\n|---|---|\n| a | 1 × |\n"
	want := strings.Replace(doc, "| an old table |\n", table, 1)
	for run := range 2 { // the second run finds its own output: nothing changes
		if err := updateFile(path, table); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != want {
			t.Fatalf("run %d wrote\n%s\nwant\n%s", run+1, got, want)
		}
	}
}

func TestUpdateRefusesAFileWithoutOnePairOfMarkers(t *testing.T) {
	for name, text := range map[string]string{
		"no markers":     "# Performance\n\nno table here\n",
		"only the begin": "<!-- bench:begin -->\n| t |\n",
		"end before":     "<!-- bench:end -->\n| t |\n<!-- bench:begin -->\n",
		"two sections":   "<!-- bench:begin -->\n<!-- bench:end -->\n<!-- bench:begin -->\n<!-- bench:end -->\n",
		"not own lines":  "see <!-- bench:begin --> | t | <!-- bench:end -->\n",
	} {
		path := filepath.Join(t.TempDir(), "doc.md")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := updateFile(path, "| new |\n"); err == nil {
			t.Errorf("%s: updated, want refused", name)
		}
		if got, _ := os.ReadFile(path); string(got) != text {
			t.Errorf("%s: file changed to %q", name, got)
		}
	}
}
