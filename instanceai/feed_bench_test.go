package instanceai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// reencodingLog hides the stored bytes, as a log that returns only decoded
// events would: replay must encode every event again.
type reencodingLog struct{ instanceai.EventLog }

func (l reencodingLog) ReadAfter(ctx context.Context, thread string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	rows, err := l.EventLog.ReadAfter(ctx, thread, after, limit)
	for i := range rows {
		rows[i].Data = nil
	}
	return rows, err
}

func (l reencodingLog) ReadRowsAfter(ctx context.Context, thread string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	rows, err := l.ReadAfter(ctx, thread, after, limit)
	if err != nil {
		return nil, err
	}
	return instanceai.RowsOf(rows, maxBytes)
}

func (l reencodingLog) ReadPage(ctx context.Context, thread string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	rows, err := l.ReadAfter(ctx, thread, q.After, q.Limit)
	if err != nil {
		return nil, err
	}
	return instanceai.PageOf(rows, q)
}

// BenchmarkReplay reads a 5,000-event thread from the start through a Feed,
// as a reconnecting client does, sending the stored bytes (stored) against
// encoding each decoded event again (reencode, the baseline). Both decode
// the rows; stored/reencode is the speedup of reusing the bytes.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	store := memory.New(memory.WithMaxEvents(10000), memory.WithMaxBytes(64<<20))
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "replay", OwnerID: "u"}); err != nil {
		b.Fatal(err)
	}
	const n = 5000
	events := make([]instanceai.Event, n)
	for i := range events {
		args, _ := json.Marshal(map[string]any{"workflowId": fmt.Sprintf("wf-%d", i), "nodes": []string{"Webhook", "AI Agent", "Slack"}})
		events[i] = instanceai.Event{Type: instanceai.TypeToolCall, RunID: "run_1", AgentID: "orchestrator-run_1", UserID: "u",
			TS: time.Now().UnixMilli(), Payload: &instanceai.ToolCall{ToolCallID: fmt.Sprintf("tc-%d", i), ToolName: "build-workflow", Args: args}}
	}
	if _, err := store.Append(ctx, "replay", events); err != nil {
		b.Fatal(err)
	}
	hub := instanceai.NewHub(16)
	readAll := func(b *testing.B, log instanceai.EventLog) {
		feed := instanceai.OpenFeed(log, hub, "replay", 0)
		defer feed.Close()
		for got := 0; got < n; {
			batch, err := feed.Next(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range batch {
				if d.ID > 0 {
					got++
				}
			}
		}
	}
	// Both in one loop, alternating, so that the machine's load weighs on
	// each alike.
	var storedTime, reencodeTime time.Duration
	timed := func(d *time.Duration, log instanceai.EventLog) {
		t0 := time.Now()
		readAll(b, log)
		*d += time.Since(t0)
	}
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			timed(&storedTime, store)
			timed(&reencodeTime, reencodingLog{store})
		} else {
			timed(&reencodeTime, reencodingLog{store})
			timed(&storedTime, store)
		}
		i++
	}
	replayed := float64(i * n)
	b.ReportMetric(replayed/storedTime.Seconds(), "stored-events/s")
	b.ReportMetric(replayed/reencodeTime.Seconds(), "reencode-events/s")
	b.ReportMetric(reencodeTime.Seconds()/storedTime.Seconds(), "stored/reencode")
}
