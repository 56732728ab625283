package main

import (
	"bytes"
	"strings"
	"testing"
)

// Mistakes in the command line are reported at once, before the build
// and any cluster, with exit status 2.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-scenarios", "kill9,flood"}, `unknown scenario "flood"`},
		{[]string{"-buses", "nats"}, `unknown bus "nats"`},
		{[]string{"-format", "xml"}, `-format "xml"`},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-no-such-flag"}, "flag provided but not defined"},
	} {
		var out, errs bytes.Buffer
		if code := run(tc.args, &out, &errs); code != 2 || !strings.Contains(errs.String(), tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, errs.String(), tc.want)
		}
	}
}

// -short switches the defaults to the short version's.
func TestShortDefaults(t *testing.T) {
	var out, errs bytes.Buffer
	run([]string{"-short", "-h"}, &out, &errs)
	if !strings.Contains(errs.String(), `the instances' --lease (default 2s)`) {
		t.Errorf("-short -h does not show the short lease:\n%s", errs.String())
	}
	errs.Reset()
	run([]string{"-h"}, &out, &errs)
	if !strings.Contains(errs.String(), `the instances' --lease (default 10s)`) {
		t.Errorf("-h does not show the long lease:\n%s", errs.String())
	}
}
