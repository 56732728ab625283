package builderapi_test

import (
	"net/http"
	"testing"

	"github.com/threadline/threadline/server/servertest"
)

// FuzzOperationBodies sends arbitrary bytes as the body of every operation:
// the answer is a 400 before any stream, or a stream; never a 5xx.
func FuzzOperationBodies(f *testing.F) {
	for _, seed := range []string{
		`{"description":"Send welcome email to new customers"}`,
		`{"existing_workflow_json":"{\"name\":\"x\",\"nodes\":[],\"connections\":{}}","modification_description":"add slack"}`,
		`{"workflow_id":"wf","existing_workflow_json":{"name":"x","nodes":[],"connections":{}},"feedback_from_testing":"ok"}`,
		`{"workflow_json":"{"}`, `{"description":null}`, `[]`, `"x"`, ``, `{"run_id":"` + "\u00e9" + `"}`,
	} {
		f.Add(seed)
	}
	s := servertest.Start(f, servertest.OpenStore(f, "memory"), servertest.Options{})
	f.Fuzz(func(t *testing.T, body string) {
		c := s.WithTest(t)
		if code := c.DoInto(http.MethodPost, "/validate", body, nil); code != http.StatusOK && code != http.StatusBadRequest {
			t.Fatalf("/validate %q: %d", body, code)
		}
		for _, path := range []string{"/generate", "/modify", "/iterate"} {
			code, _, raw := post(t, c, path, body, nil)
			if code >= 500 {
				t.Fatalf("%s %q: %d %s", path, body, code, raw)
			}
			if code != http.StatusOK && code != http.StatusBadRequest && code != http.StatusConflict {
				t.Fatalf("%s %q: unexpected %d %s", path, body, code, raw)
			}
		}
	})
}
