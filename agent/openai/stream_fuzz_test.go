package openai

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/threadline/threadline/agent/openai/chunk"
	"github.com/threadline/threadline/instanceai"
)

// FuzzStream feeds arbitrary bytes as a response body through the stream
// reader and the translator, as stream does: no panic, and every event the
// agent would emit is valid.
func FuzzStream(f *testing.F) {
	entries, _ := os.ReadDir(filepath.Join("testdata"))
	for _, e := range entries {
		raw, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err == nil {
			f.Add(raw)
		}
	}
	f.Add([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"<think>x\"}}]}\r\ndata: {}\r\r"))
	f.Add([]byte(": c\n\ndata: {\"error\":{\"message\":\"x\"}}\n\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		tr := chunk.NewTranslator()
		s := newStreamReader(bytes.NewReader(body), 0)
		var evs []instanceai.Event
		for {
			data, err := s.NextData()
			if err != nil {
				break
			}
			out, perr := tr.Push([]byte(data))
			if perr != nil {
				continue
			}
			evs = append(evs, out...)
		}
		evs = append(evs, tr.Finish()...)
		for _, ev := range evs {
			ev.RunID, ev.AgentID = "run_1", "orchestrator-run_1"
			if err := ev.Validate(); err != nil {
				t.Fatalf("invalid event %+v: %v", ev, err)
			}
		}
	})
}
