package main

import (
	"slices"
	"testing"
)

func TestIntListParsesCounts(t *testing.T) {
	var l intList
	if err := l.Set("1, 100,1000"); err != nil {
		t.Fatal(err)
	}
	if want := (intList{1, 100, 1000}); !slices.Equal(l, want) {
		t.Fatalf("got %v, want %v", l, want)
	}
	if got := l.String(); got != "1,100,1000" {
		t.Fatalf("String() = %q", got)
	}
}

func TestIntListRefusesNonCounts(t *testing.T) {
	for _, v := range []string{"", "10,x", "0", "-5", "10,,20"} {
		var l intList
		if err := l.Set(v); err == nil {
			t.Errorf("Set(%q) accepted %v", v, l)
		}
	}
}
