package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/threadline/threadline/agent/tools/mcptools/mcptest"
	"github.com/threadline/threadline/instanceai"
)

// TestMCPApprovalAcrossRestart: the threadline binary with --mcp-config
// runs server-filesystem; the model (the fake LLM, replaying a tool call in
// the shape of OpenAI's streams) calls its destructive write_file, which
// waits for approval; Threadline stops (SIGTERM, then SIGKILL), starts
// again with the same configuration, and the approval given to the new
// process runs the call against its own server-filesystem.
func TestMCPApprovalAcrossRestart(t *testing.T) {
	for i, stop := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(stop.String(), func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			fs := mcptest.Filesystem(t, dir)
			config, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"fs": map[string]any{"command": fs.Command, "args": fs.Args}}})
			configPath := filepath.Join(t.TempDir(), "mcp.json")
			if err := os.WriteFile(configPath, config, 0o600); err != nil {
				t.Fatal(err)
			}
			note := filepath.Join(dir, "note.txt")
			args, _ := json.Marshal(map[string]string{"path": note, "content": "approved after a restart"})
			argsJSON, _ := json.Marshal(string(args))
			llm := &fakeLLM{streams: [][]string{
				{
					textChunk("Writing the note. "),
					chunk(fmt.Sprintf(`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"fs__write_file","arguments":%s}}]}`, argsJSON), ""),
					chunk(`{}`, "tool_calls"),
					usageChunk(10, 5),
				},
				answerStep("The note is written.", 20, 5),
			}}
			upstream := httptest.NewServer(llm)
			defer upstream.Close()
			spec := "sqlite:" + filepath.Join(t.TempDir(), "mcp.db")
			flags := []string{"-agent", "openai", "-openai-base-url", upstream.URL + "/v1", "-openai-model", "test-model",
				"-mcp-config", configPath, "-lease", "2s", "-lease-renew", "300ms"}
			thread := fmt.Sprintf("mcp%d", i)

			p := launch(t, spec, 0, flags...)
			runID := p.chat(thread, "write the note")
			requestID := p.awaitConfirmation(thread)
			p.stop(stop)
			if _, err := os.Stat(note); !os.IsNotExist(err) {
				t.Fatalf("the note exists before the approval: %v", err)
			}

			p = launch(t, spec, 0, flags...)
			var status struct {
				MCPServers map[string]struct {
					State string `json:"state"`
					Tools int    `json:"tools"`
				} `json:"mcp_servers"`
			}
			if p.get("/status", &status); status.MCPServers["fs"].State != "connected" || status.MCPServers["fs"].Tools == 0 {
				t.Fatalf("status %+v", status)
			}
			code := p.post("/instance-ai/confirm/"+requestID, `{"approved":true}`)
			if code != http.StatusOK && (stop != syscall.SIGKILL || code != http.StatusAccepted) {
				t.Fatalf("confirm after restart: %d\n%s", code, p.Logs())
			}
			frames := p.replayAll(thread, runID)
			fin := frames[len(frames)-1].Decoded.Payload.(*instanceai.RunFinish)
			if fin.Status != instanceai.RunCompleted || !strings.Contains(texts(frames), "The note is written.") {
				t.Fatalf("resumed run ended %+v with text %q\n%s", fin, texts(frames), p.Logs())
			}
			if got, err := os.ReadFile(note); err != nil || string(got) != "approved after a restart" {
				t.Errorf("note %q %v", got, err)
			}
			p.Kill()
		})
	}
}
