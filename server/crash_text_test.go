package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// liveText reads the thread's live stream until at least n bytes of text
// deltas came, and returns their text.
func (p *process) liveText(ctx context.Context, thread string, n int) string {
	p.t.Helper()
	rd, done := p.live(ctx, thread)
	defer done()
	var text strings.Builder
	for text.Len() < n {
		f, err := rd.Next()
		if err != nil {
			p.t.Fatalf("live stream ended after %d bytes of text: %v", text.Len(), err)
		}
		var ev instanceai.Event
		if f.Data == "" || f.Event != "" || json.Unmarshal([]byte(f.Data), &ev) != nil {
			continue
		}
		if ev.Type == instanceai.TypeTextDelta {
			text.WriteString(ev.Payload.(*instanceai.Text).Text)
		}
	}
	return text.String()
}

// TestCrashKeepsStreamedText kills a server with SIGKILL while a long reply
// streams, after 40 KB of it went out live, and restarts it on the same
// store: the text checkpointed while it streamed comes back as the reply's
// block, losing at most the text of the last checkpoint interval, and a
// client connected while the run is settled is sent that block. With
// checkpoints off, the kill loses the whole reply, as every kill did
// before them. The figures are logged.
func TestCrashKeepsStreamedText(t *testing.T) {
	const seen, every = 40 << 10, 4 << 10
	// The writer stores a piece after the pass that crossed the threshold
	// went out, so a kill can come between the two: one pass (at most
	// 1,024 deltas of the reference agent's `long`, under 20 bytes each)
	// may be lost on top of the threshold.
	const bound = every + 1024*20
	for _, st := range crashStores {
		t.Run(st.name, func(t *testing.T) {
			spec := st.spec(t)
			for _, c := range []struct {
				name  string
				flags []string
			}{
				{"checkpoints", []string{"-checkpoint-bytes", fmt.Sprint(every), "-checkpoint-interval", "0"}},
				{"off", []string{"-checkpoint-bytes", "0", "-checkpoint-interval", "0"}},
			} {
				// A short lease: the restarted process settles the run
				// about 3 s after the kill, mostly while the replay below
				// is connected, so the recovered block reaches it live.
				c.flags = append(c.flags, "-lease", "3s", "-lease-renew", "1s")
				thread := "crash-text-" + c.name
				p := launch(t, spec, time.Millisecond, c.flags...)
				runID := p.chat(thread, "long 1000000")
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				live := p.liveText(ctx, thread, seen)
				cancel()
				p.Kill()

				p = launch(t, spec, time.Millisecond, c.flags...)
				var stored strings.Builder
				for _, f := range p.replayAll(thread, runID) {
					if f.Decoded.Type == instanceai.TypeTextBlock && f.Decoded.RunID == runID {
						stored.WriteString(f.Decoded.Payload.(*instanceai.Text).Text)
					}
				}
				kept := stored.String()
				lost := max(0, len(live)-len(kept))
				t.Logf("%s: %d bytes seen live before the kill, %d stored after the restart, %d lost", c.name, len(live), len(kept), lost)
				if !strings.HasPrefix(live, kept) && !strings.HasPrefix(kept, live) {
					t.Fatalf("%s: the stored text is not the text sent live", c.name)
				}
				switch c.name {
				case "checkpoints":
					if lost > bound {
						t.Fatalf("checkpoints: %d bytes lost, want at most %d", lost, bound)
					}
				case "off":
					if kept != "" {
						t.Fatalf("off: %d bytes stored without checkpoints", len(kept))
					}
				}
				p.Kill()
			}
		})
	}
}
