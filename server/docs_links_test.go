package server_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The README is a landing page; the guides are in docs/. These tests keep
// it that way: the README stays short and links every guide, and every
// relative link of the README, the guides and conformance/README.md leads
// to a file that exists and, with a #fragment, to a heading of that file.

const readmeMaxLines = 300

func TestDocsReadmeIsALandingPage(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n >= readmeMaxLines {
		t.Errorf("README.md has %d lines; a landing page has under %d: move the detail to a guide in docs/", n, readmeMaxLines)
	}
	guides, err := filepath.Glob("../docs/*.md")
	if err != nil || len(guides) < 10 {
		t.Fatalf("docs/ holds %d guides (%v)", len(guides), err)
	}
	linked := map[string]bool{}
	for _, l := range markdownLinks(string(readme)) {
		path, _, _ := strings.Cut(l, "#")
		linked[filepath.Clean(path)] = true
	}
	for _, g := range guides {
		rel := filepath.Join("docs", filepath.Base(g))
		if !linked[rel] {
			t.Errorf("README.md does not link the guide %s", rel)
		}
	}
}

func TestDocsLinksResolve(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "../conformance/README.md")
	checked := 0
	for _, f := range files {
		problems, n := brokenLinks(f)
		checked += n
		for _, p := range problems {
			t.Error(p)
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d relative links: the parsing is off", checked)
	}
}

// The checker finds a missing file, a missing heading and a link into
// another file's missing heading, and accepts the good ones.
func TestDocsLinkCheckerFails(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.md", "# B\n\n## The `--agent` flag (short)\n\n```sh\n# not a heading\n```\n")
	write("a.md", "# A\n\n[ok](b.md) [ok](b.md#the---agent-flag-short) [ok](#a) `[not a link](nowhere.md)`\n"+
		"[bad](c.md) [bad](b.md#not-a-heading) [bad](#missing) [web](https://example.com/x.md)\n")
	problems, n := brokenLinks(filepath.Join(dir, "a.md"))
	if n != 6 || len(problems) != 3 {
		t.Fatalf("checked %d links, found %d problems, want 6 and 3:\n%s", n, len(problems), strings.Join(problems, "\n"))
	}
	for i, want := range []string{"c.md", "b.md#not-a-heading", "#missing"} {
		if !strings.Contains(problems[i], want) {
			t.Errorf("problem %d is %q, want one about %s", i, problems[i], want)
		}
	}
}

var linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// markdownLinks returns the link targets of a Markdown text outside code
// blocks and code spans that are not absolute URLs.
func markdownLinks(text string) []string {
	var links []string
	for _, line := range proseLines(text) {
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range linkTarget.FindAllStringSubmatch(line, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			links = append(links, target)
		}
	}
	return links
}

var codeSpan = regexp.MustCompile("`[^`]*`")

// proseLines returns the lines of a Markdown text outside fenced code
// blocks.
func proseLines(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// anchors returns the fragment ids GitHub gives a Markdown file's
// headings: lower case, punctuation other than - and _ dropped, spaces as
// -, and -1, -2, … after a repeated one.
func anchors(text string) map[string]bool {
	ids := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		trimmed := strings.TrimLeft(line, "#")
		if len(trimmed) == len(line) || len(line)-len(trimmed) > 6 || !strings.HasPrefix(trimmed, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(trimmed)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		id := b.String()
		if n := seen[id]; n > 0 {
			ids[fmt.Sprintf("%s-%d", id, n)] = true
		} else {
			ids[id] = true
		}
		seen[id]++
	}
	return ids
}

// brokenLinks checks the relative links of one Markdown file and returns
// what is wrong with them and how many it checked.
func brokenLinks(file string) (problems []string, checked int) {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{err.Error()}, 0
	}
	for _, l := range markdownLinks(string(text)) {
		checked++
		path, frag, hasFrag := strings.Cut(l, "#")
		target := file
		if path != "" {
			target = filepath.Join(filepath.Dir(file), path)
		}
		if _, err := os.Stat(target); err != nil {
			problems = append(problems, fmt.Sprintf("%s links %s, which does not exist", file, l))
			continue
		}
		if !hasFrag {
			continue
		}
		body, err := os.ReadFile(target)
		if err != nil || !strings.HasSuffix(target, ".md") {
			problems = append(problems, fmt.Sprintf("%s links %s: a fragment of a file that is not Markdown", file, l))
			continue
		}
		if ids := anchors(string(body)); !ids[frag] {
			problems = append(problems, fmt.Sprintf("%s links %s, but %s has no heading with the id %q", file, l, target, frag))
		}
	}
	return problems, checked
}
