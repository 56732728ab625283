package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/servertest"
)

var textChannelTypes = map[instanceai.EventType]bool{
	instanceai.TypeTextDelta: true, instanceai.TypeReasoningDelta: true,
	instanceai.TypeTextBlock: true, instanceai.TypeReasoningBlock: true,
}

func isLifecycle(t instanceai.EventType) bool {
	return t == instanceai.TypeRunStart || t == instanceai.TypeRunFinish
}

// TestChannelPartitioning follows one run on the text and the tools
// channels, live and from every cursor of the log: each channel carries
// exactly its events with the thread's ids, both frame runs with run-start
// and run-finish, and together they cover the whole log.
func TestChannelPartitioning(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		h := start(t, store, servertest.Options{})
		h.EnsureThread("part")
		text := h.ConnectQuery("part", "channel=text", "", false)
		tools := h.ConnectQuery("part", "channel=tools", "", false)
		runID := h.Chat("part", "tools")
		liveText := text.Until(wait, servertest.IsRunFinish(runID))
		liveTools := tools.Until(wait, servertest.IsRunFinish(runID))
		if err := h.App.Sync(context.Background(), "part"); err != nil {
			t.Fatal(err)
		}
		for _, f := range liveText {
			if f.Event == "run-sync" {
				continue // both channels carry it
			}
			if !textChannelTypes[f.Decoded.Type] && !isLifecycle(f.Decoded.Type) {
				t.Fatalf("text channel carried a %s event", f.Decoded.Type)
			}
		}
		sawTool := false
		for _, f := range liveTools {
			if f.Event == "run-sync" {
				continue
			}
			if textChannelTypes[f.Decoded.Type] {
				t.Fatalf("tools channel carried a %s event", f.Decoded.Type)
			}
			sawTool = sawTool || f.Decoded.Type == instanceai.TypeToolCall
		}
		if !sawTool || liveText[0].Decoded.Type != instanceai.TypeRunStart || liveTools[0].Decoded.Type != instanceai.TypeRunStart {
			t.Fatalf("channels miss their run framing or tool calls: text %d frames, tools %d (first %q/%s, %q/%s)", len(liveText), len(liveTools), liveText[0].Event, liveText[0].Decoded.Type, liveTools[0].Event, liveTools[0].Decoded.Type)
		}

		// Every stored row is in exactly one channel, or in both when it
		// frames the run; each channel's replay after any cursor is the
		// log's rows of that channel after it, with their ids.
		log := servertest.StoredEvents(t, store, "part")
		// The thread's derived title may be stored after the run: the
		// comparison covers the run's rows.
		end := len(log)
		for i, row := range log {
			if row.Event.Type == instanceai.TypeRunFinish {
				end = i + 1
			}
		}
		log = log[:end]
		for c := 0; c < len(log)-1; c += 3 {
			cursor := strconv.FormatInt(log[c].Seq, 10)
			for _, ch := range []string{"text", "tools"} {
				var want []instanceai.StoredEvent
				for _, row := range log[c+1:] {
					if isLifecycle(row.Event.Type) || textChannelTypes[row.Event.Type] == (ch == "text") {
						want = append(want, row)
					}
				}
				conn := h.ConnectQuery("part", "channel="+ch, cursor, false)
				got := conn.Until(wait, servertest.IsRunFinish(runID))
				conn.Close()
				if len(got) != len(want) {
					t.Fatalf("channel %s after %s: %d frames, want %d", ch, cursor, len(got), len(want))
				}
				for i := range want {
					data, _ := json.Marshal(&want[i].Event)
					if got[i].ID != strconv.FormatInt(want[i].Seq, 10) || got[i].Data != string(data) {
						t.Fatalf("channel %s after %s, frame %d: id %s %s, want id %d %s", ch, cursor, i, got[i].ID, got[i].Data, want[i].Seq, data)
					}
				}
			}
		}

		code, body := h.Do(http.MethodGet, "/instance-ai/events/part?channel=audio", "")
		if code != http.StatusBadRequest || fieldOf(body) != "channel" {
			t.Fatalf("bad channel: %d %v", code, body)
		}
	})
}

// fieldOf is the field a JSON error names.
func fieldOf(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	if f, ok := d["field"].(string); ok {
		return f
	}
	f, _ := e["field"].(string)
	return f
}
