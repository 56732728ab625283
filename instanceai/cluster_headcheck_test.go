package instanceai

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// The head check publishes into the hub what the log holds past what the
// bus delivered, for threads with subscribers that are quiet, and ends the
// subscribers of a thread the log no longer has.
func TestClusterHeadCheck(t *testing.T) {
	log := rowsLogWithHeads{rows: map[string][]StoredEvent{}}
	for seq := int64(1); seq <= 3; seq++ {
		f := toolFrame(t, seq)
		log.rows["t"] = append(log.rows["t"], StoredEvent{Seq: seq, Event: *f.Event, Data: f.Data})
	}
	hub := NewHub(64)
	c := NewCluster(&scriptedBus{}, hub, ClusterConfig{Instance: "me", Log: log, PollInterval: time.Hour})
	sub, _ := hub.Subscribe("t")
	gone, _ := hub.Subscribe("deleted")
	hub.Publish("t", []Frame{toolFrame(t, 1)})
	if err := c.heads.checkHeads(context.Background(), hub.Behind(0)); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for len(seqs) < 3 {
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range frames {
			seqs = append(seqs, f.Seq)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2, 3}) || hub.Contiguous("t") != 3 {
		t.Fatalf("the subscriber got %v (contiguous %d), want 1 2 3", seqs, hub.Contiguous("t"))
	}
	if _, err := gone.Next(context.Background()); !errors.Is(err, ErrThreadClosed) {
		t.Fatalf("the deleted thread's subscriber: %v, want ErrThreadClosed", err)
	}
}

// rowsLogWithHeads is a log of fixed rows that reads heads.
type rowsLogWithHeads struct {
	rowsLog
	rows map[string][]StoredEvent
}

func (l rowsLogWithHeads) ReadAfter(_ context.Context, thread string, after int64, limit int) ([]StoredEvent, error) {
	return rowsLog(l.rows[thread]).ReadAfter(context.Background(), thread, after, limit)
}

func (l rowsLogWithHeads) ReadRowsAfter(ctx context.Context, thread string, after int64, limit, maxBytes int) ([]StoredRow, error) {
	return rowsLog(l.rows[thread]).ReadRowsAfter(ctx, thread, after, limit, maxBytes)
}

func (l rowsLogWithHeads) ReadPage(ctx context.Context, thread string, q PageQuery) ([]StoredRow, error) {
	return rowsLog(l.rows[thread]).ReadPage(ctx, thread, q)
}

func (l rowsLogWithHeads) Heads(_ context.Context, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, id := range ids {
		if rows, ok := l.rows[id]; ok {
			out[id] = rows[len(rows)-1].Seq
		}
	}
	return out, nil
}

// A row committed and published while the heads are read (a slow read on
// a busy database) puts the hub past the head that read returns: the
// thread is live, and its subscribers stay.
func TestClusterHeadCheckKeepsAThreadThatGrewDuringTheRead(t *testing.T) {
	hub := NewHub(64)
	log := headsDuring{rowsLogWithHeads: rowsLogWithHeads{rows: map[string][]StoredEvent{}}, during: func() {
		hub.Publish("t", []Frame{toolFrame(t, 2)})
	}}
	first := toolFrame(t, 1)
	log.rows["t"] = []StoredEvent{{Seq: 1, Event: *first.Event, Data: first.Data}}
	c := NewCluster(&scriptedBus{}, hub, ClusterConfig{Instance: "me", Log: log, PollInterval: time.Hour})
	sub, _ := hub.Subscribe("t")
	hub.Publish("t", []Frame{toolFrame(t, 1)})
	if err := c.heads.checkHeads(context.Background(), []string{"t"}); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for len(seqs) < 2 {
		frames, err := sub.Next(context.Background())
		if err != nil {
			t.Fatalf("after %v: %v, want the thread's subscriber kept", seqs, err)
		}
		for _, f := range frames {
			seqs = append(seqs, f.Seq)
		}
	}
	if !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("the subscriber got %v, want 1 2", seqs)
	}
}

// headsDuring is a log whose head read runs during before it answers.
type headsDuring struct {
	rowsLogWithHeads
	during func()
}

func (l headsDuring) Heads(ctx context.Context, ids []string) (map[string]int64, error) {
	out, err := l.rowsLogWithHeads.Heads(ctx, ids)
	l.during()
	return out, err
}
