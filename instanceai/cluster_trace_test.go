package instanceai

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/threadline/threadline/internal/tracing"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// traceFrames returns frames of one stored text event, as the writer
// publishes them.
func traceFrames(t *testing.T) []Frame {
	t.Helper()
	ev := &Event{Type: TypeTextBlock, RunID: "run_1", AgentID: "orchestrator-run_1", UserID: "u", TS: 1, Payload: &Text{Text: "hi"}}
	data, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	return []Frame{EncodedFrame(1, ev, data)}
}

// With tracing on, the bus messages carry the publish's traceparent, and
// the receiving instance records a bus.receive span linked to it.
func TestClusterCarriesTheTraceContext(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(tracing.Reset)

	bus := &scriptedBus{}
	c, _ := runCluster(t, bus)
	ctx, span := otel.Tracer("test").Start(context.Background(), "writer.publish")
	c.PublishContext(ctx, "t1", traceFrames(t))
	span.End()
	waitFor(t, "the frames on the bus", func() bool { return len(bus.sent()) > 0 })
	m := bus.sent()[0]
	sc := span.SpanContext()
	want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
	if m.Trace != want {
		t.Fatalf("bus message traceparent %q, want %q", m.Trace, want)
	}

	// Another instance receives it.
	recv := NewCluster(&scriptedBus{}, NewHub(8), ClusterConfig{Instance: "other"})
	m.Origin = "me"
	payload, _ := json.Marshal(m)
	recv.receiver.receive([][]byte{payload})
	var got trace.Link
	n := 0
	for _, s := range rec.Ended() {
		if s.Name() == "bus.receive" {
			n++
			if len(s.Links()) != 1 || s.SpanKind() != trace.SpanKindConsumer {
				t.Fatalf("bus.receive links %v kind %v", s.Links(), s.SpanKind())
			}
			got = trace.Link{SpanContext: s.Links()[0].SpanContext}
		}
	}
	if n != 1 || got.SpanContext.TraceID() != sc.TraceID() || got.SpanContext.SpanID() != sc.SpanID() {
		t.Fatalf("%d bus.receive spans, link %v, want one linked to %v", n, got.SpanContext, sc)
	}

	// A message without the field (an older sender) is received with no
	// span, and an empty traceparent is not encoded at all.
	m.Trace = ""
	old, _ := json.Marshal(m)
	var asMap map[string]any
	_ = json.Unmarshal(old, &asMap)
	if _, ok := asMap["tp"]; ok {
		t.Fatal("an empty traceparent is encoded")
	}
	recv.receiver.receive([][]byte{old})
	n = 0
	for _, s := range rec.Ended() {
		if s.Name() == "bus.receive" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("a message without a traceparent made a span (%d in all)", n)
	}
}

// Off, nothing is added to the bus messages.
func TestClusterTraceOff(t *testing.T) {
	bus := &scriptedBus{}
	c, _ := runCluster(t, bus)
	ctx, span := otel.Tracer("test").Start(context.Background(), "writer.publish")
	c.PublishContext(ctx, "t1", traceFrames(t))
	span.End()
	waitFor(t, "the frames on the bus", func() bool { return len(bus.sent()) > 0 })
	if tp := bus.sent()[0].Trace; tp != "" {
		t.Fatalf("tracing off: bus message carries %q", tp)
	}
}
