package version

import (
	"runtime/debug"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct{ recorded, want string }{
		{"v1.4.0", "v1.4.0"},
		{"v0.0.0-20261203143614-ff84fbd00000", "v0.0.0-20261203143614-ff84fbd00000"},
		{"(devel)", Dev},
		{"", Dev},
	} {
		info := &debug.BuildInfo{Main: debug.Module{Path: "github.com/threadline/threadline", Version: c.recorded}}
		if got := of(info); got != c.want {
			t.Errorf("recorded %q: got %q, want %q", c.recorded, got, c.want)
		}
	}
	if String() == "" {
		t.Error("String is empty")
	}
}
