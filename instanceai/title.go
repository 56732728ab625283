package instanceai

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Title limits: MaxTitle characters after trimming; one derived from the
// first message is cut at DerivedTitle.
const (
	MaxTitle     = 200
	DerivedTitle = 60
)

// DeriveTitle makes a title of a message's first non-blank line: spaces
// collapsed, at most DerivedTitle characters, cut ones ending in "…".
func DeriveTitle(message string) string {
	var line string
	for l := range strings.Lines(message) {
		if line = strings.Join(strings.FieldsFunc(l, isTitleSpace), " "); line != "" {
			break
		}
	}
	if utf8.RuneCountInString(line) <= DerivedTitle {
		return line
	}
	runes := []rune(line)[:DerivedTitle-1]
	return strings.TrimRightFunc(string(runes), unicode.IsSpace) + "…"
}

func isTitleSpace(r rune) bool { return unicode.IsSpace(r) || NotInTitle(r) }

// CleanTitle trims a client's title and checks it: at most MaxTitle
// characters, and none of the characters NotInTitle names (a title is one
// line). The error says what is wrong in words a client can act on.
func CleanTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	if n := utf8.RuneCountInString(title); n > MaxTitle {
		return "", fmt.Errorf("must be at most %d characters, got %d", MaxTitle, n)
	}
	if strings.ContainsFunc(title, NotInTitle) {
		return "", errors.New("must be one line without control characters, line or paragraph separators (U+2028, U+2029) or bidirectional controls (U+202A-U+202E, U+2066-U+2069)")
	}
	return title, nil
}

// NotInTitle reports the characters a title, which is one line shown as
// it is, must not hold: control characters, the line and paragraph
// separators (U+2028, U+2029) and the bidirectional embedding, override
// and isolate controls (U+202A–U+202E, U+2066–U+2069), which would reorder
// the text shown after the title.
func NotInTitle(r rune) bool {
	return unicode.IsControl(r) || r == '\u2028' || r == '\u2029' ||
		(r >= '\u202a' && r <= '\u202e') || (r >= '\u2066' && r <= '\u2069')
}
