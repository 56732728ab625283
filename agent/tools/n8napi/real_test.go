// Tests against answers recorded from a real n8n 1.123.81 (testdata/real/,
// see its README.md): each tool is served the recorded body, status and
// headers of its request, and the fake of fake_test.go is held to the same
// statuses and error messages.

package n8napi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/threadline/threadline/agent/tools/n8napi"
)

// recording is one recorded answer: rest-NAME.json and rest-NAME.headers.
type recording struct {
	status int
	header http.Header
	body   []byte
}

func readReal(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "real", file))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadRecording(t *testing.T, name string) recording {
	t.Helper()
	r := textproto.NewReader(bufio.NewReader(bytes.NewReader(readReal(t, "rest-"+name+".headers"))))
	line, err := r.ReadLine()
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.SplitN(line, " ", 3)
	if len(parts) < 2 {
		t.Fatalf("%s: status line %q", name, line)
	}
	status, err := strconv.Atoi(parts[1])
	if err != nil {
		t.Fatalf("%s: status line %q", name, line)
	}
	mh, err := r.ReadMIMEHeader()
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	h := http.Header(mh)
	for _, k := range []string{"Connection", "Keep-Alive", "Date"} {
		h.Del(k)
	}
	return recording{status: status, header: h, body: readReal(t, "rest-"+name+".json")}
}

// serveRecording answers every request with rec and hands the request to
// seen.
func serveRecording(t *testing.T, rec recording, seen chan<- recorded) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen <- recorded{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, Body: body, Header: r.Header.Clone()}
		for k, vs := range rec.header {
			w.Header()[k] = vs
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

const (
	realStreaming = "RCh5zXX3pcQZfyow" // the streaming workflow of the recordings
	realScratch   = "alwcy3Qbv3SH9EuW" // the workflow created, updated, (de)activated
)

// TestRealResponses runs each tool against the answer real n8n gave to the
// same request.
func TestRealResponses(t *testing.T) {
	createReq := string(readReal(t, "rest-create-workflow.request.json"))
	updateReq := string(readReal(t, "rest-update-workflow.request.json"))
	withID := func(id, body string) string {
		return `{"id":"` + id + `",` + strings.TrimPrefix(strings.TrimSpace(body), "{")
	}
	cases := []struct {
		name, recording, tool, args string
		method, path                string
		query                       string // raw query the tool must send, "" for none
		sentBody                    string // JSON the tool must send, "" for none
		check                       func(t *testing.T, res map[string]any)
		errParts                    []string // the call must fail with these
	}{
		{
			name: "list", recording: "list-workflows", tool: "list_workflows", args: `{}`,
			method: "GET", path: "/api/v1/workflows", query: "excludePinnedData=true",
			check: func(t *testing.T, res map[string]any) {
				data := res["data"].([]any)
				var ids []string
				for _, d := range data {
					wf := d.(map[string]any)
					ids = append(ids, wf["id"].(string))
					if got, want := keys(wf), []string{"active", "createdAt", "id", "isArchived", "name", "updatedAt"}; !slices.Equal(got, want) {
						t.Errorf("summary keys %q, want %q (n8n's tags are empty here)", got, want)
					}
				}
				if want := []string{"I5JJgbhwtDKeXNp3", "QMU4dQybZrvVtB2o", realStreaming}; !slices.Equal(ids, want) {
					t.Errorf("ids %v, want %v", ids, want)
				}
				if v, ok := res["nextCursor"]; !ok || v != nil {
					t.Errorf("nextCursor = %v (present %v), want null", v, ok)
				}
			},
		},
		{
			name: "list active with cursor", recording: "list-workflows-active", tool: "list_workflows", args: `{"active":true,"limit":2}`,
			method: "GET", path: "/api/v1/workflows", query: "active=true&excludePinnedData=true&limit=2",
			check: func(t *testing.T, res map[string]any) {
				if n := len(res["data"].([]any)); n != 2 {
					t.Errorf("%d workflows, want 2", n)
				}
				if res["nextCursor"] != "eyJsaW1pdCI6Miwib2Zmc2V0IjoyfQ==" {
					t.Errorf("nextCursor = %v", res["nextCursor"])
				}
			},
		},
		{
			// The tool itself refuses 500; a limit n8n refuses anyway is
			// reported with n8n's message.
			name: "limit too big", recording: "list-workflows-limit-too-big", tool: "list_workflows", args: `{"limit":250}`,
			method: "GET", path: "/api/v1/workflows", query: "excludePinnedData=true&limit=250",
			errParts: []string{"400 Bad Request", "request/query/limit must be <= 250", "correct the arguments"},
		},
		{
			name: "get", recording: "get-workflow", tool: "get_workflow", args: `{"id":"` + realStreaming + `"}`,
			method: "GET", path: "/api/v1/workflows/" + realStreaming, query: "excludePinnedData=true",
			check: func(t *testing.T, res map[string]any) {
				var want map[string]any
				if err := json.Unmarshal(readReal(t, "rest-get-workflow.json"), &want); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(res, want) {
					t.Error("get_workflow did not return n8n's workflow as is")
				}
			},
		},
		{
			name: "get unknown", recording: "get-workflow-404", tool: "get_workflow", args: `{"id":"DoesNotExist123"}`,
			method: "GET", path: "/api/v1/workflows/DoesNotExist123", query: "excludePinnedData=true",
			errParts: []string{"404 Not Found: Not Found", `"DoesNotExist123" does not exist`},
		},
		{
			// 200, not 201.
			name: "create", recording: "create-workflow", tool: "create_workflow", args: createReq,
			method: "POST", path: "/api/v1/workflows", sentBody: createReq,
			check: func(t *testing.T, res map[string]any) {
				if res["id"] != realScratch || res["active"] != false {
					t.Errorf("result id %v active %v", res["id"], res["active"])
				}
			},
		},
		{
			name: "update", recording: "update-workflow", tool: "update_workflow", args: withID(realScratch, updateReq),
			method: "PUT", path: "/api/v1/workflows/" + realScratch, sentBody: updateReq,
			check: func(t *testing.T, res map[string]any) {
				if res["name"] != "REST scratch workflow (renamed)" {
					t.Errorf("name = %v", res["name"])
				}
			},
		},
		{
			// The tool never sends an update without nodes; n8n's 400 for a
			// body it refuses is passed on with its message.
			name: "update refused", recording: "update-workflow-400", tool: "update_workflow", args: withID(realScratch, updateReq),
			method: "PUT", path: "/api/v1/workflows/" + realScratch, sentBody: updateReq,
			errParts: []string{"400 Bad Request", "request/body must have required property 'nodes'", "correct the arguments"},
		},
		{
			name: "activate", recording: "activate-workflow", tool: "activate_workflow", args: `{"id":"` + realScratch + `"}`,
			method: "POST", path: "/api/v1/workflows/" + realScratch + "/activate", sentBody: `{}`,
			check: func(t *testing.T, res map[string]any) {
				if res["active"] != true {
					t.Errorf("active = %v", res["active"])
				}
			},
		},
		{
			name: "activate again", recording: "activate-workflow-again", tool: "activate_workflow", args: `{"id":"` + realScratch + `"}`,
			method: "POST", path: "/api/v1/workflows/" + realScratch + "/activate", sentBody: `{}`,
			check: func(t *testing.T, res map[string]any) {
				if res["active"] != true {
					t.Errorf("active = %v", res["active"])
				}
			},
		},
		{
			name: "activate unknown", recording: "activate-404", tool: "activate_workflow", args: `{"id":"DoesNotExist123"}`,
			method: "POST", path: "/api/v1/workflows/DoesNotExist123/activate", sentBody: `{}`,
			errParts: []string{"404 Not Found: Not Found", "does not exist"},
		},
		{
			name: "deactivate", recording: "deactivate-workflow", tool: "deactivate_workflow", args: `{"id":"` + realScratch + `"}`,
			method: "POST", path: "/api/v1/workflows/" + realScratch + "/deactivate",
			check: func(t *testing.T, res map[string]any) {
				if res["active"] != false {
					t.Errorf("active = %v", res["active"])
				}
			},
		},
		{
			name: "archive", recording: "archive-workflow", tool: "archive_workflow", args: `{"id":"` + realScratch + `"}`,
			method: "POST", path: "/api/v1/workflows/" + realScratch + "/archive",
			errParts: []string{"405 Method Not Allowed: POST method not allowed", "no archive endpoint in its public API",
				"after 1.123", "archive the workflow in the n8n UI, or upgrade n8n"},
		},
		{
			// An unknown id gets the same 405: the route, not the id, is
			// what 1.123 lacks.
			name: "archive unknown", recording: "archive-404", tool: "archive_workflow", args: `{"id":"doesNotExist123"}`,
			method: "POST", path: "/api/v1/workflows/doesNotExist123/archive",
			errParts: []string{"405", "no archive endpoint in its public API"},
		},
		{
			name: "executions", recording: "list-executions", tool: "list_executions", args: `{"limit":3}`,
			method: "GET", path: "/api/v1/executions", query: "limit=3",
			check: func(t *testing.T, res map[string]any) {
				data := res["data"].([]any)
				if len(data) != 3 || data[0].(map[string]any)["id"] != "12" {
					t.Errorf("data = %v", data)
				}
				if res["nextCursor"] != "eyJsYXN0SWQiOiIxMCIsImxpbWl0IjozfQ==" {
					t.Errorf("nextCursor = %v", res["nextCursor"])
				}
			},
		},
		{
			name: "executions page 2", recording: "list-executions-page2", tool: "list_executions",
			args:   `{"limit":3,"cursor":"eyJsYXN0SWQiOiIxMCIsImxpbWl0IjozfQ=="}`,
			method: "GET", path: "/api/v1/executions", query: "cursor=eyJsYXN0SWQiOiIxMCIsImxpbWl0IjozfQ%3D%3D&limit=3",
			check: func(t *testing.T, res map[string]any) {
				if data := res["data"].([]any); len(data) != 3 || data[0].(map[string]any)["id"] != "9" {
					t.Errorf("data = %v", data)
				}
			},
		},
		{
			name: "executions filtered", recording: "list-executions-filtered", tool: "list_executions",
			args:   `{"workflowId":"` + realStreaming + `","status":"error","limit":2}`,
			method: "GET", path: "/api/v1/executions", query: "limit=2&status=error&workflowId=" + realStreaming,
			check: func(t *testing.T, res map[string]any) {
				for _, d := range res["data"].([]any) {
					if e := d.(map[string]any); e["status"] != "error" || e["workflowId"] != realStreaming {
						t.Errorf("execution %v", e)
					}
				}
			},
		},
		{
			// The tool only sends statuses every release accepts; n8n's 400
			// for one it refuses still reads well.
			name: "executions bad status", recording: "list-executions-badstatus", tool: "list_executions", args: `{"status":"waiting"}`,
			method: "GET", path: "/api/v1/executions", query: "status=waiting",
			errParts: []string{"400 Bad Request", "must be equal to one of the allowed values: canceled, error, running, success, waiting"},
		},
		{
			name: "bad key", recording: "bad-key-401", tool: "list_workflows", args: `{}`,
			method: "GET", path: "/api/v1/workflows", query: "excludePinnedData=true",
			errParts: []string{"401 Unauthorized: unauthorized", "check the n8n API key"},
		},
		{
			name: "no key", recording: "no-key-401", tool: "get_workflow", args: `{"id":"` + realStreaming + `"}`,
			method: "GET", path: "/api/v1/workflows/" + realStreaming, query: "excludePinnedData=true",
			errParts: []string{"401 Unauthorized: 'X-N8N-API-KEY' header required", "check the n8n API key"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := loadRecording(t, c.recording)
			seen := make(chan recorded, 4)
			srv := serveRecording(t, rec, seen)
			m := toolMap(t, n8napi.Config{BaseURL: srv.URL, APIKey: testKey})
			out, err := m[c.tool].Execute(context.Background(), json.RawMessage(c.args))
			if len(seen) != 1 {
				t.Fatalf("%d requests, want 1", len(seen))
			}
			r := <-seen
			if r.Method != c.method || r.Path != c.path || r.Query != c.query {
				t.Errorf("request %s %s?%s, want %s %s?%s", r.Method, r.Path, r.Query, c.method, c.path, c.query)
			}
			if c.sentBody != "" {
				var got, want any
				if json.Unmarshal(r.Body, &got) != nil || json.Unmarshal([]byte(c.sentBody), &want) != nil || !reflect.DeepEqual(got, want) {
					t.Errorf("sent body %s, want %s", r.Body, c.sentBody)
				}
			} else if len(r.Body) != 0 {
				t.Errorf("sent a body: %s", r.Body)
			}
			if c.errParts != nil {
				wantErr(t, err, c.errParts...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var res map[string]any
			if err := json.Unmarshal(out, &res); err != nil {
				t.Fatal(err)
			}
			c.check(t, res)
		})
	}
}

// TestFakeMatchesReal sends the fake of fake_test.go the requests that were
// recorded and compares: same status; for errors the same body; for
// successes no top-level key (nor execution key) that real n8n does not
// send.
func TestFakeMatchesReal(t *testing.T) {
	createBody := readReal(t, "rest-create-workflow.request.json")
	var noNodes map[string]any
	if err := json.Unmarshal(readReal(t, "rest-update-workflow.request.json"), &noNodes); err != nil {
		t.Fatal(err)
	}
	delete(noNodes, "nodes")
	noNodesBody, _ := json.Marshal(noNodes)
	cases := []struct {
		recording, method, path string
		body                    []byte
		key                     *string // nil: the test key
		noArchive               bool
	}{
		{"list-workflows", "GET", "/api/v1/workflows", nil, nil, false},
		{"list-workflows-active", "GET", "/api/v1/workflows?active=true&limit=1", nil, nil, false},
		{"list-workflows-limit-too-big", "GET", "/api/v1/workflows?limit=500", nil, nil, false},
		{"get-workflow", "GET", "/api/v1/workflows/" + workflowA, nil, nil, false},
		{"get-workflow-404", "GET", "/api/v1/workflows/" + missingID, nil, nil, false},
		{"create-workflow", "POST", "/api/v1/workflows", createBody, nil, false},
		{"update-workflow", "PUT", "/api/v1/workflows/" + workflowB, readReal(t, "rest-update-workflow.request.json"), nil, false},
		{"update-workflow-400", "PUT", "/api/v1/workflows/" + workflowB, noNodesBody, nil, false},
		{"activate-workflow", "POST", "/api/v1/workflows/" + workflowB + "/activate", []byte(`{}`), nil, false},
		{"activate-404", "POST", "/api/v1/workflows/" + missingID + "/activate", []byte(`{}`), nil, false},
		{"deactivate-workflow", "POST", "/api/v1/workflows/" + workflowA + "/deactivate", nil, nil, false},
		{"archive-workflow", "POST", "/api/v1/workflows/" + workflowA + "/archive", nil, nil, true},
		{"archive-404", "POST", "/api/v1/workflows/" + missingID + "/archive", nil, nil, true},
		{"list-executions", "GET", "/api/v1/executions?limit=2", nil, nil, false},
		{"list-executions-filtered", "GET", "/api/v1/executions?workflowId=" + workflowA + "&status=error&limit=2", nil, nil, false},
		{"list-executions-badstatus", "GET", "/api/v1/executions?status=bogus", nil, nil, false},
		{"bad-key-401", "GET", "/api/v1/workflows", nil, ptr("wrong-key"), false},
		{"no-key-401", "GET", "/api/v1/workflows", nil, ptr(""), false},
	}
	for _, c := range cases {
		t.Run(c.recording, func(t *testing.T) {
			real := loadRecording(t, c.recording)
			f := newFake(t)
			f.noArchive = c.noArchive
			srv := httptest.NewServer(f.handler())
			defer srv.Close()
			req, err := http.NewRequest(c.method, srv.URL+c.path, bytes.NewReader(c.body))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case c.key == nil:
				req.Header.Set("X-N8N-API-KEY", testKey)
			case *c.key != "":
				req.Header.Set("X-N8N-API-KEY", *c.key)
			}
			if c.body != nil {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != real.status {
				t.Fatalf("fake answered %d, n8n %d", resp.StatusCode, real.status)
			}
			if ct, want := resp.Header.Get("Content-Type"), real.header.Get("Content-Type"); ct != want {
				t.Errorf("Content-Type %q, n8n %q", ct, want)
			}
			var g, w map[string]any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("fake body %s: %v", got, err)
			}
			if err := json.Unmarshal(real.body, &w); err != nil {
				t.Fatal(err)
			}
			if real.status >= 400 {
				if !reflect.DeepEqual(g, w) {
					t.Errorf("fake body %s, n8n %s", got, real.body)
				}
				return
			}
			extraKeys(t, "", g, w)
			if data, ok := w["data"].([]any); ok && len(data) > 0 {
				for _, d := range g["data"].([]any) {
					extraKeys(t, "data[]", d.(map[string]any), data[0].(map[string]any))
				}
			}
		})
	}
}

// extraKeys reports keys of got that want lacks.
func extraKeys(t *testing.T, where string, got, want map[string]any) {
	t.Helper()
	for _, k := range keys(got) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: the fake sends %q, n8n does not (n8n: %q)", where, k, keys(want))
		}
	}
}

func ptr(s string) *string { return &s }
