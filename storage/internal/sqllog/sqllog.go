// Package sqllog is the event log and run index on SQL tables, shared by
// the SQLite and PostgreSQL backends. The threads table's last_seq counter
// hands out seqs: an append bumps it inside its transaction, so seqs follow
// commit order and never skip; the events table holds the rows.
//
// What the two databases do differently is data in a Dialect: how
// placeholders are spelled (and with them the layout of the multi-row
// INSERT), how many one statement may bind, and whose clock stamps the rows.
package sqllog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/internal/records"
	"github.com/threadline/threadline/storage/internal/storeerr"
)

// Placeholders is how a database spells bind parameters.
type Placeholders int

const (
	// Question is SQLite's ?. Every row of the events INSERT binds all of
	// its values, thread id and timestamp included: numbered parameters
	// (?1 shared by all rows) would be fewer, but the driver resolves each
	// numbered parameter's name by a linear search, which makes binding a
	// large batch quadratic.
	Question Placeholders = iota
	// Dollar is PostgreSQL's $1, $2, …. The events INSERT binds the thread
	// id and the timestamp once, as $1 and $2, and the rest per row.
	Dollar
)

// Rebind turns the ? placeholders of q into p's.
func (p Placeholders) Rebind(q string) string {
	if p != Dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// sharedParams and rowParams count the parameters of the events INSERT that
// all rows share and that each row binds.
func (p Placeholders) sharedParams() int {
	if p == Dollar {
		return 2
	}
	return 0
}

func (p Placeholders) rowParams() int { return 7 - p.sharedParams() }

// insertSQL is a multi-row INSERT of rows events.
func (p Placeholders) insertSQL(rows int) string {
	const head = `INSERT INTO events (thread_id, seq, type, run_id, agent_id, data, created_at) VALUES `
	var b strings.Builder
	b.Grow(len(head) + rows*40)
	b.WriteString(head)
	next := p.sharedParams() + 1
	for r := range rows {
		if r > 0 {
			b.WriteByte(',')
		}
		if p != Dollar {
			b.WriteString(`(?,?,?,?,?,?,?)`)
			continue
		}
		b.WriteString("($1")
		for range p.rowParams() {
			b.WriteString(",$")
			b.WriteString(strconv.Itoa(next))
			next++
		}
		b.WriteString(",$2)")
	}
	return b.String()
}

// insertArgs are the parameters of insertSQL(len(events)) for events that
// take the seqs from first on. The data column is text, so the encodings go
// in as strings (lib/pq would send []byte as bytea).
func (p Placeholders) insertArgs(threadID string, stamp any, first int64, events []instanceai.Event, data [][]byte) []any {
	args := make([]any, 0, p.sharedParams()+p.rowParams()*len(events))
	if p == Dollar {
		args = append(args, threadID, stamp)
	}
	for i := range events {
		e := &events[i]
		seq := first + int64(i)
		if p == Dollar {
			args = append(args, seq, string(e.Type), e.RunID, e.AgentID, string(data[i]))
		} else {
			args = append(args, threadID, seq, string(e.Type), e.RunID, e.AgentID, string(data[i]), stamp)
		}
	}
	return args
}

// Dialect is what one database does differently.
type Dialect struct {
	// Name prefixes errors ("sqlite", "postgres").
	Name         string
	Placeholders Placeholders
	// MaxParams is the most bind parameters one statement may have; a
	// larger batch is split over several INSERTs in the same transaction.
	MaxParams int
	// Reserve moves the thread's counter on by n inside tx and stamps its
	// updated_at, if the thread is owner's (any owner when owner is ""). It
	// returns the new last_seq and the created_at value of the batch's
	// rows, or sql.ErrNoRows for a missing thread or another owner's.
	Reserve func(ctx context.Context, tx *sql.Tx, threadID, owner string, n int64) (last int64, stamp any, err error)
	// AppendOne, when set, stores a batch of at most MaxRows rows with one
	// statement that moves the counter and inserts the rows, in place of
	// the transaction of Reserve and the INSERTs: on a server every
	// statement of that transaction is a round trip, and one statement is
	// atomic by itself. The owner condition is Reserve's. It returns the
	// batch's last seq, or sql.ErrNoRows for a missing thread or another
	// owner's.
	AppendOne func(ctx context.Context, db *sql.DB, threadID, owner string, events []instanceai.Event, data [][]byte) (last int64, err error)
	// AppendOneFenced, when set, is AppendOne for a batch with fencing
	// tokens (the distinct non-zero ones): the same statement checks that
	// claim rows of the thread hold every token, and stores nothing
	// otherwise (sql.ErrNoRows, as for a missing thread). The check must
	// see claims as they are when the counter moves, not as the statement
	// began: see ShareLock.
	AppendOneFenced func(ctx context.Context, db *sql.DB, threadID, owner string, events []instanceai.Event, data [][]byte, tokens []int64) (last int64, err error)
	// ShareLock is the row-locking clause with which an append's
	// transaction reads the claim rows that hold its tokens, before it
	// moves the thread's counter (" FOR SHARE" on PostgreSQL). The lock
	// waits for a take or release of those rows under way, reads the rows
	// as that change left them, and keeps the next change out until the
	// append commits. SQLite needs none: an append's transaction holds
	// the database's write lock from its BEGIN (IMMEDIATE), so what it
	// reads is current and no claim changes before it commits.
	ShareLock string
	// Err, when set, amends every error before it is wrapped (PostgreSQL
	// adds the context's error to its driver's own).
	Err func(ctx context.Context, err error) error
	// ByteSlice is the expression of bytes [?, ? more) of the data column
	// (1-based start, then length), counted in bytes, not characters.
	ByteSlice string
	// BudgetInQuery cuts a page at its byte budget in the page's query
	// (a running sum of the rows' sizes over the page), for a database
	// server: a result is sent whole once its query runs, so a page cut by
	// its reader would cost the rows past the budget all the same (the
	// driver receives and drops them when the reader closes the rows).
	// Without it the reader stops at the row that reaches the budget,
	// which SQLite, reading in the process, steps no further than.
	BudgetInQuery bool
}

// Log implements instanceai.EventLog and instanceai.RunIndex on one
// database.
type Log struct {
	d Dialect
	// w takes the appends, r the reads (SQLite keeps one writer connection
	// apart from its readers; PostgreSQL passes one pool twice).
	w, r    *sql.DB
	maxRows int

	// inserts holds the writer's prepared INSERTs, by row count. A batch
	// goes in chunks whose sizes are powers of two (64 = one chunk; 100 =
	// 64 + 32 + 4), so a handful of statements serve every batch size and
	// each is parsed once, not once per append: parsing a multi-row INSERT
	// costs more than binding it.
	insertsMu sync.Mutex
	inserts   map[int]*sql.Stmt
}

var (
	_ instanceai.EventLog   = (*Log)(nil)
	_ instanceai.RunIndex   = (*Log)(nil)
	_ instanceai.PartReader = (*Log)(nil)
)

// New returns the event log of a database.
func New(d Dialect, writer, reader *sql.DB) *Log {
	p := d.Placeholders
	return &Log{d: d, w: writer, r: reader, maxRows: (d.MaxParams - p.sharedParams()) / p.rowParams()}
}

// MaxRows is the number of rows one INSERT statement takes.
func (l *Log) MaxRows() int { return l.maxRows }

// SetMaxRows lowers the number of rows per INSERT statement, so that a test
// can split a small batch.
func (l *Log) SetMaxRows(n int) { l.maxRows = max(1, min(n, l.maxRows)) }

func (l *Log) q(query string) string { return l.d.Placeholders.Rebind(query) }

// fail wraps err with the backend's name and what was being done.
func (l *Log) fail(ctx context.Context, err error, format string, args ...any) error {
	if l.d.Err != nil {
		err = l.d.Err(ctx, err)
	}
	return storeerr.Errorf("%s: %s: %w", l.d.Name, fmt.Sprintf(format, args...), err)
}

// Append implements instanceai.EventLog.
func (l *Log) Append(ctx context.Context, threadID string, events []instanceai.Event) (int64, error) {
	data, err := records.EncodeEvents(events)
	if err != nil {
		return 0, l.fail(ctx, err, "append to thread %q", threadID)
	}
	return l.AppendEncoded(ctx, threadID, events, data)
}

// AppendEncoded implements instanceai.EventLog.
func (l *Log) AppendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	first, err := l.appendEncoded(ctx, threadID, events, data)
	if err != nil {
		return 0, l.fail(ctx, err, "append to thread %q", threadID)
	}
	return first, nil
}

func (l *Log) appendEncoded(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte) (int64, error) {
	if err := records.CheckEncoded(events, data); err != nil {
		return 0, err
	}
	if len(events) == 0 {
		// Nothing to write; report where the next append would start.
		var next int64
		err := l.r.QueryRowContext(ctx, l.q(`SELECT last_seq + 1 FROM threads WHERE id = ?`), threadID).Scan(&next)
		return next, notFound(err)
	}
	owner, err := records.EventsUser(events)
	if err != nil {
		return 0, err
	}
	return l.append(ctx, threadID, owner, events, data, nil)
}

// AppendFenced implements instanceai.FencedAppender.
func (l *Log) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	first, err := l.appendFenced(ctx, threadID, events, data, fences)
	if err != nil {
		return 0, l.fail(ctx, err, "append to thread %q", threadID)
	}
	return first, nil
}

func (l *Log) appendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	tokens, err := records.Fences(events, fences)
	if err != nil {
		return 0, err
	}
	if len(tokens) == 0 {
		return l.appendEncoded(ctx, threadID, events, data)
	}
	if err := records.CheckEncoded(events, data); err != nil {
		return 0, err
	}
	owner, err := records.EventsUser(events)
	if err != nil {
		return 0, err
	}
	return l.append(ctx, threadID, owner, events, data, tokens)
}

// append stores events in the thread if owner owns it (any owner when
// owner is "") and claim rows of the thread hold every one of tokens: the
// owner is part of the statement that moves the counter, so a thread
// deleted and taken by another user between a run's start and its append
// refuses the run's events as a missing thread would, and the tokens are
// checked in the same transaction, so an instance whose claim was taken
// cannot append after the taker.
func (l *Log) append(ctx context.Context, threadID, owner string, events []instanceai.Event, data [][]byte, tokens []int64) (first int64, err error) {
	n := int64(len(events))
	if l.d.AppendOne != nil && len(events) <= l.maxRows && (len(tokens) == 0 || l.d.AppendOneFenced != nil) {
		var last int64
		if len(tokens) == 0 {
			last, err = l.d.AppendOne(ctx, l.w, threadID, owner, events, data)
		} else {
			last, err = l.d.AppendOneFenced(ctx, l.w, threadID, owner, events, data, tokens)
		}
		if errors.Is(err, sql.ErrNoRows) && len(tokens) > 0 {
			// A missing thread, another owner's, or a stale token: a
			// second look tells which. A token stale then is stale for
			// good, so the answer holds for the statement.
			return 0, l.refusal(ctx, l.w, threadID, owner, tokens, nil)
		}
		if err != nil {
			return 0, notFound(err)
		}
		return last - n + 1, nil
	}
	// The statements are prepared before the transaction begins: SQLite's
	// writer pool has one connection, which the transaction holds.
	var chunks []*sql.Stmt
	for left := len(events); left > 0; {
		rows := chunkRows(left, l.maxRows)
		stmt, err := l.insert(ctx, rows)
		if err != nil {
			return 0, err
		}
		chunks = append(chunks, stmt)
		left -= rows
	}
	tx, err := l.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if len(tokens) > 0 {
		// The claim rows first, then the counter row: every appender and
		// every claim change takes them in this order (a take touches no
		// threads row), so none waits for another in a cycle.
		held, err := l.heldFences(ctx, tx, threadID, tokens, l.d.ShareLock)
		if err != nil {
			return 0, err
		}
		if len(records.Stale(tokens, held)) > 0 {
			return 0, l.refusal(ctx, tx, threadID, owner, tokens, held)
		}
	}
	// Within the transaction nobody else can move the counter (SQLite has
	// one writer; PostgreSQL's row lock queues the others until COMMIT), so
	// first..last is this batch's.
	last, stamp, err := l.d.Reserve(ctx, tx, threadID, owner, n)
	if err != nil {
		return 0, notFound(err)
	}
	first = last - n + 1
	p := l.d.Placeholders
	lo := 0
	for _, stmt := range chunks {
		hi := lo + chunkRows(len(events)-lo, l.maxRows)
		args := p.insertArgs(threadID, stamp, first+int64(lo), events[lo:hi], data[lo:hi])
		if _, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args...); err != nil {
			return 0, err
		}
		lo = hi
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return first, nil
}

// querier runs the queries of an append: the writer pool, or its
// transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// heldFences returns those of tokens that a claim row of the thread holds
// (a token is in at most one row: every claim gets its own), reading the
// rows with lock.
func (l *Log) heldFences(ctx context.Context, q querier, threadID string, tokens []int64, lock string) ([]int64, error) {
	in := "?" + strings.Repeat(", ?", len(tokens)-1)
	args := make([]any, 0, 2+2*len(tokens))
	args = append(args, threadID)
	for _, f := range tokens {
		args = append(args, f)
	}
	args = append(args, threadID)
	for _, f := range tokens {
		args = append(args, f)
	}
	rows, err := q.QueryContext(ctx, l.q(
		`WITH fa AS (SELECT fence FROM active_runs WHERE thread_id = ? AND fence IN (`+in+`)`+lock+`),
		      fb AS (SELECT fence FROM background_agents WHERE thread_id = ? AND fence IN (`+in+`)`+lock+`)
		 SELECT fence FROM fa UNION ALL SELECT fence FROM fb`), args...)
	if err != nil {
		return nil, storeerr.Errorf("check fencing tokens: %w", err)
	}
	defer rows.Close()
	var held []int64
	for rows.Next() {
		var f int64
		if err := rows.Scan(&f); err != nil {
			return nil, storeerr.Errorf("check fencing tokens: %w", err)
		}
		held = append(held, f)
	}
	if err := rows.Err(); err != nil {
		return nil, storeerr.Errorf("check fencing tokens: %w", err)
	}
	return held, nil
}

// refusal says why an append with tokens stored nothing: the thread is
// missing or another owner's (ErrNotFound, whatever the tokens), or some
// tokens are stale (a *instanceai.StaleFenceError naming them). held are
// the tokens found held, nil to look them up.
func (l *Log) refusal(ctx context.Context, q querier, threadID, owner string, tokens, held []int64) error {
	var one int
	err := q.QueryRowContext(ctx, l.q(`SELECT 1 FROM threads WHERE id = ? AND (? = '' OR owner_id = ?)`),
		threadID, owner, owner).Scan(&one)
	if err != nil {
		return notFound(err)
	}
	if held == nil {
		if held, err = l.heldFences(ctx, q, threadID, tokens, ""); err != nil {
			return err
		}
	}
	stale := records.Stale(tokens, held)
	if len(stale) == 0 {
		// Refused, yet the thread and every token are there now, which
		// tokens that are never handed out twice cannot give: reported as
		// a failure, which the writer retries.
		return errors.New("the append was refused but its thread and tokens are there now")
	}
	return &instanceai.StaleFenceError{Tokens: stale}
}

// chunkRows is the size of the next chunk of a batch with left rows to go:
// the largest power of two that is at most left and at most maxRows.
func chunkRows(left, maxRows int) int {
	return 1 << (bits.Len(uint(min(left, maxRows))) - 1)
}

// insert returns the prepared INSERT of rows rows, preparing it on the
// writer the first time. database/sql prepares it again by itself on a
// connection that has not seen it.
func (l *Log) insert(ctx context.Context, rows int) (*sql.Stmt, error) {
	l.insertsMu.Lock()
	defer l.insertsMu.Unlock()
	if stmt := l.inserts[rows]; stmt != nil {
		return stmt, nil
	}
	stmt, err := l.w.PrepareContext(ctx, l.d.Placeholders.insertSQL(rows))
	if err != nil {
		return nil, err
	}
	if l.inserts == nil {
		l.inserts = map[int]*sql.Stmt{}
	}
	l.inserts[rows] = stmt
	return stmt, nil
}

// Close releases the prepared statements. The store calls it before it
// closes its databases.
func (l *Log) Close() error {
	l.insertsMu.Lock()
	defer l.insertsMu.Unlock()
	var errs []error
	for rows, stmt := range l.inserts {
		errs = append(errs, stmt.Close())
		delete(l.inserts, rows)
	}
	return errors.Join(errs...)
}

// notFound turns "no such row" into instanceai.ErrNotFound.
func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return instanceai.ErrNotFound
	}
	return err
}

// pageQuery is the query of a page of the thread's log after a seq, of
// the columns given, with the capacity to size its slice with: a page is
// usually full, so sized up front the slice is not grown and copied
// log2(limit) times on the way.
func pageQuery(columns, threadID string, after int64, limit int) (q string, args []any, capacity int) {
	q = `SELECT ` + columns + ` FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq`
	args = []any{threadID, after}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	return q, args, min(max(limit, 0), 4096)
}

// ReadAfter implements instanceai.EventLog.
func (l *Log) ReadAfter(ctx context.Context, threadID string, after int64, limit int) ([]instanceai.StoredEvent, error) {
	q, args, capacity := pageQuery("seq, data", threadID, after, limit)
	out, err := l.queryEvents(ctx, threadID, capacity, q, args...)
	if err != nil {
		return nil, l.fail(ctx, err, "read thread %q after %d", threadID, after)
	}
	return out, nil
}

// budgetQuery is pageQuery cut at a byte budget by the query itself:
// the page's rows, each with the running sum of the sizes up to it, and of
// those the rows whose predecessors hold less than maxBytes, which keeps
// the first row always. The sizes are octet_length, which reads a value's
// size from its header, not the value (on PostgreSQL a large value is
// stored apart, TOASTed, and only its pointer is read), so the query
// reads the page's rows' sizes and sends only the page. It walks the
// page's index entries once: the window sums them as they go by, and the
// LIMIT ends the walk. columns may refer to data and to octet_length(data)
// as the events table's own would.
func budgetQuery(columns, threadID string, after int64, limit, maxBytes int) (q string, args []any, capacity int) {
	inner, args, capacity := pageQuery(`seq, type, run_id, data, octet_length(data) AS size,
		sum(octet_length(data)) OVER (ORDER BY seq ROWS UNBOUNDED PRECEDING) AS upto`, threadID, after, limit)
	q = `SELECT ` + columns + ` FROM (` + inner + `) page WHERE upto - size < ? ORDER BY seq`
	return q, append(args, maxBytes), capacity
}

// ReadPage implements instanceai.PageReader.
func (l *Log) ReadPage(ctx context.Context, threadID string, q instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	return l.page(ctx, threadID, q.After, q.Limit, q.MaxBytes, 0, q.SizesOnly)
}

// ReadRowsAfter implements instanceai.RowReader: ReadAfter's rows with
// their type column, not decoded, in pages that read no more than they
// return (see ReadPage).
func (l *Log) ReadRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes int) ([]instanceai.StoredRow, error) {
	return l.page(ctx, threadID, after, limit, maxBytes, 0, false)
}

// ReadLightRowsAfter implements instanceai.PartReader: ReadRowsAfter's
// rows, a row of more than large bytes without its data (the database
// reads its size from the value's header, not the value).
func (l *Log) ReadLightRowsAfter(ctx context.Context, threadID string, after int64, limit, maxBytes, large int) ([]instanceai.StoredRow, error) {
	return l.page(ctx, threadID, after, limit, maxBytes, large, false)
}

// page reads a page of the thread's rows after a seq: at most limit rows
// (limit <= 0: no bound), cut at maxBytes (<= 0: no budget) as
// instanceai.RowReader says, the data of the rows of more than large bytes
// left out when large > 0, and every row's when sizesOnly. A row left out
// comes with its size, octet_length, which both databases read from the
// value's header: PostgreSQL from the pointer to a TOASTed value, SQLite
// without reading the overflow pages of a value larger than its page
// (length() would read a text value whole to count its characters).
func (l *Log) page(ctx context.Context, threadID string, after int64, limit, maxBytes, large int, sizesOnly bool) ([]instanceai.StoredRow, error) {
	var args []any
	columns := "seq, type, run_id, data"
	light := sizesOnly || large > 0
	switch {
	case sizesOnly:
		columns = "seq, type, run_id, NULL, octet_length(data)"
	case large > 0:
		columns = "seq, type, run_id, CASE WHEN octet_length(data) > ? THEN NULL ELSE data END, octet_length(data)"
		args = append(args, large)
	}
	page := pageQuery
	if maxBytes > 0 && l.d.BudgetInQuery {
		page = func(columns, threadID string, after int64, limit int) (string, []any, int) {
			return budgetQuery(columns, threadID, after, limit, maxBytes)
		}
	}
	q, pargs, capacity := page(columns, threadID, after, limit)
	out, err := query(ctx, l, threadID, rowScanner(light, maxBytes), capacity, q, append(args, pargs...)...)
	if err != nil {
		return nil, l.fail(ctx, err, "read thread %q after %d", threadID, after)
	}
	return out, nil
}

// ReadRowPart implements instanceai.PartReader.
func (l *Log) ReadRowPart(ctx context.Context, threadID string, seq int64, off, n int) ([]byte, error) {
	var part []byte
	err := l.r.QueryRowContext(ctx, l.q(`SELECT `+l.d.ByteSlice+` FROM events WHERE thread_id = ? AND seq = ?`),
		off+1, n, threadID, seq).Scan(&part)
	if err != nil {
		return nil, l.fail(ctx, notFound(err), "read part of event %d of thread %q", seq, threadID)
	}
	return part, nil
}

// eventTypes maps a type column's bytes to the type's constant, so that a
// row's type costs no allocation.
var eventTypes = func() map[string]instanceai.EventType {
	m := make(map[string]instanceai.EventType, len(instanceai.AllTypes))
	for _, t := range instanceai.AllTypes {
		m[string(t)] = t
	}
	return m
}()

// rowArenaChunk is the size of the chunks scanRows copies rows into.
const rowArenaChunk = 64 << 10

// rowScanner reads (seq, type, run_id, data) rows, keeping each row's
// bytes, or with light (seq, type, run_id, data or NULL, size) rows, and
// closes the rows. It stops after the row that brings the rows' bytes to
// maxBytes (when > 0; a light row counts its size). Like scanEvents, it
// makes its page at the first row.
func rowScanner(light bool, maxBytes int) func(*sql.Rows, int) ([]instanceai.StoredRow, error) {
	return func(rows *sql.Rows, capacity int) ([]instanceai.StoredRow, error) {
		return scanRowsSized(rows, capacity, light, maxBytes)
	}
}

func scanRowsSized(rows *sql.Rows, capacity int, light bool, maxBytes int) ([]instanceai.StoredRow, error) {
	defer rows.Close()
	var out []instanceai.StoredRow
	// The rows' bytes are copied into shared chunks rather than one
	// allocation each (sql.RawBytes is valid only until the next row).
	var arena []byte
	total := 0
	for rows.Next() {
		if out == nil {
			out = make([]instanceai.StoredRow, 0, capacity)
		}
		var r instanceai.StoredRow
		var typ, runID sql.RawBytes
		// The bytes are scanned as the driver made them (a string, or a
		// slice database/sql copied), not as RawBytes: a large row is
		// then kept as it came, one allocation instead of three.
		var value any
		dest := []any{&r.Seq, &typ, &runID, &value}
		var size int
		if light {
			dest = append(dest, &size)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		t, ok := eventTypes[string(typ)]
		if !ok {
			t = instanceai.EventType(typ) // a type this build does not know
		}
		var data []byte
		switch v := value.(type) {
		case string:
			data = unsafe.Slice(unsafe.StringData(v), len(v)) // never written to
		case []byte:
			data = v
		case nil:
			if !light {
				return nil, storeerr.Errorf("row %d: data is NULL", r.Seq)
			}
			r.Size = size // left out: a large row
		default:
			return nil, storeerr.Errorf("row %d: data is a %T", r.Seq, value)
		}
		switch {
		case data == nil:
		case len(data) >= rowArenaChunk:
			r.Data = data[:len(data):len(data)]
		default:
			if cap(arena)-len(arena) < len(data) {
				arena = make([]byte, 0, rowArenaChunk)
			}
			start := len(arena)
			arena = append(arena, data...)
			r.Data = arena[start:len(arena):len(arena)]
		}
		r.Type = t
		// A string of its own, not one over the arena: a reader keeps run
		// ids (a feed's ledger does, for the runs it saw end), and one
		// over the arena would keep the whole chunk alive with it.
		r.RunID = string(runID)
		out = append(out, r)
		total += len(r.Data) + r.Size
		if maxBytes > 0 && total >= maxBytes {
			break
		}
	}
	return out, rows.Err()
}

// NextSeq implements instanceai.EventLog. It reads the log itself rather
// than the counter, so it reports what a reader can actually see.
func (l *Log) NextSeq(ctx context.Context, threadID string) (int64, error) {
	var next int64
	err := l.r.QueryRowContext(ctx, l.q(
		`SELECT (SELECT COALESCE(MAX(seq), 0) FROM events WHERE thread_id = t.id) + 1 FROM threads t WHERE t.id = ?`),
		threadID).Scan(&next)
	if err != nil {
		return 0, l.fail(ctx, notFound(err), "next seq of thread %q", threadID)
	}
	return next, nil
}

// ThreadExists returns instanceai.ErrNotFound for a missing thread. Queries
// of a thread's rows ask it only when they found none, to tell an empty
// answer from a missing thread.
func (l *Log) ThreadExists(ctx context.Context, id string) error {
	var one int
	return notFound(l.r.QueryRowContext(ctx, l.q(`SELECT 1 FROM threads WHERE id = ?`), id).Scan(&one))
}

// UnfinishedRunsSQL lists the runs with a run-start and no run-finish. Both
// sides of the anti-join read the partial indexes of migration 002.
const UnfinishedRunsSQL = `SELECT s.thread_id, s.run_id FROM events s
WHERE s.type = 'run-start' AND NOT EXISTS (
    SELECT 1 FROM events f WHERE f.type = 'run-finish' AND f.thread_id = s.thread_id AND f.run_id = s.run_id)
GROUP BY s.thread_id, s.run_id
ORDER BY s.thread_id, MIN(s.seq)`

// UnfinishedRuns implements instanceai.RunIndex: ordered by thread id, then
// by the position of the run's run-start in the log.
func (l *Log) UnfinishedRuns(ctx context.Context) ([]instanceai.RunRef, error) {
	out, err := l.unfinishedRuns(ctx)
	if err != nil {
		return nil, l.fail(ctx, err, "unfinished runs")
	}
	return out, nil
}

func (l *Log) unfinishedRuns(ctx context.Context) ([]instanceai.RunRef, error) {
	rows, err := l.r.QueryContext(ctx, UnfinishedRunsSQL)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []instanceai.RunRef
	for rows.Next() {
		var r instanceai.RunRef
		if err := rows.Scan(&r.ThreadID, &r.RunID); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RunEvents implements instanceai.RunIndex. A run's events follow its
// run-start (the registry emits it first), so the scan starts there rather
// than at the beginning of the thread; a run without a run-start is looked
// for in the whole thread. A missing thread is ErrNotFound.
func (l *Log) RunEvents(ctx context.Context, threadID, runID string) ([]instanceai.StoredEvent, error) {
	out, err := l.queryEvents(ctx, threadID, 0,
		`SELECT seq, data FROM events
		 WHERE thread_id = ? AND run_id = ? AND seq >= COALESCE(
		     (SELECT MIN(seq) FROM events WHERE type = 'run-start' AND thread_id = ? AND run_id = ?), 0)
		 ORDER BY seq`, threadID, runID, threadID, runID)
	if err != nil {
		return nil, l.fail(ctx, err, "events of run %q in thread %q", runID, threadID)
	}
	return out, nil
}

// query runs a query (with ? placeholders) of one thread's rows and reads
// them with scan, into a slice of capacity rows to begin with. Only an
// empty answer needs telling apart from a missing thread.
func query[T any](ctx context.Context, l *Log, threadID string, scan func(*sql.Rows, int) ([]T, error), capacity int, q string, args ...any) ([]T, error) {
	rows, err := l.r.QueryContext(ctx, l.q(q), args...)
	if err != nil {
		return nil, err
	}
	out, err := scan(rows, capacity)
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if err := l.ThreadExists(ctx, threadID); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// queryEvents is query of (seq, data) rows, decoded.
func (l *Log) queryEvents(ctx context.Context, threadID string, capacity int, q string, args ...any) ([]instanceai.StoredEvent, error) {
	return query(ctx, l, threadID, scanEvents, capacity, q, args...)
}

// scanEvents reads (seq, data) rows into stored events, keeping each row's
// bytes, and closes the rows. The slice is made at the first row: a read
// that finds nothing, which every event stream makes once its replay is
// over, allocates no page (128 KB at the default size).
func scanEvents(rows *sql.Rows, capacity int) ([]instanceai.StoredEvent, error) {
	defer rows.Close()
	var out []instanceai.StoredEvent
	for rows.Next() {
		if out == nil {
			out = make([]instanceai.StoredEvent, 0, capacity)
		}
		var se instanceai.StoredEvent
		var data []byte // a copy, unlike sql.RawBytes: StoredEvent.Data keeps it
		if err := rows.Scan(&se.Seq, &data); err != nil {
			return nil, err
		}
		// Event.UnmarshalJSON checks the bytes itself; json.Unmarshal would
		// scan the whole row once more before calling it.
		if err := se.Event.UnmarshalJSON(data); err != nil {
			return nil, storeerr.Errorf("decode event %d: %w", se.Seq, err)
		}
		se.Data = data
		out = append(out, se)
	}
	return out, rows.Err()
}

// MustAffect returns instanceai.ErrNotFound when res changed no row.
func MustAffect(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return instanceai.ErrNotFound
	}
	return nil
}
