package postgres

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/faultproxy"
)

// A page of the log bounded in bytes costs on the wire what it holds: the
// server sends no row past the one that reaches the budget (lib/pq would
// receive, and drop, every row the query matched), and a row whose bytes
// a page leaves out costs its size, not its bytes. The thread's large
// rows are two-byte characters, so that a budget counted in characters
// would let twice the bytes through.
func TestPagesCostWhatTheyHold(t *testing.T) {
	u, err := url.Parse(freshSchema(t))
	if err != nil || u.Host == "" {
		t.Fatalf("TEST_DATABASE_URL must be a postgres:// URL for the proxy to stand in for its host: %v", err)
	}
	target := u.Host
	if u.Port() == "" {
		target += ":5432"
	}
	proxy, err := faultproxy.Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u.Host = proxy.Addr()
	s := openDSN(t, u.String())
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.EnsureThread(ctx, instanceai.Thread{ID: "wide", OwnerID: "o"}); err != nil {
		t.Fatal(err)
	}
	const rows = 40
	var events []instanceai.Event
	for i := range rows {
		text := "small"
		if i%4 != 0 {
			text = strings.Repeat("é", 100_000) // 200 KB
		}
		events = append(events, instanceai.Event{Type: instanceai.TypeTextBlock, RunID: "r", AgentID: "a",
			ResponseID: "x", Payload: &instanceai.Text{Text: text}})
	}
	if _, err := s.Append(ctx, "wide", events); err != nil {
		t.Fatal(err)
	}
	const budget = 128 << 10
	for _, c := range []struct {
		name string
		read func(after int64) ([]instanceai.StoredRow, error)
	}{
		{"ReadPage", func(after int64) ([]instanceai.StoredRow, error) {
			return s.ReadPage(ctx, "wide", instanceai.PageQuery{After: after, Limit: 1000, MaxBytes: budget})
		}},
		{"ReadPage sizes only", func(after int64) ([]instanceai.StoredRow, error) {
			return s.ReadPage(ctx, "wide", instanceai.PageQuery{After: after, Limit: 1000, SizesOnly: true})
		}},
		{"ReadRowsAfter", func(after int64) ([]instanceai.StoredRow, error) {
			return s.ReadRowsAfter(ctx, "wide", after, 1000, budget)
		}},
		{"ReadLightRowsAfter", func(after int64) ([]instanceai.StoredRow, error) {
			return s.ReadLightRowsAfter(ctx, "wide", after, 1000, budget, instanceai.LargeRowBytes)
		}},
	} {
		for _, after := range []int64{0, 1, 17, rows - 2} {
			_, before := proxy.Bytes()
			page, err := c.read(after)
			if err != nil {
				t.Fatalf("%s after %d: %v", c.name, after, err)
			}
			_, now := proxy.Bytes()
			held := 0
			for _, r := range page {
				held += len(r.Data)
			}
			// Each row's seq, type, run and size, and the statement's own
			// messages, cost a few hundred bytes beside the rows' bytes.
			allowed := held + 100*len(page) + 4<<10
			if got := now - before; got > int64(allowed) {
				t.Errorf("%s after %d: %d rows holding %d bytes received %d bytes from the server, more than %d",
					c.name, after, len(page), held, got, allowed)
			}
		}
	}
}
