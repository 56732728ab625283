package builderapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/threadline/threadline/server/servertest"
)

// FuzzProjectBodies sends arbitrary bytes as the body of a create, a
// save, a restore and a cleanup, on every store: no answer is a 5xx, and
// a refused save leaves the file as it was.
func FuzzProjectBodies(f *testing.F) {
	for _, seed := range []string{
		"", "{}", "null", "[]", "0", `"x"`, "{", "\xff", `{"name":"fz-new"}`, `{"name":5}`, `{"name":"other"}`,
		`{"description":"a\u0000b"}`, `{"description":["x"]}`, `{"initial_workflows":["../x.json"]}`,
		`{"initial_workflows":["a.json","a.json"]}`, `{"initial_workflows":"a.json"}`, `{"initial_workflows":[null,1]}`,
		`{"settings":{"version_limit":"x"}}`, `{"settings":{"version_limit":1e400}}`, `{"settings":[]}`,
		`{"settings":{"auto_backup":null,"extra":{"\u0000":"\u0000"}}}`, "{\"settings\":{\"k\":\"\xff\"}}",
		`{"workflow_data":{"name":"v","nodes":[],"connections":{}},"create_backup":true}`,
		`{"workflow_data":[]}`, `{"workflow_data":{"name":"\u0000"}}`, "{\"workflow_data\":{\"name\":\"\xff\xfe\"}}",
		`{"workflow_data":{"nodes":"none"}}`, `{"create_backup":"yes"}`, `{"create_backup":null}`,
		`{"keep_versions":-1}`, `{"keep_versions":1e20}`, `{"keep_versions":0}`, `{"keep_versions":2.5}`,
		strings.Repeat("[", 20000), `{"workflow_data":` + strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000) + "}",
	} {
		f.Add([]byte(seed))
	}
	type target struct {
		s           *servertest.Server
		projVersion string
	}
	var targets []target
	for _, k := range servertest.StoreKinds {
		s := servertest.Start(f, k.Open(f), servertest.Options{})
		projWantF(f, s, http.MethodPost, "/projects/fz", `{}`, http.StatusCreated)
		projWantF(f, s, http.MethodPut, "/projects/fz/workflows/w.json", `{"workflow_data":{"name":"a"}}`, http.StatusCreated)
		code, out := s.Do(http.MethodPut, "/projects/fz/workflows/w.json", `{"workflow_data":{"name":"b"}}`)
		backup, _ := out["backup_filename"].(string)
		if code != http.StatusOK || backup == "" {
			f.Fatalf("%s: second save %d %v", k.Name, code, out)
		}
		targets = append(targets, target{s, backup})
	}
	const file = "/projects/fz/workflows/w.json"
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, tg := range targets {
			s := tg.s.WithTest(t)
			check := func(method, path string) int {
				code, raw := projRaw(t, s, method, path, string(body))
				if code >= 500 {
					t.Fatalf("%s %s %.300q: %d %s", method, path, body, code, raw)
				}
				return code
			}
			if check(http.MethodPost, "/projects/fz-new") == http.StatusCreated {
				projWant(t, s, http.MethodDelete, "/projects/fz-new?confirm=true", "", http.StatusOK, nil)
			}
			_, before := projRaw(t, s, http.MethodGet, file, "")
			if check(http.MethodPut, file) >= 400 {
				if _, after := projRaw(t, s, http.MethodGet, file, ""); string(after) != string(before) {
					t.Fatalf("a refused save %.300q changed the file from %.300s to %.300s", body, before, after)
				}
			}
			check(http.MethodPost, file+"/versions/"+tg.projVersion+"/restore")
			check(http.MethodPost, file+"/cleanup-versions")
		}
	})
}

// projWantF is projWant's status check for the fuzz test's setup.
func projWantF(f *testing.F, s *servertest.Server, method, path, body string, status int) {
	f.Helper()
	if code, out := s.Do(method, path, body); code != status {
		f.Fatalf("%s %s: %d %v, want %d", method, path, code, out, status)
	}
}
