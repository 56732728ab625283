package sqllog

import (
	"context"
	"strings"

	"github.com/threadline/threadline/instanceai"
)

var _ instanceai.HeadReader = (*Log)(nil)

// headsChunk bounds the ids one heads query binds (SQLite's and
// PostgreSQL's parameter limits are both far above it).
const headsChunk = 500

// Heads implements instanceai.HeadReader from the threads' counters: an
// append moves the counter and inserts its rows in one transaction, so a
// thread's last_seq is the highest seq a reader can see.
func (l *Log) Heads(ctx context.Context, threadIDs []string) (map[string]int64, error) {
	out := make(map[string]int64, len(threadIDs))
	for len(threadIDs) > 0 {
		chunk := threadIDs[:min(len(threadIDs), headsChunk)]
		threadIDs = threadIDs[len(chunk):]
		args := make([]any, len(chunk))
		for i, id := range chunk {
			args[i] = id
		}
		q := `SELECT id, last_seq FROM threads WHERE id IN (?` + strings.Repeat(`,?`, len(chunk)-1) + `)`
		rows, err := l.r.QueryContext(ctx, l.q(q), args...)
		if err != nil {
			return nil, l.fail(ctx, err, "heads of %d threads", len(chunk))
		}
		for rows.Next() {
			var id string
			var seq int64
			if err := rows.Scan(&id, &seq); err != nil {
				rows.Close()
				return nil, l.fail(ctx, err, "heads of %d threads", len(chunk))
			}
			out[id] = seq
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, l.fail(ctx, err, "heads of %d threads", len(chunk))
		}
	}
	return out, nil
}
