package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// journal is the harness's own log of a scenario (faults, chats, answers,
// phases), kept beside the instances' logs so that an anomaly can be put
// next to what the harness did at the time.
type journal struct {
	mu sync.Mutex
	w  io.WriteCloser
}

func openJournal(dir string) *journal {
	f, err := os.Create(filepath.Join(dir, "harness.log"))
	if err != nil {
		return &journal{}
	}
	return &journal{w: f}
}

func (j *journal) printf(format string, args ...any) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w != nil {
		fmt.Fprintf(j.w, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}
}

func (j *journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.w != nil {
		j.w.Close()
		j.w = nil
	}
}

// dumpDatabase writes what the scenario's database holds into dir: every
// event row (events.jsonl) and the claim and confirmation tables
// (tables.txt), since the database is dropped with the cluster.
func dumpDatabase(ctx context.Context, db *sql.DB, dir string) error {
	f, err := os.Create(filepath.Join(dir, "events.jsonl"))
	if err != nil {
		return err
	}
	defer f.Close()
	rows, err := db.QueryContext(ctx, `SELECT thread_id, seq, created_at, data FROM events ORDER BY thread_id, seq`)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for rows.Next() {
		var r struct {
			Thread string          `json:"thread"`
			Seq    int64           `json:"seq"`
			At     time.Time       `json:"writtenAt"`
			Data   json.RawMessage `json:"event"`
		}
		var data string
		if err := rows.Scan(&r.Thread, &r.Seq, &r.At, &data); err != nil {
			rows.Close()
			return err
		}
		r.Data = json.RawMessage(data)
		if err := enc.Encode(&r); err != nil {
			rows.Close()
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	t, err := os.Create(filepath.Join(dir, "tables.txt"))
	if err != nil {
		return err
	}
	defer t.Close()
	for _, q := range []string{
		`SELECT thread_id, run_id, owner_id, suspended, lease_expires, claimed_at FROM active_runs ORDER BY thread_id`,
		`SELECT thread_id, agent_id, run_id, owner_id, lease_expires FROM background_agents ORDER BY thread_id, agent_id`,
		`SELECT request_id, thread_id, run_id, status, created_at, answered_at, answer FROM confirmations ORDER BY thread_id, ord`,
	} {
		if err := dumpQuery(ctx, db, t, q); err != nil {
			return err
		}
	}
	return nil
}

func dumpQuery(ctx context.Context, db *sql.DB, w io.Writer, q string) error {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	fmt.Fprintf(w, "%s\n", q)
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return err
		}
		for i, c := range cols {
			fmt.Fprintf(w, "  %s=%s", c, vals[i].String)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	return rows.Err()
}
