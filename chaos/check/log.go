package check

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/threadline/threadline/instanceai"
)

// Row is one stored event of a thread's log.
type Row struct {
	Seq   int64
	Event instanceai.Event
	// Data is the row's JSON text as stored.
	Data string
	// At is when the row was written (the database's clock).
	At time.Time
}

// ActiveRun is a row of the active_runs table.
type ActiveRun struct {
	Thread, Run, Owner string
	Suspended          bool
}

// BackgroundAgent is a row of the background_agents table.
type BackgroundAgent struct {
	Thread, Agent, Run, Owner string
}

// Log is what the database holds of the threads under test once the
// cluster is quiet.
type Log struct {
	// Threads maps each thread to its rows in seq order.
	Threads          map[string][]Row
	ActiveRuns       []ActiveRun
	BackgroundAgents []BackgroundAgent
}

// ReadLog reads the threads' logs and the claim tables straight from the
// database (not through any instance or proxy).
func ReadLog(ctx context.Context, db *sql.DB, threads []string) (*Log, error) {
	out := &Log{Threads: map[string][]Row{}}
	for _, th := range threads {
		out.Threads[th] = nil
	}
	rows, err := db.QueryContext(ctx,
		`SELECT thread_id, seq, data, created_at FROM events WHERE thread_id = ANY($1) ORDER BY thread_id, seq`,
		pq.Array(threads))
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var th string
		var r Row
		if err := rows.Scan(&th, &r.Seq, &r.Data, &r.At); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		if err := json.Unmarshal([]byte(r.Data), &r.Event); err != nil {
			return nil, fmt.Errorf("thread %s seq %d: stored event does not decode: %w", th, r.Seq, err)
		}
		out.Threads[th] = append(out.Threads[th], r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	ar, err := db.QueryContext(ctx,
		`SELECT thread_id, run_id, owner_id, suspended FROM active_runs WHERE thread_id = ANY($1) ORDER BY thread_id`,
		pq.Array(threads))
	if err != nil {
		return nil, fmt.Errorf("read active_runs: %w", err)
	}
	defer ar.Close()
	for ar.Next() {
		var a ActiveRun
		if err := ar.Scan(&a.Thread, &a.Run, &a.Owner, &a.Suspended); err != nil {
			return nil, fmt.Errorf("read active_runs: %w", err)
		}
		out.ActiveRuns = append(out.ActiveRuns, a)
	}
	if err := ar.Err(); err != nil {
		return nil, fmt.Errorf("read active_runs: %w", err)
	}
	ba, err := db.QueryContext(ctx,
		`SELECT thread_id, agent_id, run_id, owner_id FROM background_agents WHERE thread_id = ANY($1) ORDER BY thread_id, agent_id`,
		pq.Array(threads))
	if err != nil {
		return nil, fmt.Errorf("read background_agents: %w", err)
	}
	defer ba.Close()
	for ba.Next() {
		var b BackgroundAgent
		if err := ba.Scan(&b.Thread, &b.Agent, &b.Run, &b.Owner); err != nil {
			return nil, fmt.Errorf("read background_agents: %w", err)
		}
		out.BackgroundAgents = append(out.BackgroundAgents, b)
	}
	return out, ba.Err()
}
