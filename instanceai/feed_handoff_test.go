package instanceai_test

import (
	"context"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// gatedPublisher holds back every publish that carries a stored frame
// until release is closed: the moment between a batch's commit and its
// publish, stretched.
type gatedPublisher struct {
	hub     *instanceai.Hub
	release chan struct{}
}

func (g *gatedPublisher) Publish(threadID string, frames []instanceai.Frame) {
	for _, f := range frames {
		if f.Seq > 0 {
			<-g.release
			break
		}
	}
	g.hub.Publish(threadID, frames)
}

// A feed that replays a block the writer has committed but not yet
// published must not also send that block's text as an open segment: the
// hub still holds the segment open (it has not seen the block), and the
// client would show the text twice. The window is short in one process
// (between the append and the publish) and as long as the bus's delay on
// an instance that receives the frames from another.
func TestFeedDoesNotRepeatASegmentReplayedBeforeItsPublish(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(64)
	writer, gate, enqueue := gatedWriter(t, store, hub)
	// The delta is published (it is not stored, so the gate lets it by).
	enqueue(textDelta("x", "hello"))
	if err := writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	// The call closes the segment: block and call are committed, their
	// publish waits at the gate.
	enqueue(toolCall("c1"))
	waitUntil(t, "the block and the call are stored", func() bool {
		next, err := store.NextSeq(ctx, "t")
		return err == nil && next == 3
	})

	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	// What the feed has while the publish waits, then the rest.
	got := available(t, feed)
	close(gate.release)
	if err := writer.Sync(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	got = append(got, available(t, feed)...)
	var shape []string
	for _, d := range got {
		s := string(d.Event.Type)
		if p, ok := d.Event.Payload.(*instanceai.Text); ok {
			s += ":" + p.Text
		}
		shape = append(shape, s)
	}
	if len(got) != 2 || got[0].ID != 1 || got[1].ID != 2 {
		t.Fatalf("deliveries = %v (ids %v), want the block and the call once each", shape, ids(got))
	}
}

// gatedWriter is a writer of thread "t" into log whose publishes of
// stored frames wait at the gate until it is released, and a function
// that queues an event of run "r" of user "u" (agent "a" unless set).
func gatedWriter(t *testing.T, log instanceai.EventLog, hub *instanceai.Hub) (*instanceai.Writer, *gatedPublisher, func(instanceai.Event)) {
	t.Helper()
	gate := &gatedPublisher{hub: hub, release: make(chan struct{})}
	writer := instanceai.NewWriter(log, gate, instanceai.WriterConfig{IdleFlush: time.Hour})
	t.Cleanup(func() {
		select {
		case <-gate.release:
		default:
			close(gate.release)
		}
		_ = writer.Close(context.Background())
	})
	enqueue := func(ev instanceai.Event) {
		ev.RunID, ev.UserID, ev.TS = "r", "u", 1
		if ev.AgentID == "" {
			ev.AgentID = "a"
		}
		if err := writer.Enqueue("t", ev); err != nil {
			t.Fatal(err)
		}
	}
	return writer, gate, enqueue
}

// available returns what the feed delivers without waiting for more.
func available(t *testing.T, feed *instanceai.Feed) []instanceai.Delivery {
	t.Helper()
	var got []instanceai.Delivery
	for {
		out, err := feed.Next(context.Background(), closedTick)
		if err != nil {
			t.Fatal(err)
		}
		if out == nil {
			return got
		}
		got = append(got, out...)
	}
}

func ids(ds []instanceai.Delivery) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, d.ID)
	}
	return out
}

// On an instance that gets another's frames over the bus, the deltas of a
// segment can reach the hub after the block that closes it was read from
// the log: the feed skips them, since the block has their text, and takes
// the deltas of the next segment, which the block frame's arrival opens.
func TestFeedSkipsLateDeltasOfABlockItWasSent(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	stamp := func(ev instanceai.Event) instanceai.Event {
		ev.RunID, ev.AgentID, ev.UserID, ev.TS = "r", "a", "u", 1
		return ev
	}
	block := stamp(instanceai.Event{Type: instanceai.TypeTextBlock, ResponseID: "x", Payload: &instanceai.Text{Text: "hello"}})
	if _, err := store.Append(ctx, "t", []instanceai.Event{block}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(64)
	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	got := available(t, feed)
	if len(got) != 1 || got[0].ID != 1 {
		t.Fatalf("replay = ids %v; want the block", ids(got))
	}
	publish := func(seq int64, ev instanceai.Event, offset, after int64) {
		fr, err := instanceai.NewFrame(seq, &ev)
		if err != nil {
			t.Fatal(err)
		}
		if seq == 0 {
			fr.Offset, fr.HasOffset, fr.After = offset, true, after
		}
		hub.Publish("t", []instanceai.Frame{fr})
	}
	// The other instance's frames arrive: the block's deltas, published
	// before anything was committed, the block, then a new segment under
	// the same response id, published after the block.
	publish(0, stamp(textDelta("x", "hel")), 0, 0)
	publish(0, stamp(textDelta("x", "lo")), 3, 0)
	publish(1, block, 0, 0)
	publish(0, stamp(textDelta("x", " again")), 0, 1)
	var texts []string
	for _, d := range available(t, feed) {
		texts = append(texts, d.Event.Payload.(*instanceai.Text).Text)
	}
	if len(texts) != 1 || texts[0] != " again" {
		t.Fatalf("live texts = %q; want only the new segment's delta", texts)
	}
}

// A segment that began after stored events a feed has not replayed (its
// run's run-start committed after the feed's snapshot, on its way here
// through the bus) is not handed over as open text: the text would come
// before its run's start. Its later deltas are a gap for the feed, held
// back until the block.
func TestFeedHandsNoSegmentThatBeganAfterItsReplay(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	first := toolCall("c0")
	if _, err := store.Append(ctx, "t", []instanceai.Event{first}); err != nil {
		t.Fatal(err)
	}
	hub := instanceai.NewHub(64)
	stored, err := instanceai.NewFrame(1, &first)
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish("t", []instanceai.Frame{stored})
	ev := textDelta("x", "hello")
	delta, err := instanceai.NewFrame(0, &ev)
	if err != nil {
		t.Fatal(err)
	}
	delta.Offset, delta.HasOffset, delta.After = 0, true, 2 // after seq 2, not here yet
	hub.Publish("t", []instanceai.Frame{delta})

	feed := instanceai.OpenFeed(store, hub, "t", 0)
	defer feed.Close()
	for _, d := range available(t, feed) {
		if d.Event != nil && d.Event.Type == instanceai.TypeTextDelta {
			t.Fatalf("handed %+v, text of a segment that began after what the feed replayed", d.Event.Payload)
		}
	}
}
