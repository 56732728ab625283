package instanceai

import (
	"context"
	"fmt"
)

// threadLog is the thread's log as a feed reads it: in pages bounded in
// rows and bytes, each page's size learnt from the one before.
type threadLog struct {
	log      EventLog
	threadID string
	// pageRows is how many rows the next page asks for (0: replayPage).
	pageRows int
}

// page reads the next page of rows after seq after, light (large rows
// left out, see PartReader) when asked and the log can; more is whether
// the log may hold rows after them.
func (l *threadLog) page(ctx context.Context, after int64, light bool) (rows []StoredRow, more bool, err error) {
	limit := l.pageRows
	if limit == 0 {
		limit = replayPage
	}
	if pr, ok := l.log.(PartReader); ok && light {
		rows, err = pr.ReadLightRowsAfter(ctx, l.threadID, after, limit, ReplayPageBytes, LargeRowBytes)
	} else {
		rows, err = ReadRowsAfter(ctx, l.log, l.threadID, after, limit, ReplayPageBytes)
	}
	if err != nil {
		return nil, false, err
	}
	// A page the byte bound cut short says how many rows the next one
	// will hold, about: asking for a few more than that, rather than
	// replayPage, spares a database server walking rows past the page to
	// size them, or, on a log that cuts pages where it reads them only
	// (no PageReader), sending rows the reader drops.
	cut := rowsBytes(rows) >= ReplayPageBytes
	l.pageRows = replayPage
	if cut {
		l.pageRows = min(max(len(rows)+len(rows)/8+1, 16), replayPage)
	}
	return rows, len(rows) == limit || cut, nil
}

// rowsAfter reads a page of rows after seq after, whole.
func (l *threadLog) rowsAfter(ctx context.Context, after int64) ([]StoredRow, error) {
	return ReadRowsAfter(ctx, l.log, l.threadID, after, replayPage, ReplayPageBytes)
}

// row reads the bytes of one row.
func (l *threadLog) row(ctx context.Context, seq int64) ([]byte, error) {
	return ReadRow(ctx, l.log, l.threadID, seq)
}

// rowHead reads the head of a large row a light page left out, where its
// envelope is.
func (l *threadLog) rowHead(ctx context.Context, seq int64) ([]byte, error) {
	pr, _ := l.log.(PartReader)
	return pr.ReadRowPart(ctx, l.threadID, seq, 0, envelopeBytes)
}

func (l *threadLog) nextSeq(ctx context.Context) (int64, error) {
	return l.log.NextSeq(ctx, l.threadID)
}

// replayPage bounds how many rows one log read returns.
const replayPage = 1000

// rowsBytes is the bytes of rows (a light row's size counted).
func rowsBytes(rows []StoredRow) int {
	n := 0
	for i := range rows {
		n += len(rows[i].Data) + rows[i].Size
	}
	return n
}

// ReadRow reads the bytes of one row of a thread's log: for a feed, a row
// a light read left out that it must look into itself (a live
// connection's block or ending read from the log).
func ReadRow(ctx context.Context, log EventLog, threadID string, seq int64) ([]byte, error) {
	rows, err := ReadRowsAfter(ctx, log, threadID, seq-1, 1, 0)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 || rows[0].Seq != seq {
		return nil, fmt.Errorf("event %d of thread %q is no longer stored", seq, threadID)
	}
	return rows[0].Data, nil
}

// envelopeBytes is how much of a large row the feed reads to decode its
// envelope: the encoder writes the payload last.
const envelopeBytes = 4 << 10

// ReplayPageBytes bounds the bytes of one page of a replay (one row more
// when a single row is larger): small enough that thousands of
// connections replaying at once, or stuck on clients that do not read,
// hold little (a stream that stops reading in the middle of a page holds
// the rest of it), large enough that a page is one query for several
// hundred typical rows.
const ReplayPageBytes = 128 << 10

// LargeRowBytes is the size from which a row is left out of a page for
// its stream to read in parts (see PartReader).
const LargeRowBytes = 64 << 10
