package instanceai_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A Core on an in-memory store with an agent of a few lines: a chat starts
// a run (and titles the untitled thread after its message), the agent's
// deltas are coalesced into one text block before they are stored, and the
// run's stored events are read back through the Core, as a surface reads
// them.
func ExampleCore() {
	ctx := context.Background()
	agent := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		for _, word := range []string{"Hello", ", ", "world."} {
			ev := instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "answer", Payload: &instanceai.Text{Text: word}}
			if err := run.Emit(ev); err != nil {
				return err
			}
		}
		return nil // the run finishes completed
	})
	core := instanceai.NewCore(memory.New(), agent, instanceai.CoreConfig{Logger: slog.New(slog.DiscardHandler)})
	defer core.Shutdown(ctx)

	thread, err := core.OpenThread(ctx, "thread-1", "alice")
	if err != nil {
		panic(err)
	}
	run, err := core.Chat(ctx, thread, instanceai.StartRequest{ThreadID: thread.ID, UserID: "alice", Message: "Say hello"})
	if err != nil {
		panic(err)
	}
	<-run.Done()
	if err := core.Sync(ctx, thread.ID); err != nil {
		panic(err)
	}
	events, err := core.RunEvents(ctx, thread.ID, run.ID)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		switch p := e.Event.Payload.(type) {
		case *instanceai.Text:
			fmt.Printf("%s %q\n", e.Event.Type, p.Text)
		case *instanceai.RunFinish:
			fmt.Println(e.Event.Type, p.Status)
		default:
			fmt.Println(e.Event.Type)
		}
	}
	// Output:
	// run-start
	// thread-title-updated
	// text-block "Hello, world."
	// run-finish completed
}
