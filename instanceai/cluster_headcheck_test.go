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

func (l rowsLogWithHeads) Heads(_ context.Context, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, id := range ids {
		if rows, ok := l.rows[id]; ok {
			out[id] = rows[len(rows)-1].Seq
		}
	}
	return out, nil
}
