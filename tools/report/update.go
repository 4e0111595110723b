package main

import (
	"fmt"
	"os"
	"strings"
)

// The generated section of a document: the lines between these markers
// are the table of the last `make bench`; the text around them is written
// by hand and left alone.
const (
	beginMarker = "<!-- bench:begin -->"
	endMarker   = "<!-- bench:end -->"
)

// updateFile replaces the generated section of the file at path with table.
func updateFile(path, table string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceGenerated(string(text), table)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, []byte(out), st.Mode().Perm())
}

// replaceGenerated puts table (whole lines) between the one begin marker
// and the end marker after it, each marker on its own line; a text without
// exactly that pair is refused, so a misplaced or doubled marker never
// swallows hand-written text.
func replaceGenerated(text, table string) (string, error) {
	if n, m := strings.Count(text, beginMarker), strings.Count(text, endMarker); n != 1 || m != 1 {
		return "", fmt.Errorf("want one %s and one %s, found %d and %d", beginMarker, endMarker, n, m)
	}
	begin := strings.Index(text, beginMarker) + len(beginMarker)
	end := strings.Index(text, endMarker)
	if end < begin || !strings.HasPrefix(text[begin:], "\n") || (end > 0 && text[end-1] != '\n') {
		return "", fmt.Errorf("want %s and %s in that order, each on a line of its own", beginMarker, endMarker)
	}
	if table != "" && !strings.HasSuffix(table, "\n") {
		table += "\n"
	}
	return text[:begin] + "\n" + table + text[end:], nil
}
