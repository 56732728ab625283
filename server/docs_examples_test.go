package server_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/server/servertest"
)

// TestDocsShellExamplesRun runs the ```sh examples of the README and the
// guides in docs/ with bash, as a reader follows a guide: one server per
// file, its examples in order. It checks what each command prints against
// the output the example gives for it.
//
// An example that cannot run here says so in the guide: the line before
// its fence is <!-- not run: why -->. Every other ```sh block runs:
//
//   - The examples' server (localhost:8080, 127.0.0.1:8080, or the address
//     a block starts one on) is the test's: a line that starts a server in
//     the background (`… serve … &`) is left out, and the address it
//     serves on is the test's server's.
//   - The native event stream (/instance-ai/events/…) stays open for live
//     events, so the reader stops it; here it is read for
//     docsStreamWindow and stopped. Every other request is bounded too.
//   - A command's expected output is the comment lines right after it
//     that look like output: the first starts with "# {", "# [", "# data:",
//     "# id:" or "# event:"; the next are indented ("#  …"), elided
//     ("# …") or look like output too. A comment of other words (an
//     explanation) ends it.
//   - In the expected output, … and ... stand for any text within a line
//     (a whole line of them for any lines), and a backup name's
//     YYYYMMDD_HHMMSS time for any such time. JSON output
//     (starting with { or [) is compared whole, its lines joined; other
//     output (an SSE stream) must hold the expected lines in order,
//     blank lines aside.
func TestDocsShellExamplesRun(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	for _, tool := range []string{"curl", "python3"} {
		if _, err := exec.LookPath(tool); err != nil && os.Getenv("CI") != "true" {
			t.Skipf("%s is not installed", tool)
		}
	}
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	ran, skipped := 0, 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var run []shellBlock
		for _, b := range shellBlocks(string(text)) {
			if b.notRun != "" {
				skipped++
			} else {
				run = append(run, b)
			}
		}
		if len(run) == 0 {
			continue
		}
		ran += len(run)
		name := strings.TrimPrefix(f, "../")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := start(t, servertest.OpenStore(t, "memory"), servertest.Options{Logs: io.Discard})
			for _, b := range run {
				t.Run(strconv.Itoa(b.line), func(t *testing.T) { runShellExample(t, bash, h.URL, b) })
			}
		})
	}
	if ran < 5 || skipped == 0 {
		t.Fatalf("ran %d examples and skipped %d: the parsing is off", ran, skipped)
	}
}

const docsStreamWindow = 700 * time.Millisecond

type shellBlock struct {
	line   int    // of the opening fence, 1-based
	notRun string // the reason of a <!-- not run: … --> marker
	steps  []shellStep
}

type shellStep struct {
	command  string
	expected []string // the output lines, without their "# "
}

var (
	notRunMarker = regexp.MustCompile(`^<!-- not run: (.+) -->$`)
	outputStart  = regexp.MustCompile(`^# (\{|\[|data: |id: |event: )`)
	outputMore   = regexp.MustCompile(`^#  |^# (…|\.\.\.)$`)
	startsServer = regexp.MustCompile(`\bserve\b.*&\s*$`)
	// The addresses the examples' server listens on.
	docsAddr = regexp.MustCompile(`(localhost|127\.0\.0\.1):(8080|18437)\b`)
)

// shellBlocks returns the ```sh blocks of a Markdown text, parsed into
// commands and their expected output.
func shellBlocks(text string) []shellBlock {
	var blocks []shellBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		b := shellBlock{line: i + 1}
		for j := i - 1; j >= 0; j-- {
			if prev := strings.TrimSpace(lines[j]); prev != "" {
				if m := notRunMarker.FindStringSubmatch(prev); m != nil {
					b.notRun = m[1]
				}
				break
			}
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		inOutput := false
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			line := strings.TrimPrefix(lines[i], indent)
			switch {
			case strings.TrimSpace(line) == "":
				inOutput = false
			case strings.HasPrefix(line, "#"):
				n := len(b.steps)
				if n > 0 && (outputStart.MatchString(line) || inOutput && outputMore.MatchString(line)) &&
					(inOutput || len(b.steps[n-1].expected) == 0) {
					b.steps[n-1].expected = append(b.steps[n-1].expected, strings.TrimPrefix(line, "# "))
					inOutput = true
				} else {
					inOutput = false
				}
			default:
				inOutput = false
				cmd := line
				for strings.HasSuffix(strings.TrimSpace(line), `\`) && i+1 < len(lines) {
					i++
					line = strings.TrimPrefix(lines[i], indent)
					cmd += "\n" + line
				}
				b.steps = append(b.steps, shellStep{command: cmd})
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// runShellExample runs one block against the server at url and checks
// each step's output.
func runShellExample(t *testing.T, bash, url string, b shellBlock) {
	addr := strings.TrimPrefix(url, "http://")
	dir := t.TempDir()
	var script strings.Builder
	fmt.Fprintf(&script, `set -eu
curl() {
	case "$*" in
	*/instance-ai/events/*) command curl --max-time %.1f "$@" || [ $? = 28 ] ;;
	*) command curl --max-time 20 "$@" ;;
	esac
}
`, docsStreamWindow.Seconds())
	for i, s := range b.steps {
		if startsServer.MatchString(s.command) {
			continue
		}
		fmt.Fprintf(&script, "{\n%s\n} >%q\n", docsAddr.ReplaceAllString(s.command, addr), filepath.Join(dir, strconv.Itoa(i)+".out"))
	}
	cmd := exec.Command(bash, "-c", script.String())
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("the example failed: %v\n%s\nscript:\n%s", err, stderr.String(), script.String())
	}
	for i, s := range b.steps {
		if len(s.expected) == 0 {
			continue
		}
		out, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)+".out"))
		if err != nil {
			t.Fatal(err)
		}
		if !outputMatches(s.expected, string(out)) {
			t.Errorf("%s\nprinted:\n%s\nthe guide says:\n%s", s.command, out, strings.Join(s.expected, "\n"))
		}
	}
}

var wildcard = regexp.MustCompile(`…|\.\.\.|_\d{8}_\d{6}`)

// linePattern turns one line of expected output into a regular expression.
func linePattern(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range wildcard.FindAllStringIndex(s, -1) {
		b.WriteString(regexp.QuoteMeta(s[last:m[0]]))
		if s[m[0]] == '_' {
			b.WriteString(`_\d{8}_\d{6}(?:_\d+)?`)
		} else {
			b.WriteString(`[^\n]*?`)
		}
		last = m[1]
	}
	b.WriteString(regexp.QuoteMeta(s[last:]))
	return b.String()
}

// outputMatches reports whether a command printed the expected output.
func outputMatches(expected []string, out string) bool {
	if first := expected[0]; strings.HasPrefix(first, "{") || strings.HasPrefix(first, "[") {
		var joined strings.Builder
		for _, l := range expected {
			joined.WriteString(strings.TrimSpace(l))
		}
		return regexp.MustCompile(`^` + linePattern(joined.String()) + `$`).MatchString(strings.TrimSpace(out))
	}
	var actual strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			actual.WriteString(l + "\n")
		}
	}
	pattern := `(?m)^`
	for _, l := range expected {
		if l == "…" || l == "..." {
			pattern += `(?:[^\n]*\n)*?`
		} else {
			pattern += linePattern(l) + `\n`
		}
	}
	return regexp.MustCompile(pattern).MatchString(actual.String())
}
