package instanceai_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// One test per guarantee that Run.Emit documents.

func TestEmitStampsTheRunAndValidatesFirst(t *testing.T) {
	results := make(chan error, 2)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		// An invalid event is refused and queues nothing.
		results <- run.Emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{ToolName: "no id"}})
		// RunID is always the run's; the rest is filled in when unset.
		results <- run.Emit(instanceai.Event{Type: instanceai.TypeToolCall, RunID: "another-run",
			Payload: &instanceai.ToolCall{ToolCallID: "c1", ToolName: "tool", Args: []byte(`{}`)}})
		return nil
	})
	l := newLifecycle(t, agent, "t")
	before := time.Now().UnixMilli()
	run := l.start("t", "go")
	l.settle(run)
	var ve *instanceai.ValidationError
	if err := <-results; !errors.As(err, &ve) {
		t.Fatalf("invalid event: %v, want a ValidationError", err)
	}
	if err := <-results; err != nil {
		t.Fatal(err)
	}
	l.expectLog("t", run.ID, "run-start @orch", "tool-call:c1 @orch", "tool-error:c1="+runEnded+" @orch", "run-finish:completed: @orch")
	call := l.rows("t")[1].Event
	if call.AgentID != run.AgentID || call.UserID != "u" || call.TS < before {
		t.Fatalf("stamped event = %+v", call)
	}
	// After the finish, validation still comes first.
	if err := run.Emit(instanceai.Event{Type: instanceai.TypeToolCall, Payload: &instanceai.ToolCall{}}); !errors.As(err, &ve) {
		t.Fatalf("invalid event after the finish: %v, want a ValidationError", err)
	}
	if err := run.Emit(toolCall("c2")); !errors.Is(err, instanceai.ErrRunFinished) {
		t.Fatalf("emit after the finish: %v, want ErrRunFinished", err)
	}
}

func TestEmitFromSeveralGoroutinesKeepsEachOnesOrder(t *testing.T) {
	const goroutines, each = 8, 50
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		var wg sync.WaitGroup
		errs := make(chan error, goroutines)
		for g := range goroutines {
			wg.Go(func() {
				for i := range each {
					if err := run.Emit(mark(fmt.Sprintf("g%d-%d", g, i))); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		return <-errs
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	l.settle(run)
	rows := l.rows("t")
	if len(rows) != goroutines*each+2 || rows[0].Event.Type != instanceai.TypeRunStart ||
		rows[len(rows)-1].Event.Payload.(*instanceai.RunFinish).Status != instanceai.RunCompleted {
		t.Fatalf("stored %d events; want run-start, %d marks, run-finish{completed}", len(rows), goroutines*each)
	}
	next := make([]int, goroutines)
	for _, r := range rows[1 : len(rows)-1] {
		var g, i int
		if _, err := fmt.Sscanf(r.Event.Payload.(*instanceai.TasksUpdate).Tasks.Tasks[0].ID, "g%d-%d", &g, &i); err != nil {
			t.Fatal(err)
		}
		if i != next[g] {
			t.Fatalf("goroutine %d's call %d stored where %d was due", g, i, next[g])
		}
		next[g]++
	}
}

// blockedLog is a log whose appends wait until release is closed.
type blockedLog struct {
	instanceai.EventLog
	release chan struct{}
}

// AppendEncoded is the writer's way in.
func (b *blockedLog) AppendEncoded(ctx context.Context, thread string, events []instanceai.Event, data [][]byte) (int64, error) {
	<-b.release
	return b.EventLog.AppendEncoded(ctx, thread, events, data)
}

// AppendFenced waits as AppendEncoded does.
func (b *blockedLog) AppendFenced(ctx context.Context, thread string, events []instanceai.Event, data [][]byte, fences []int64) (int64, error) {
	<-b.release
	return b.EventLog.AppendFenced(ctx, thread, events, data, fences)
}

func TestEmitDoesNotWaitForStorage(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	if _, _, err := store.EnsureThread(ctx, instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
		t.Fatal(err)
	}
	log := &blockedLog{EventLog: store, release: make(chan struct{})}
	writer := instanceai.NewWriter(log, instanceai.NewHub(1024), instanceai.WriterConfig{IdleFlush: time.Hour})
	emitted := make(chan error, 1)
	runs := instanceai.NewRuns(writer, instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		for i := range 100 {
			if err := run.Emit(mark("c" + strconv.Itoa(i))); err != nil {
				emitted <- err
				return err
			}
		}
		emitted <- nil
		return nil
	}), instanceai.RunsConfig{Confirmations: store, Claims: store, Index: store})
	run, err := runs.Start(instanceai.StartRequest{ThreadID: "t", UserID: "u"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-emitted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitFor):
		t.Fatal("Emit waited for the store")
	}
	<-run.Done()
	if rows, _ := store.ReadAfter(ctx, "t", 0, 0); len(rows) != 0 {
		t.Fatalf("%d rows stored while the store was blocked", len(rows))
	}
	close(log.release)
	sctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	if err := run.Sync(sctx); err != nil {
		t.Fatal(err)
	}
	if rows, _ := store.ReadAfter(ctx, "t", 0, 0); len(rows) != 102 {
		t.Fatalf("stored %d rows after the store came back, want 102", len(rows))
	}
	if err := writer.Close(sctx); err != nil {
		t.Fatal(err)
	}
}

func TestEmitWhileACancelIsUnderWayReturnsItsCause(t *testing.T) {
	stopped := make(chan error, 1)
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-ctx.Done()
		stopped <- run.Emit(toolCall("late"))
		return ctx.Err()
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	l.core.Runs().Cancel("t", instanceai.ReasonTimeout)
	// Either the agent's emit met the cancel's cause, or the cancel had
	// already queued the finish.
	err := <-stopped
	if !errors.Is(err, instanceai.ErrRunFinished) && (err == nil || !strings.Contains(err.Error(), "run cancelled: timeout")) {
		t.Fatalf("emit during a cancel: %v", err)
	}
	l.settle(run)
	l.expectLog("t", run.ID, "run-start @orch", "run-finish:cancelled:timeout @orch")
}

func TestEmitAfterTheWriterClosedFails(t *testing.T) {
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		<-ctx.Done()
		return ctx.Err()
	})
	l := newLifecycle(t, agent, "t")
	run := l.start("t", "go")
	if err := l.core.Writer().Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := run.Emit(toolCall("c1")); !errors.Is(err, instanceai.ErrWriterClosed) {
		t.Fatalf("emit after the writer closed: %v, want ErrWriterClosed", err)
	}
	l.expectLog("t", run.ID, "run-start @orch")
}
