package nativeapi

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
)

func TestDeriveTitle(t *testing.T) {
	sixty := strings.Repeat("é", 60)
	for msg, want := range map[string]string{
		"simple hello":                 "simple hello",
		"  first line  \nsecond":       "first line",
		"\n \t\r\n  after blanks\n":    "after blanks",
		"tabs\tand   runs  of  spaces": "tabs and runs of spaces",
		"ctl\x00char\x1bs":             "ctl char s",
		sixty:                          sixty,
		sixty + "x":                    strings.Repeat("é", 59) + "…",
		strings.Repeat("ab ", 40):      strings.TrimSpace(strings.Repeat("ab ", 20)) + "…",
		"   \n\t ":                     "",
		"🙂" + strings.Repeat("🚀", 70) + "\n": "🙂" + strings.Repeat("🚀", 58) + "…",
	} {
		got := instanceai.DeriveTitle(msg)
		if got != want {
			t.Errorf("DeriveTitle(%q) = %q, want %q", msg, got, want)
		}
		if n := utf8.RuneCountInString(got); n > instanceai.DerivedTitle {
			t.Errorf("DeriveTitle(%q) has %d characters", msg, n)
		}
		if _, err := cleanTitle(got); err != nil {
			t.Errorf("DeriveTitle(%q) = %q, which a client could not set: %v", msg, got, err)
		}
	}
}
