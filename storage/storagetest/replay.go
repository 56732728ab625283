package storagetest

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// ReplayEvents is the length of the thread BenchReplay reads.
const ReplayEvents = 100_000

// RawReplayPage is a backend's baseline for BenchReplay: one page of a
// thread's log read with a bare query, each row's seq and bytes handed to
// row (the bytes are valid only during the call). It returns how many rows
// the page held.
type RawReplayPage func(ctx context.Context, threadID string, after int64, limit int, row func(seq int64, data []byte)) (int, error)

// SQLReplayPage is RawReplayPage on a SQL database: query is the backend's
// spelling of `SELECT seq, data FROM events WHERE thread_id = ? AND seq > ?
// ORDER BY seq LIMIT ?`, run as it stands (prepared by the driver on each
// call, as any ad-hoc query is) and scanned into sql.RawBytes, the least
// database/sql can do per row.
func SQLReplayPage(db *sql.DB, query string) RawReplayPage {
	return func(ctx context.Context, threadID string, after int64, limit int, row func(int64, []byte)) (int, error) {
		rows, err := db.QueryContext(ctx, query, threadID, after, limit)
		if err != nil {
			return 0, err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var seq int64
			var data sql.RawBytes
			if err := rows.Scan(&seq, &data); err != nil {
				return n, err
			}
			row(seq, data)
			n++
		}
		return n, rows.Err()
	}
}

// BenchReplay measures a full replay of a ReplayEvents-event thread to one
// client — instanceai.OpenFeed from the start, page by page until every
// event was delivered — against raw, the same pages read with a bare query
// on the same database, in the same run. Sub-benchmarks:
//
//	feed   the feed alone; reports events/s
//	raw    the baseline alone; reports events/s
//	ratio  one feed replay and one raw replay per iteration, alternating
//	       which goes first; reports both rates and feed/raw
//
// Both check what they read: every seq once, in order, with bytes.
func BenchReplay(b *testing.B, s instanceai.Store, raw RawReplayPage) {
	ctx := context.Background()
	id := fmt.Sprintf("replay-%d", time.Now().UnixNano())
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: id, OwnerID: "bench"}); err != nil {
		b.Fatalf("EnsureThread: %v", err)
	}
	const chunk = 4096
	for done := 0; done < ReplayEvents; done += chunk {
		if _, err := s.Append(ctx, id, TypicalBatch("run-replay", min(chunk, ReplayEvents-done))); err != nil {
			b.Fatalf("Append: %v", err)
		}
	}
	hub := instanceai.NewHub(16)
	// page is the feed's page size (instanceai's replayPage), so that both
	// sides make the same number of round trips.
	const page = 1000

	viaFeed := func(b *testing.B) {
		feed := instanceai.OpenFeed(s, hub, id, 0)
		defer feed.Close()
		var last int64
		for last < ReplayEvents {
			batch, err := feed.Next(ctx, nil)
			if err != nil {
				b.Fatalf("feed: %v", err)
			}
			for _, d := range batch {
				if d.ID != last+1 || len(d.Wire) == 0 {
					b.Fatalf("feed delivered id %d (%d bytes) after %d", d.ID, len(d.Wire), last)
				}
				last = d.ID
			}
		}
	}
	viaRaw := func(b *testing.B) {
		var last int64
		for last < ReplayEvents {
			n, err := raw(ctx, id, last, page, func(seq int64, data []byte) {
				if seq != last+1 || len(data) == 0 {
					b.Fatalf("raw read seq %d (%d bytes) after %d", seq, len(data), last)
				}
				last = seq
			})
			if err != nil {
				b.Fatalf("raw: %v", err)
			}
			if n == 0 {
				b.Fatalf("raw read nothing after %d", last)
			}
		}
	}
	replays := func(b *testing.B, f func(*testing.B)) {
		n := 0
		for b.Loop() {
			f(b)
			n++
		}
		b.ReportMetric(float64(n*ReplayEvents)/b.Elapsed().Seconds(), "events/s")
	}

	b.Run("feed", func(b *testing.B) { replays(b, viaFeed) })
	b.Run("raw", func(b *testing.B) { replays(b, viaRaw) })
	b.Run("ratio", func(b *testing.B) {
		var feedTime, rawTime time.Duration
		timed := func(d *time.Duration, f func(*testing.B)) {
			t0 := time.Now()
			f(b)
			*d += time.Since(t0)
		}
		i := 0
		for b.Loop() {
			if i%2 == 0 {
				timed(&feedTime, viaFeed)
				timed(&rawTime, viaRaw)
			} else {
				timed(&rawTime, viaRaw)
				timed(&feedTime, viaFeed)
			}
			i++
		}
		events := float64(i * ReplayEvents)
		b.ReportMetric(events/feedTime.Seconds(), "feed-events/s")
		b.ReportMetric(events/rawTime.Seconds(), "raw-events/s")
		b.ReportMetric(rawTime.Seconds()/feedTime.Seconds(), "feed/raw")
	})
}
