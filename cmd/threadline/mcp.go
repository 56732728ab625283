package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"

	"github.com/threadline/threadline/agent/tools/mcptools"
)

// startMCP reads --mcp-config and starts its servers: a file that does not
// parse refuses the start, with a message naming the server and key; a
// server that cannot be started is logged and retried in the background.
func startMCP(ctx context.Context, c *agentConfig, logger *slog.Logger) (*mcptools.Manager, error) {
	if c.mcpConfig == "" {
		return nil, nil
	}
	f, err := mcptools.ReadFile(c.mcpConfig, os.LookupEnv)
	if err != nil {
		return nil, usageError{"--mcp-config: " + err.Error()}
	}
	m := mcptools.New(f, mcptools.Options{Logger: logger})
	if err := m.Start(ctx); err != nil {
		logger.Warn("MCP servers not started; their tools are not offered until the next start", "err", err)
	}
	return m, nil
}

// mcpHealth adds the MCP servers' states to the /llm/health answer, as
// "mcp_servers" (the model server's probe decides the status code).
func mcpHealth(h http.Handler, m *mcptools.Manager) http.Handler {
	if m == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		body := rec.Body.Bytes()
		var obj map[string]json.RawMessage
		if json.Unmarshal(body, &obj) == nil && obj != nil {
			obj["mcp_servers"], _ = json.Marshal(m.Status())
			if out, err := json.Marshal(obj); err == nil {
				body = append(out, '\n')
			}
		}
		maps.Copy(w.Header(), rec.Header())
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(rec.Code)
		_, _ = bytes.NewReader(body).WriteTo(w)
	})
}

// mcpStatus is /status's mcp_servers (nil without MCP servers).
func mcpStatus(m *mcptools.Manager) func() any {
	if m == nil {
		return nil
	}
	return func() any { return m.Status() }
}
