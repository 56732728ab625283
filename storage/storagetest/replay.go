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
//	feed   the feed decoding every row (as an AG-UI replay reads it);
//	       reports events/s
//	rows   the feed with SkipDecode (as the native stream reads it);
//	       reports events/s
//	raw    the baseline alone; reports events/s
//	ratio  one replay of each per iteration, rotating which goes first;
//	       reports the three rates, feed/raw and rows/raw
//
// Both check what they read: every seq once, in order, with bytes.
func BenchReplay(b *testing.B, s instanceai.Store, raw RawReplayPage, analyze func() error) {
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
	if analyze != nil {
		// The planner's statistics, as the database's own maintenance
		// would have them by now: without them PostgreSQL plans each page
		// as a scan and sort of the whole table.
		if err := analyze(); err != nil {
			b.Fatalf("analyze: %v", err)
		}
	}
	hub := instanceai.NewHub(16)
	// page is the feed's page size (instanceai's replayPage), so that both
	// sides make the same number of round trips.
	const page = 1000

	feedOf := func(skipDecode bool) func(b *testing.B) {
		return func(b *testing.B) { replayFeed(b, s, hub, id, skipDecode) }
	}
	viaFeed, viaRows := feedOf(false), feedOf(true)
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
	b.Run("rows", func(b *testing.B) { replays(b, viaRows) })
	b.Run("raw", func(b *testing.B) { replays(b, viaRaw) })
	b.Run("ratio", func(b *testing.B) {
		sides := []struct {
			name string
			f    func(*testing.B)
			took time.Duration
		}{{"feed", viaFeed, 0}, {"rows", viaRows, 0}, {"raw", viaRaw, 0}}
		i := 0
		for b.Loop() {
			for k := range sides {
				side := &sides[(i+k)%len(sides)]
				t0 := time.Now()
				side.f(b)
				side.took += time.Since(t0)
			}
			i++
		}
		events := float64(i * ReplayEvents)
		for _, side := range sides {
			b.ReportMetric(events/side.took.Seconds(), side.name+"-events/s")
		}
		raw := sides[2].took.Seconds()
		b.ReportMetric(raw/sides[0].took.Seconds(), "feed/raw")
		b.ReportMetric(raw/sides[1].took.Seconds(), "rows/raw")
	})
}

// replayFeed reads the whole thread through a feed from the start and
// checks every id arrives once, in order, with bytes (and, decoding, with
// its event).
func replayFeed(b *testing.B, s instanceai.Store, hub *instanceai.Hub, id string, skipDecode bool) {
	ctx := context.Background()
	feed := instanceai.OpenFeed(s, hub, id, 0)
	feed.SkipDecode = skipDecode
	defer feed.Close()
	var last int64
	for last < ReplayEvents {
		batch, err := feed.Next(ctx, nil)
		if err != nil {
			b.Fatalf("feed: %v", err)
		}
		for _, d := range batch {
			if d.ID != last+1 || len(d.Data) == 0 || d.Kind == "" || (d.Event == nil) != skipDecode {
				b.Fatalf("feed delivered id %d (%d bytes, kind %q, decoded %t) after %d", d.ID, len(d.Data), d.Kind, d.Event != nil, last)
			}
			last = d.ID
		}
	}
}
