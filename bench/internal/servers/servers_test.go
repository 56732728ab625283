package servers

import (
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, then the fields from
	// the state on: utime 250 and stime 37 ticks.
	stat := "4242 (thread line) x) S 1 4242 4242 0 -1 4194560 5313 0 0 0 250 37 0 0 20 0 9 0 1234 1000000 2000 18446744073709551615\n"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := 2870 * time.Millisecond; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	if _, err := parseStatCPU("4242 (x) S 1 2"); err == nil {
		t.Fatal("a short line was accepted")
	}
}
