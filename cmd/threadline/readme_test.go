package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestReadmeFlagTable keeps the README's configuration table equal to
// `threadline help serve`: every flag in one is in the other, with the
// environment variable the help names.
func TestReadmeFlagTable(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The table is the one under "## Configuration", before its first
	// subsection (other sections have flag tables of other commands).
	_, table, ok := strings.Cut(string(readme), "\n## Configuration\n")
	if !ok {
		t.Fatal("the README has no Configuration section")
	}
	table, _, _ = strings.Cut(table, "\n### ")
	documented := map[string]string{} // flag → its env cell
	row := regexp.MustCompile("(?m)^\\| `--([a-z0-9-]+)` \\| ([^|]*) \\|")
	for _, m := range row.FindAllStringSubmatch(table, -1) {
		documented[m[1]] = m[2]
	}
	var help bytes.Buffer
	if err := run(context.Background(), []string{"help", "serve"}, &help, &help); err != nil {
		t.Fatal(err)
	}
	flagLine := regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`)
	envOf := regexp.MustCompile(`\(env ([A-Z0-9_]+)\)`)
	text := help.String()
	var flags []string
	for _, loc := range flagLine.FindAllStringSubmatchIndex(text, -1) {
		name := text[loc[2]:loc[3]]
		flags = append(flags, name)
		rest := text[loc[1]:]
		if next := flagLine.FindStringIndex(rest); next != nil {
			rest = rest[:next[0]]
		}
		cell, ok := documented[name]
		if !ok {
			t.Errorf("--%s is not in the README's configuration table", name)
			continue
		}
		if env := envOf.FindStringSubmatch(rest); env != nil && !strings.Contains(cell, "`"+env[1]+"`") {
			t.Errorf("--%s: the README names %s, the help %s", name, strings.TrimSpace(cell), env[1])
		}
	}
	for name := range documented {
		if !slices.Contains(flags, name) {
			t.Errorf("the README's table has --%s, which serve does not take", name)
		}
	}
}
