package cors

import (
	"slices"
	"testing"
)

func TestParseOrigins(t *testing.T) {
	cases := map[string][]string{
		"":    nil,
		" , ": nil,
		"*":   {"*"},
		"https://a.example/, http://localhost:3000,https://a.example": {"https://a.example", "http://localhost:3000"},
	}
	for in, want := range cases {
		if got := ParseOrigins(in); !slices.Equal(got, want) {
			t.Errorf("ParseOrigins(%q) = %q, want %q", in, got, want)
		}
	}
}
