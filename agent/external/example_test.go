package external_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/storage/memory"
)

// A producer outside Threadline drives a run, as the publish API's
// handlers do for it: it starts the run, appends its events numbered from
// 0, retries an append whose answer it lost (nothing is taken twice), and
// finishes. The run's events are in the log as any agent's are.
func ExampleProducers() {
	ctx := context.Background()
	store := memory.New()
	producers := external.NewProducers(30 * time.Second)
	core := instanceai.NewCore(store, producers.Agent(time.Minute), instanceai.CoreConfig{Logger: slog.New(slog.DiscardHandler)})
	defer core.Shutdown(ctx)

	thread, err := core.OpenThread(ctx, "report-42", "worker")
	if err != nil {
		panic(err)
	}
	p, _, err := producers.Start("run_report", func(work instanceai.Agent) (*instanceai.Run, error) {
		return core.StartRun(instanceai.StartRequest{ThreadID: thread.ID, UserID: "worker", RunID: "run_report", Work: work, WorkName: "publish"})
	})
	if err != nil {
		panic(err)
	}
	text := func(s string) instanceai.Event {
		return instanceai.Event{Type: instanceai.TypeTextDelta, ResponseID: "summary", Payload: &instanceai.Text{Text: s}}
	}
	batch := []instanceai.Event{text("Revenue grew "), text("12% this quarter.")}
	for try := 1; try <= 2; try++ { // the second try repeats the first
		receipt, err := p.Append("report-worker", 0, 0, batch)
		if err != nil {
			panic(err)
		}
		fmt.Printf("try %d: stored %d, duplicates %d, next %d\n", try, receipt.Stored, receipt.Duplicates, receipt.NextSeq)
	}
	p.Finish(nil)
	run := p.Run()
	<-run.Done()
	if err := run.Sync(ctx); err != nil {
		panic(err)
	}
	events, err := core.RunEvents(ctx, thread.ID, run.ID)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		if t, ok := e.Event.Payload.(*instanceai.Text); ok {
			fmt.Printf("%s %q\n", e.Event.Type, t.Text)
		}
	}
	// Output:
	// try 1: stored 2, duplicates 0, next 2
	// try 2: stored 0, duplicates 2, next 2
	// text-block "Revenue grew 12% this quarter."
}
