package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/threadline/threadline/agent/tools/mcptools"
)

func TestMCPConfigFlagRefusesABadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"fs": {"command": "x", "approval": "sometimes"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := startMCP(context.Background(), &agentConfig{mcpConfig: path}, slog.New(slog.DiscardHandler))
	var u usageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--mcp-config") || !strings.Contains(err.Error(), "mcpServers.fs.approval") {
		t.Fatalf("error %v", err)
	}
	m, err := startMCP(context.Background(), &agentConfig{}, nil)
	if m != nil || err != nil {
		t.Errorf("no flag: %v %v", m, err)
	}
}

func TestMCPNeedsTheOpenAIAgent(t *testing.T) {
	m := mcptools.New(mcptools.File{Servers: map[string]mcptools.Server{"off": {Command: "x", Disabled: true}}}, mcptools.Options{})
	defer m.Close()
	_, _, err := newAgent(&serveConfig{agent: "script"}, nil, nil, nil, m, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--agent openai") {
		t.Errorf("error %v", err)
	}
}

// TestMCPHealthAndStatus: /llm/health keeps the model probe's status code
// and adds mcp_servers; /status gets the same states.
func TestMCPHealthAndStatus(t *testing.T) {
	m := mcptools.New(mcptools.File{Servers: map[string]mcptools.Server{"off": {Command: "x", Disabled: true}}}, mcptools.Options{})
	defer m.Close()
	probe := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"status":"unavailable","timestamp":"2026-01-01T00:00:00Z"}`+"\n")
	})
	rec := httptest.NewRecorder()
	mcpHealth(probe, m).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/llm/health", nil))
	var body struct {
		Status     string                           `json:"status"`
		MCPServers map[string]mcptools.ServerStatus `json:"mcp_servers"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusServiceUnavailable || body.Status != "unavailable" || body.MCPServers["off"].State != mcptools.StateDisabled ||
		rec.Header().Get("Content-Type") != "application/json" {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
	if mcpHealth(probe, nil) == nil || mcpStatus(nil) != nil {
		t.Error("without MCP servers nothing is added")
	}
	st, _ := json.Marshal(mcpStatus(m)())
	if string(st) != `{"off":{"state":"disabled","transport":"stdio","tools":0}}` {
		t.Errorf("status %s", st)
	}
}
