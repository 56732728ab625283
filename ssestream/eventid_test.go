package ssestream

import "testing"

func TestParseEventID(t *testing.T) {
	for raw, want := range map[string]int64{"0": 0, "5": 5, "007": 7, "9223372036854775807": 1<<63 - 1} {
		if n, ok := ParseEventID(raw); !ok || n != want {
			t.Errorf("ParseEventID(%q) = %d, %v; want %d", raw, n, ok, want)
		}
	}
	for _, raw := range []string{"", "+5", " 5", "5 ", "-1", "5.0", "0x5", "1e3", "9223372036854775808", "５"} {
		if n, ok := ParseEventID(raw); ok {
			t.Errorf("ParseEventID(%q) = %d, accepted", raw, n)
		}
	}
}

func FuzzParseEventID(f *testing.F) {
	for _, s := range []string{"0", "+5", " 5", "9223372036854775808"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		n, ok := ParseEventID(raw)
		if ok && (n < 0 || raw == "" || raw[0] < '0' || raw[0] > '9') {
			t.Fatalf("ParseEventID(%q) = %d, accepted", raw, n)
		}
	})
}
