package config

import (
	"fmt"
	"io"
	"strings"
)

// ReferencePath is where the configuration reference lives, from the
// repository's root.
const ReferencePath = "docs/configuration.md"

// RegenerateReference is the command that rewrites ReferencePath.
const RegenerateReference = "UPDATE_GOLDEN=1 go test ./internal/config -run TestConfigurationReference"

// WriteReference writes the configuration reference (ReferencePath), a
// Markdown page generated from the settings table.
func WriteReference(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# Configuration reference

<!-- Generated from the settings table (internal/config/settings.go); do not edit.
     Regenerate: %s -->

The sidecar is configured by the environment variables below (`+"`sidelock -h`"+`
lists them too). Each one's default and bounds are written in one place, the
settings table in `+"`internal/config/settings.go`"+`, which this page is generated
from; the start-up checks, the Helm chart's `+"`values.yaml`"+` and
`+"`values.schema.json`"+`, and the injector's per-pod annotations are tested
against it.

A value outside what the "Allowed" column says stops the sidecar at start-up
with one message naming every problem. In Kubernetes the chart sets each
variable from the "Helm value" (`+"`charts/sidelock/values.yaml`"+`; its schema
refuses out-of-range numbers at install), and the injector lets a pod
override the few with an "Annotation", refusing a value the sidecar would
refuse (see [kubernetes.md](kubernetes.md)).

| Variable | Default | Allowed | Helm value | Annotation | Meaning |
| --- | --- | --- | --- | --- | --- |
`, RegenerateReference)
	for _, s := range settings {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n",
			s.Env, code(FormatValue(s.Default)), cell(s.Allowed()), chartCell(s), portOf(code(s.Annotation), s.Annotation), cell(s.Doc))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// code is s as Markdown code, or a dash when empty.
func code(s string) string {
	if s == "" {
		return "—"
	}
	return "`" + s + "`"
}

func chartCell(s Setting) string {
	c := portOf(code(s.Chart), s.Chart)
	if s.ChartDefault != nil {
		c += " (default " + code(FormatValue(s.ChartDefault)) + ")"
	}
	return c
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	if s == "" {
		return "—"
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

// portOf marks a chart value or an annotation that sets the port of a
// host:port setting.
func portOf(cell, key string) string {
	if strings.HasSuffix(key, "Port") || strings.HasSuffix(key, "-port") {
		return cell + " (the port)"
	}
	return cell
}
