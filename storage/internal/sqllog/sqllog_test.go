package sqllog

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/threadline/threadline/instanceai"
)

func TestInsertSQL(t *testing.T) {
	for _, tc := range []struct {
		p    Placeholders
		want string
	}{
		{Question, `INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at) VALUES (?,?,?,?,?,?,?),(?,?,?,?,?,?,?)`},
		{Dollar, `INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at) VALUES ($1,$3,$4,$5,$6,$7,$2),($1,$8,$9,$10,$11,$12,$2)`},
	} {
		if got := tc.p.insertSQL(2); got != tc.want {
			t.Errorf("insertSQL(2) =\n%s\nwant\n%s", got, tc.want)
		}
	}
}

// The args line up with the placeholders: thread id, seq, type, run, agent,
// data (as text) and stamp, once per row or shared.
func TestInsertArgs(t *testing.T) {
	events := []instanceai.Event{{Type: instanceai.TypeStatus, RunID: "r", AgentID: "a"}, {Type: instanceai.TypeError}}
	data := [][]byte{[]byte(`{"a":1}`), []byte(`{}`)}
	got := Question.insertArgs("t", "now", 5, events, data)
	want := []any{"t", int64(5), "status", "r", "a", `{"a":1}`, "now", "t", int64(6), "error", "", "", `{}`, "now"}
	if !slices.Equal(got, want) {
		t.Errorf("Question args = %v, want %v", got, want)
	}
	got = Dollar.insertArgs("t", "now", 5, events, data)
	want = []any{"t", "now", int64(5), "status", "r", "a", `{"a":1}`, int64(6), "error", "", "", `{}`}
	if !slices.Equal(got, want) {
		t.Errorf("Dollar args = %v, want %v", got, want)
	}
}

// A full chunk binds no more parameters than the database allows, and one
// row more would.
func TestFullChunkFitsMaxParams(t *testing.T) {
	for _, tc := range []struct {
		p         Placeholders
		maxParams int
	}{{Question, 32766}, {Dollar, 65535}} {
		l := New(Dialect{Placeholders: tc.p, MaxParams: tc.maxParams}, nil, nil)
		rows := l.MaxRows()
		q := tc.p.insertSQL(rows)
		var highest int
		if tc.p == Dollar {
			highest = tc.p.sharedParams() + tc.p.rowParams()*rows
			if !strings.HasSuffix(q, ",$"+strconv.Itoa(highest)+",$2)") {
				t.Errorf("a full chunk of %d rows does not end at $%d", rows, highest)
			}
		} else {
			highest = strings.Count(q, "?")
		}
		if highest > tc.maxParams || highest+tc.p.rowParams() <= tc.maxParams {
			t.Errorf("placeholders %d: a full chunk binds %d parameters; the limit is %d", tc.p, highest, tc.maxParams)
		}
	}
}

func TestRebind(t *testing.T) {
	q := `SELECT 1 FROM t WHERE a = ? AND b = ? LIMIT ?`
	if got := Question.Rebind(q); got != q {
		t.Errorf("Question.Rebind = %s", got)
	}
	if got, want := Dollar.Rebind(q), `SELECT 1 FROM t WHERE a = $1 AND b = $2 LIMIT $3`; got != want {
		t.Errorf("Dollar.Rebind = %s, want %s", got, want)
	}
}

// A batch goes in power-of-two chunks, largest first, none over maxRows,
// covering every row exactly once.
func TestChunkRows(t *testing.T) {
	for _, tc := range []struct {
		n, maxRows int
		want       []int
	}{
		{1, 100, []int{1}},
		{64, 4680, []int{64}},
		{100, 4680, []int{64, 32, 4}},
		{20, 7, []int{4, 4, 4, 4, 4}},
		{10000, 4680, []int{4096, 4096, 1024, 512, 256, 16}},
	} {
		var got []int
		for left := tc.n; left > 0; {
			c := chunkRows(left, tc.maxRows)
			got = append(got, c)
			left -= c
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("chunks of %d rows (max %d) = %v, want %v", tc.n, tc.maxRows, got, tc.want)
		}
	}
}
