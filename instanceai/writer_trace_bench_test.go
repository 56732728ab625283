package instanceai_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
	"github.com/threadline/threadline/storage/memory"
)

// BenchmarkWriterBatchTracing measures what the writer's spans cost one
// batch (one event appended to the memory store and published, then
// synced): with tracing off, as a server runs without --otlp-endpoint,
// and on, with a provider that samples every span and exports nowhere.
// "off" is the path every untraced server takes, and should cost no
// allocation for the spans it does not record.
func BenchmarkWriterBatchTracing(b *testing.B) {
	for _, mode := range []string{"off", "on"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "on" {
				tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample())))
			}
			b.Cleanup(tracing.Reset)
			store := memory.New()
			if _, _, err := store.EnsureThread(context.Background(), instanceai.Thread{ID: "t", OwnerID: "u"}); err != nil {
				b.Fatal(err)
			}
			w := instanceai.NewWriter(store, instanceai.NewHub(1<<16), instanceai.WriterConfig{IdleFlush: time.Hour})
			b.Cleanup(func() { _ = w.Close(context.Background()) })
			ctx := context.Background()
			if err := w.Enqueue("t", ev(instanceai.TypeRunStart, "r", "a", &instanceai.RunStart{MessageID: "m"})); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if err := w.Enqueue("t", call("r", "a", fmt.Sprint("c", i))); err != nil {
					b.Fatal(err)
				}
				if err := w.Sync(ctx, "t"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
