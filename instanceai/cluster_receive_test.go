package instanceai

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
)

// busPayload is the bus message from origin carrying frames of thread.
func busPayload(t *testing.T, origin, thread string, frames ...Frame) []byte {
	t.Helper()
	m := busMessage{Origin: origin, Thread: thread}
	for i := range frames {
		m.Frames = append(m.Frames, busFrameOf(&frames[i], frames[i].Data))
	}
	p, err := json.Marshal(&m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The messages that arrived together go to the hub as one batch per
// thread, each thread's frames in order; a resync notice between them is
// a barrier, and a message this instance sent itself is dropped unread.
func TestClusterReceiveBatchesPerThread(t *testing.T) {
	c := NewCluster(&scriptedBus{}, NewHub(64), ClusterConfig{Instance: "me", Logger: slog.New(slog.DiscardHandler)})
	var published []string
	c.receiver.toHub = func(thread string, frames []Frame) {
		var seqs []int64
		for _, f := range frames {
			seqs = append(seqs, f.Seq)
		}
		published = append(published, fmt.Sprint(thread, seqs))
	}
	resync, err := json.Marshal(&busMessage{Origin: "other", Thread: "b", Resync: true})
	if err != nil {
		t.Fatal(err)
	}
	c.receiver.receive([][]byte{
		busPayload(t, "other", "a", toolFrame(t, 1)),
		busPayload(t, "other", "b", toolFrame(t, 1)),
		busPayload(t, "other", "a", toolFrame(t, 2), toolFrame(t, 3)),
		resync,
		busPayload(t, "other", "a", toolFrame(t, 4)),
	})
	if got := fmt.Sprint(published); got != "[a[1 2 3] b[1] a[4]]" {
		t.Errorf("published %s, want [a[1 2 3] b[1] a[4]]", got)
	}
	c.receiver.deliver(busPayload(t, "me", "a", toolFrame(t, 5)))
	c.receiver.mu.Lock()
	defer c.receiver.mu.Unlock()
	if len(c.receiver.queue) != 0 {
		t.Errorf("its own message was queued: %d", len(c.receiver.queue))
	}
}
