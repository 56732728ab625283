package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func reset(t *testing.T) {
	t.Cleanup(Reset)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		vars map[string]string
		want bool
	}{
		{Config{}, nil, false},
		{Config{Endpoint: "localhost:4318"}, nil, true},
		{Config{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, true},
		{Config{}, map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, true},
		{Config{}, map[string]string{"OTEL_SERVICE_NAME": "x"}, false},
	} {
		if got := c.cfg.Enabled(env(c.vars)); got != c.want {
			t.Errorf("%+v with %v: Enabled %v, want %v", c.cfg, c.vars, got, c.want)
		}
	}
}

func TestSetupRefusesABadEndpoint(t *testing.T) {
	reset(t)
	for _, e := range []string{"ftp://collector:21", "http://", "http://[::1"} {
		if _, err := Setup(context.Background(), Config{Endpoint: e}, env(nil)); err == nil {
			t.Errorf("endpoint %q accepted", e)
		}
	}
}

// An endpoint given as host:port is sent to over plain HTTP at OTLP's
// traces path, and shutdown flushes what is batched.
func TestSetupHostPortAndFlushOnShutdown(t *testing.T) {
	reset(t)
	var mu sync.Mutex
	var paths []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
	}))
	defer collector.Close()
	shutdown, err := Setup(context.Background(), Config{Endpoint: strings.TrimPrefix(collector.URL, "http://")}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, span := Start(context.Background(), "work")
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(paths) != 1 || paths[0] != "POST /v1/traces" {
		t.Fatalf("collector saw %v, want one POST /v1/traces", paths)
	}
}

// The client transport sends the caller's trace context; off, it sends
// none.
func TestClientSendsTraceparent(t *testing.T) {
	reset(t)
	var got []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("traceparent"))
	}))
	defer upstream.Close()
	send := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, upstream.URL+"/webhook/abc", nil)
		res, err := Client(nil).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	send(context.Background()) // off: the no-op propagator
	collector := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer collector.Close()
	shutdown, err := Setup(context.Background(), Config{Endpoint: collector.URL}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	ctx, span := Start(context.Background(), "run")
	send(ctx)
	span.End()
	if len(got) != 2 || got[0] != "" {
		t.Fatalf("traceparents %q", got)
	}
	if parts := strings.Split(got[1], "-"); len(parts) != 4 || parts[1] != span.SpanContext().TraceID().String() {
		t.Fatalf("traceparent %q, want trace %s", got[1], span.SpanContext().TraceID())
	}
	if tp := Traceparent(ctx); !strings.Contains(tp, span.SpanContext().SpanID().String()) {
		t.Fatalf("Traceparent %q", tp)
	}
	if sc := ParseTraceparent(Traceparent(ctx)); sc.SpanID() != span.SpanContext().SpanID() {
		t.Fatalf("ParseTraceparent gave %v", sc)
	}
}
