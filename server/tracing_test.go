package server_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/threadline/threadline/internal/tracing"
	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

// otlpReceiver is an OTLP/HTTP collector: it decodes the protobuf export
// requests posted to /v1/traces and keeps their spans.
type otlpReceiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource []*commonpb.KeyValue
	posts    int
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want POST /v1/traces in protobuf", http.StatusBadRequest)
		return
	}
	raw, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(raw, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.posts++
	for _, rs := range req.ResourceSpans {
		o.resource = rs.GetResource().GetAttributes()
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// named returns the spans received whose name is name.
func (o *otlpReceiver) named(name string) []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range o.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (o *otlpReceiver) count() (posts, spans int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.posts, len(o.spans)
}

func attr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			if v, ok := kv.Value.Value.(*commonpb.AnyValue_IntValue); ok {
				return strconv.FormatInt(v.IntValue, 10)
			}
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// resetTracing puts OpenTelemetry's globals back to their no-op defaults,
// so that the tests after this one trace nothing.
func resetTracing(t *testing.T) {
	t.Cleanup(tracing.Reset)
}

// tracedLLM is fakeLLM that also records the traceparent of each chat
// completion request.
type tracedLLM struct {
	fakeLLM
	mu           sync.Mutex
	traceparents []string
}

func (f *tracedLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/chat/completions" {
		f.mu.Lock()
		f.traceparents = append(f.traceparents, r.Header.Get("traceparent"))
		f.mu.Unlock()
	}
	f.fakeLLM.ServeHTTP(w, r)
}

func startTracedOpenAI(t *testing.T, tracingOn bool) (*servertest.Server, *tracedLLM) {
	t.Helper()
	llm := &tracedLLM{}
	store := servertest.OpenStore(t, "memory")
	agent := lookupAgent(t, llm, store)
	return servertest.Start(t, store, servertest.Options{Agent: agent, Config: server.Config{Tracing: tracingOn}}), llm
}

// chatWithTraceparent starts a run on thread through the native API as a
// traced client would, and waits for the run's end.
func chatWithTraceparent(t *testing.T, s *servertest.Server, thread, traceparent string) {
	t.Helper()
	s.EnsureThread(thread)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/instance-ai/chat/"+thread, strings.NewReader(`{"message":"What is the answer?"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", traceparent)
	res, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("chat: %d", res.StatusCode)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.App.Active(thread) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the run did not finish")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
)

func TestTracingSpansAndPropagation(t *testing.T) {
	resetTracing(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	noEnv := func(string) string { return "" }
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Endpoint: collector.URL, Version: "v-test", Instance: "inst-1"}, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())

	s, llm := startTracedOpenAI(t, true)
	llm.script(toolStep(), answerStep("The answer is 42.", 20, 7))
	chatWithTraceparent(t, s, "tr", "00-"+clientTrace+"-"+clientSpan+"-01")

	// The run span ends right after its run-finish is queued: flush until
	// it has arrived.
	tp := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	deadline := time.Now().Add(10 * time.Second)
	for len(recv.named("run")) == 0 || len(recv.named("writer.append")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no run span exported")
		}
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	hexID := func(b []byte) string { return hex.EncodeToString(b) }
	// The server span of the chat request: named by its route template,
	// in the client's trace, under the client's span.
	var httpSpan *tracepb.Span
	for _, sp := range recv.named("POST /instance-ai/chat/{threadId}") {
		httpSpan = sp
	}
	if httpSpan == nil {
		var names []string
		for _, sp := range recv.spans {
			names = append(names, sp.Name)
		}
		t.Fatalf("no server span for the chat route; spans: %v", names)
	}
	if hexID(httpSpan.TraceId) != clientTrace || hexID(httpSpan.ParentSpanId) != clientSpan || httpSpan.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Fatalf("server span trace %s parent %s kind %v", hexID(httpSpan.TraceId), hexID(httpSpan.ParentSpanId), httpSpan.Kind)
	}
	if got := attr(httpSpan, "http.route"); got != "/instance-ai/chat/{threadId}" {
		t.Fatalf("http.route %q", got)
	}

	// The run span, under the request's.
	runs := recv.named("run")
	if len(runs) != 1 {
		t.Fatalf("%d run spans", len(runs))
	}
	run := runs[0]
	if hexID(run.TraceId) != clientTrace || hexID(run.ParentSpanId) != hexID(httpSpan.SpanId) {
		t.Fatalf("run span trace %s parent %s, want under %s", hexID(run.TraceId), hexID(run.ParentSpanId), hexID(httpSpan.SpanId))
	}
	if attr(run, "thread.id") != "tr" || !strings.HasPrefix(attr(run, "run.id"), "run_") || attr(run, "agent") != "default" || attr(run, "run.status") != "completed" {
		t.Fatalf("run span attributes %v", run.Attributes)
	}

	// Two model calls (the tool step and the answer) and the tool call,
	// under the run.
	calls := recv.named("model.call")
	if len(calls) != 2 {
		t.Fatalf("%d model.call spans, want 2", len(calls))
	}
	for i, c := range calls {
		if hexID(c.TraceId) != clientTrace || hexID(c.ParentSpanId) != hexID(run.SpanId) {
			t.Fatalf("model.call %d: trace %s parent %s, want under the run", i, hexID(c.TraceId), hexID(c.ParentSpanId))
		}
		if attr(c, "gen_ai.request.model") != "test-model" {
			t.Fatalf("model.call %d attributes %v", i, c.Attributes)
		}
	}
	toolSpans := recv.named("tool.call")
	if len(toolSpans) != 1 || hexID(toolSpans[0].ParentSpanId) != hexID(run.SpanId) || attr(toolSpans[0], "tool.name") != "lookup" {
		t.Fatalf("tool.call spans %v", toolSpans)
	}

	// The writer's appends of the run's events are under the run, and
	// name the thread. (Events of no run, the chat's title, are appended
	// under a root span of their own.)
	var appends int
	for _, a := range recv.named("writer.append") {
		if attr(a, "thread.id") != "tr" || attr(a, "batch.size") == "" {
			t.Fatalf("writer.append attributes %v", a.Attributes)
		}
		if hexID(a.TraceId) != clientTrace {
			continue
		}
		appends++
		if hexID(a.ParentSpanId) != hexID(run.SpanId) {
			t.Fatalf("writer.append parent %s, want the run %s", hexID(a.ParentSpanId), hexID(run.SpanId))
		}
	}
	if appends == 0 {
		t.Fatal("no writer.append span in the run's trace")
	}

	// The model server got the trace on each request, its parent a client
	// span of this trace under a model call.
	llm.mu.Lock()
	parents := append([]string(nil), llm.traceparents...)
	llm.mu.Unlock()
	if len(parents) != 2 {
		t.Fatalf("the model server saw %d requests", len(parents))
	}
	modelCalls := map[string]bool{hexID(calls[0].SpanId): true, hexID(calls[1].SpanId): true}
	clientSpans := map[string]string{} // span id -> parent
	for _, sp := range recv.spans {
		if sp.Kind == tracepb.Span_SPAN_KIND_CLIENT {
			clientSpans[hexID(sp.SpanId)] = hexID(sp.ParentSpanId)
		}
	}
	for _, tp := range parents {
		parts := strings.Split(tp, "-")
		if len(parts) != 4 || parts[1] != clientTrace {
			t.Fatalf("model request traceparent %q, want trace %s", tp, clientTrace)
		}
		if !modelCalls[clientSpans[parts[2]]] {
			t.Fatalf("model request traceparent %q: its span is not a client span under a model call", tp)
		}
	}

	// The native event stream, which takes its connection over, works
	// through the traced handler: it replays the run to its run-finish.
	run0 := attr(run, "run.id")
	s.Connect("tr", "", false).Until(wait, servertest.IsRunFinish(run0))

	// The resource names the service, its version and instance.
	recv.mu.Lock()
	res := map[string]string{}
	for _, kv := range recv.resource {
		res[kv.Key] = kv.Value.GetStringValue()
	}
	recv.mu.Unlock()
	if res["service.name"] != "threadline" || res["service.version"] != "v-test" || res["service.instance.id"] != "inst-1" {
		t.Fatalf("resource %v", res)
	}

	// No message text in any attribute.
	for _, sp := range recv.spans {
		for _, kv := range sp.Attributes {
			if v := kv.Value.GetStringValue(); strings.Contains(v, "answer") {
				t.Fatalf("span %s attribute %s carries message text: %q", sp.Name, kv.Key, v)
			}
		}
	}
}

func TestTracingOffExportsNothing(t *testing.T) {
	resetTracing(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	// Neither the flag nor the standard variables: tracing stays off,
	// even with a collector listening.
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Version: "v-test", Instance: "inst-1"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	s, llm := startTracedOpenAI(t, false)
	llm.script(answerStep("Hello there.", 5, 2))
	chatWithTraceparent(t, s, "off", "00-"+clientTrace+"-"+clientSpan+"-01")
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); ok {
		t.Fatal("tracing off installed an SDK tracer provider")
	}
	if posts, spans := recv.count(); posts != 0 || spans != 0 {
		t.Fatalf("tracing off: the collector got %d posts, %d spans", posts, spans)
	}
	// Nor is the trace passed on: the model server sees no traceparent.
	llm.mu.Lock()
	defer llm.mu.Unlock()
	if len(llm.traceparents) != 1 || llm.traceparents[0] != "" {
		t.Fatalf("tracing off: model requests carried %q", llm.traceparents)
	}
}

// An AG-UI run streams through the traced handler, and its run span is a
// child of the /run-agent request's span.
func TestTracingAGUIRun(t *testing.T) {
	resetTracing(t)
	recv := &otlpReceiver{}
	collector := httptest.NewServer(recv)
	defer collector.Close()
	shutdown, err := tracing.Setup(context.Background(), tracing.Config{Endpoint: collector.URL}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	s, llm := startTracedOpenAI(t, true)
	llm.script(answerStep("Hello there.", 5, 2))
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/run-agent", strings.NewReader(servertest.RunAgentInput("ag", "r1", "Hi", nil)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	res, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || !strings.Contains(string(body), "RUN_FINISHED") {
		t.Fatalf("run-agent: %d %v %s", res.StatusCode, err, body)
	}
	tp := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	deadline := time.Now().Add(10 * time.Second)
	for len(recv.named("run")) == 0 || len(recv.named("POST /run-agent")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no run or /run-agent span exported")
		}
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	httpSpan := recv.named("POST /run-agent")[0]
	run := recv.named("run")[0]
	if hex.EncodeToString(httpSpan.TraceId) != clientTrace || hex.EncodeToString(httpSpan.ParentSpanId) != clientSpan {
		t.Fatalf("/run-agent span not in the client's trace under its span")
	}
	if hex.EncodeToString(run.ParentSpanId) != hex.EncodeToString(httpSpan.SpanId) || attr(run, "thread.id") != "ag" {
		t.Fatalf("run span %v not under the /run-agent span", run.Attributes)
	}
}
