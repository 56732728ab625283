package n8n_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/instanceai"
)

// FuzzMapStream feeds arbitrary bytes as a webhook body through the
// chunk→event mapping: it must not panic, and every event it emits must be
// one the core accepts.
func FuzzMapStream(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.*json"))
	for _, name := range files {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b, uint8(7))
		}
	}
	f.Add([]byte(`{"type":"item","content":"{\"type\":\"tool_call\",\"name\":\"__proto__\",\"args\":[1]}"}`), uint8(1))
	f.Add([]byte(`{"type":"tool-call-start","metadata":{"toolCallId":"__proto__","toolInput":"\u00ff"}}`+"\n"+
		`{"type":"tool-call-end","metadata":{"toolName":"","toolOutput":{"a":"\xff"}}}`), uint8(3))
	f.Add([]byte("{\"type\":\"error\"}\n"), uint8(2))
	f.Add([]byte("[{\"output\":\"\xff\xfe\"}]"), uint8(5))
	log := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, body []byte, step uint8) {
		r := &stepReader{b: bytes.Clone(body), n: int(step%16) + 1}
		_ = n8n.MapStream(r, n8n.StreamOptions{RunID: "run_f", MaxLine: 4096, MaxObject: 256, Logger: log},
			func(ev instanceai.Event) error {
				ev.RunID, ev.AgentID = "run_f", "orchestrator-run_f"
				if err := ev.Validate(); err != nil {
					t.Fatalf("invalid %s event %+v: %v", ev.Type, ev.Payload, err)
				}
				if _, err := json.Marshal(ev); err != nil {
					t.Fatal(err)
				}
				return nil
			})
	})
}
