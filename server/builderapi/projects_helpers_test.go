package builderapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

// The project tests' helpers: two users on one server, requests that
// expect a status, error answers checked for their code and field, and
// the recorded n8n workflow with a changed copy.

const projTokens = "tok-alice=alice,tok-bob=bob"

// projUsers starts a server on store with authentication and returns it
// as alice and as bob.
func projUsers(t *testing.T, store instanceai.Store) (alice, bob *servertest.Server) {
	t.Helper()
	s := servertest.Start(t, store, servertest.Options{Tokens: projTokens})
	return s.As("tok-alice"), s.As("tok-bob")
}

// projWant sends the request, fails the test unless it answers status,
// and decodes the answer into out (when not nil).
func projWant(t *testing.T, s *servertest.Server, method, path, body string, status int, out any) {
	t.Helper()
	got, raw := projRaw(t, s, method, path, body)
	if got != status {
		t.Fatalf("%s %s %.200s: %d %s, want %d", method, path, body, got, raw, status)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, got, raw, err)
		}
	}
}

// projRaw sends the request and returns the status and the answer's bytes.
func projRaw(t *testing.T, s *servertest.Server, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return res.StatusCode, raw
}

// projError is the project's error shape.
type projError struct {
	Error struct {
		Code    string         `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

// projWantError sends the request and fails the test unless it answers
// status with the error code and details.field (field "" means none), and
// returns the message.
func projWantError(t *testing.T, s *servertest.Server, method, path, body string, status int, code, field string) string {
	t.Helper()
	var e projError
	projWant(t, s, method, path, body, status, &e)
	got, _ := e.Error.Details["field"].(string)
	if e.Error.Code != code || got != field || e.Error.Message == "" {
		t.Fatalf("%s %s %.200s: %+v, want code %s field %q", method, path, body, e.Error, code, field)
	}
	return e.Error.Message
}

// projRecorded is the workflow recorded from a real n8n: webhook → AI
// agent with a chat model, memory and calculator (five nodes, four
// connections), byte for byte without the file's final newline: what a
// save keeps of it.
func projRecorded(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../../agent/n8n/testdata/real/workflow-streaming.create-body.json")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(data)
}

// projChanged is the recorded workflow with one node added (a Respond
// node fed by the agent: one connection more), one removed (the
// calculator and its connection), one modified (the agent's parameters)
// and other settings.
func projChanged(t *testing.T) []byte {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(projRecorded(t), &doc); err != nil {
		t.Fatal(err)
	}
	var nodes []any
	for _, n := range doc["nodes"].([]any) {
		node := n.(map[string]any)
		switch node["name"] {
		case "Calculator":
			continue
		case "AI Agent":
			node["parameters"].(map[string]any)["promptType"] = "changed"
		}
		nodes = append(nodes, node)
	}
	doc["nodes"] = append(nodes, map[string]any{"name": "Respond", "type": "n8n-nodes-base.respondToWebhook",
		"typeVersion": 1, "position": []int{600, 0}, "parameters": map[string]any{}})
	conns := doc["connections"].(map[string]any)
	delete(conns, "Calculator")
	conns["AI Agent"] = map[string]any{"main": []any{[]any{map[string]any{"node": "Respond", "type": "main", "index": 0}}}}
	doc["settings"] = map[string]any{"executionOrder": "v0"}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// projSaveBody is a save's body carrying data byte for byte.
func projSaveBody(data []byte, backup bool) string {
	b, _ := json.Marshal(backup)
	return `{"workflow_data":` + string(data) + `,"create_backup":` + string(b) + `}`
}

// projSameJSON reports whether two JSON documents mean the same.
func projSameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// projNames lists the caller's project names.
func projNames(t *testing.T, s *servertest.Server) []string {
	t.Helper()
	var ps []struct {
		Name string `json:"name"`
	}
	projWant(t, s, http.MethodGet, "/projects", "", http.StatusOK, &ps)
	names := []string{}
	for _, p := range ps {
		names = append(names, p.Name)
	}
	return names
}
