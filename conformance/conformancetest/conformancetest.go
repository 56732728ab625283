// Package conformancetest holds what the checkers' tests share: the headers
// of a well-formed SSE response and the assertion that a bad fixture breaks
// exactly its rule.
package conformancetest

import (
	"net/http"
	"testing"

	"github.com/threadline/threadline/conformance"
)

// GoodHeader is the header of a well-formed SSE response.
func GoodHeader() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream; charset=UTF-8")
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	return h
}

// AssertOnlyFails checks that rule fails and no other rule does.
func AssertOnlyFails(t testing.TB, rule string, findings []conformance.Finding) {
	t.Helper()
	failed := false
	for _, f := range findings {
		if f.Status != conformance.Fail {
			continue
		}
		if f.Rule == rule {
			failed = true
			t.Logf("%s: %s", f.Rule, f.Detail)
		} else {
			t.Errorf("%s also fails: %s", f.Rule, f.Detail)
		}
	}
	if !failed {
		t.Errorf("%s does not fail: %+v", rule, findings)
	}
}
