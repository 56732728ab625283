package servertest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
)

// RunAgentInput is an AG-UI RunAgentInput body with one user message
// (id "u1"); extra adds or replaces top-level fields (tools, state, …).
func RunAgentInput(thread, runID, message string, extra map[string]any) string {
	in := map[string]any{
		"threadId": thread, "runId": runID,
		"messages": []any{map[string]any{"id": "u1", "role": "user", "content": message}},
	}
	for k, v := range extra {
		in[k] = v
	}
	b, _ := json.Marshal(in)
	return string(b)
}

// PostRunAgent sends body to POST /run-agent and returns the response for
// the caller to read and close; accept "" sends no Accept header. Only a
// request that cannot be sent fails the test.
func (s *Server) PostRunAgent(ctx context.Context, body, accept string) *http.Response {
	s.t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/run-agent", strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("run-agent: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	res, err := s.Client.Do(req)
	if err != nil {
		s.t.Fatalf("run-agent: %v", err)
	}
	return res
}
