package instanceai_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// seqOnlyLog is a log that keeps each thread's count of events and
// nothing else, so that what a test measures of the heap is the hub's and
// the writer's.
type seqOnlyLog struct {
	mu   sync.Mutex
	next map[string]int64
}

func (l *seqOnlyLog) Append(ctx context.Context, threadID string, events []instanceai.Event) (int64, error) {
	return l.AppendEncoded(ctx, threadID, events, make([][]byte, len(events)))
}

func (l *seqOnlyLog) AppendEncoded(_ context.Context, threadID string, events []instanceai.Event, _ [][]byte) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first := l.next[threadID] + 1
	l.next[threadID] += int64(len(events))
	return first, nil
}

func (l *seqOnlyLog) AppendFenced(ctx context.Context, threadID string, events []instanceai.Event, data [][]byte, _ []int64) (int64, error) {
	return l.AppendEncoded(ctx, threadID, events, data)
}

func (l *seqOnlyLog) ReadRowsAfter(context.Context, string, int64, int, int) ([]instanceai.StoredRow, error) {
	return nil, nil
}

func (l *seqOnlyLog) ReadPage(context.Context, string, instanceai.PageQuery) ([]instanceai.StoredRow, error) {
	return nil, nil
}

func (l *seqOnlyLog) ReadAfter(context.Context, string, int64, int) ([]instanceai.StoredEvent, error) {
	return nil, nil
}

func (l *seqOnlyLog) NextSeq(_ context.Context, threadID string) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next[threadID] + 1, nil
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Threads that ran once and went quiet leave nothing in the hub or the
// writer once they are idle: 10,000 one-run threads take their state with
// them, while a thread with a subscriber, or with a segment still open,
// keeps its own.
func TestIdleThreadsLeaveMemory(t *testing.T) {
	const threads = 10_000
	ctx := context.Background()
	log := &seqOnlyLog{next: map[string]int64{}}
	for i := range threads {
		log.next[fmt.Sprintf("thread-%05d", i)] = 0
	}
	hub := instanceai.NewHub(64)
	writer := instanceai.NewWriter(log, hub, instanceai.WriterConfig{IdleFlush: time.Hour, RetireAfter: 50 * time.Millisecond})
	t.Cleanup(func() { _ = writer.Close(ctx) })
	watched, _ := hub.Subscribe("thread-00000")
	defer watched.Close()
	// Each thread's drain is a goroutine, and the runtime keeps the
	// records of goroutines that ended for reuse: as many are made and
	// ended first, so that the baseline has them.
	var started, release sync.WaitGroup
	release.Add(1)
	for range threads {
		started.Add(1)
		go func() { started.Done(); release.Wait() }()
	}
	started.Wait()
	release.Done()
	base := liveHeap()

	for i := range threads {
		thread := fmt.Sprintf("thread-%05d", i)
		run := fmt.Sprintf("run-%05d", i)
		agent := instanceai.OrchestratorAgentID(run)
		events := []instanceai.Event{
			{Type: instanceai.TypeRunStart, RunID: run, AgentID: agent, Payload: &instanceai.RunStart{MessageID: "m"}},
			{Type: instanceai.TypeTextDelta, RunID: run, AgentID: agent, ResponseID: "x", Payload: &instanceai.Text{Text: "Hello, "}},
			{Type: instanceai.TypeTextDelta, RunID: run, AgentID: agent, ResponseID: "x", Payload: &instanceai.Text{Text: "world."}},
		}
		if i != 1 { // thread-00001's text stays open
			events = append(events, instanceai.Event{Type: instanceai.TypeRunFinish, RunID: run, AgentID: agent,
				Payload: &instanceai.RunFinish{Status: instanceai.RunCompleted}})
		}
		for _, ev := range events {
			if err := writer.Enqueue(thread, ev); err != nil {
				t.Fatal(err)
			}
		}
		if err := writer.Sync(ctx, thread); err != nil {
			t.Fatal(err)
		}
	}
	busy := liveHeap()
	if hub.Topics() != threads {
		t.Fatalf("the hub holds %d threads, want %d", hub.Topics(), threads)
	}
	if n := hub.Evict(time.Hour); n != 0 {
		t.Fatalf("Evict(1h) dropped %d threads that published just now", n)
	}
	if n := hub.Evict(0); n != threads-2 {
		t.Fatalf("Evict dropped %d threads, want all but the watched one and the open one (%d)", n, threads-2)
	}
	for deadline := time.Now().Add(10 * time.Second); instanceai.Drains(writer) > 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the writer still holds %d threads", instanceai.Drains(writer))
		}
	}
	after := liveHeap()
	grown := int64(busy) - int64(base)
	left := int64(after) - int64(base)
	t.Logf("heap: %d B before, %+d B per thread while they were in memory, %+d B per thread after", base, grown/threads, left/threads)
	// The threads' state is about 2 KB each. What stays is the runtime's
	// records of the drains' goroutines that it keeps for reuse, beyond
	// those the baseline has (a few dozen bytes a thread).
	if grown < threads*500 || left > threads*100 {
		t.Fatalf("heap grew by %d B for %d threads and kept %d B after they went idle", grown, threads, left)
	}

	// The kept threads work on: the watched one is sent its next frame,
	// an evicted one starts afresh from its next.
	fr, err := instanceai.NewFrame(int64(5), &instanceai.Event{Type: instanceai.TypeStatus, RunID: "run-00000",
		AgentID: instanceai.OrchestratorAgentID("run-00000"), Payload: &instanceai.Status{}})
	if err != nil {
		t.Fatal(err)
	}
	hub.Publish("thread-00000", []instanceai.Frame{fr})
	if got, err := watched.Next(ctx); err != nil || len(got) == 0 || got[len(got)-1].Seq != 5 {
		t.Fatalf("the watched thread's subscriber got %+v, %v", got, err)
	}
	hub.Publish("thread-09999", []instanceai.Frame{fr})
	if hub.Committed("thread-09999") != 5 || hub.Topics() != 3 {
		t.Fatalf("a frame to an evicted thread: committed %d, %d threads held", hub.Committed("thread-09999"), hub.Topics())
	}
}
