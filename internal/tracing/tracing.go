// Package tracing sets up OpenTelemetry tracing for the process: an OTLP/HTTP
// exporter, the W3C trace-context propagator and the tracer the rest of the
// code takes spans from. It is off unless an endpoint is given; off, the
// global tracer provider stays OpenTelemetry's no-op one, nothing runs in
// the background, and the hot paths that ask Active build no span at all.
package tracing

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ServiceName is the service.name every span's resource carries.
const ServiceName = "threadline"

// Name is the instrumentation scope of Threadline's own spans.
const Name = "github.com/threadline/threadline"

// Config says where spans go and what resource they describe.
type Config struct {
	// Endpoint is the OTLP/HTTP collector: a URL (http://collector:4318)
	// or host:port, which is sent to over plain HTTP. Empty: tracing off,
	// unless the standard OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is set.
	Endpoint string
	// Version and Instance become service.version and
	// service.instance.id.
	Version  string
	Instance string
}

// Enabled says whether cfg turns tracing on, from the flag or from the
// standard OpenTelemetry variables the exporter reads itself.
func (c Config) Enabled(getenv func(string) string) bool {
	return c.Endpoint != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// Setup installs the global tracer provider and propagator when cfg turns
// tracing on, and returns the function that flushes the spans still
// batched and stops the exporter; call it at shutdown. Off, it installs
// nothing and the returned function does nothing.
func Setup(ctx context.Context, cfg Config, getenv func(string) string) (shutdown func(context.Context) error, err error) {
	if !cfg.Enabled(getenv) {
		return func(context.Context) error { return nil }, nil
	}
	var opts []otlptracehttp.Option
	if cfg.Endpoint != "" {
		endpoint := cfg.Endpoint
		if !strings.Contains(endpoint, "://") {
			endpoint = "http://" + endpoint
		}
		u, err := url.Parse(endpoint)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, errors.New("want an http(s) URL or host:port")
		}
		// WithEndpointURL takes the path as given; an endpoint named
		// by its base alone gets OTLP's traces path, as the standard
		// OTEL_EXPORTER_OTLP_ENDPOINT does.
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, err
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(ServiceName)}
	if cfg.Version != "" {
		attrs = append(attrs, semconv.ServiceVersion(cfg.Version))
	}
	if cfg.Instance != "" {
		attrs = append(attrs, semconv.ServiceInstanceID(cfg.Instance))
	}
	// The defaults (the SDK's own attributes, OTEL_RESOURCE_ATTRIBUTES)
	// first and ours merged over them: the service name, version and
	// instance are always Threadline's, while the other attributes an
	// operator sets (deployment.environment, say) are kept.
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, nil
}

// active says whether a recording tracer provider is installed: the hot
// paths that would build a span for every batch (the writer's) ask it
// first, so that an untraced server pays nothing for them, not even the
// no-op span's attributes.
var active atomic.Bool

// Install makes tp the global tracer provider, with the W3C trace-context
// propagator; a no-op provider turns tracing off again (see Reset). Setup
// calls it; tests install a recording provider through it.
func Install(tp trace.TracerProvider) {
	otel.SetTracerProvider(tp)
	if _, off := tp.(noop.TracerProvider); off {
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		active.Store(false)
		return
	}
	otel.SetTextMapPropagator(propagation.TraceContext{})
	active.Store(true)
}

// Reset turns tracing off: OpenTelemetry's no-op provider and an empty
// propagator, as a process starts.
func Reset() { Install(noop.NewTracerProvider()) }

// Active reports whether spans are recorded. Code on a hot path checks it
// before building a span; elsewhere Start's no-op span is cheap enough.
func Active() bool { return active.Load() }

// Tracer is the tracer of Threadline's spans, taken from the global
// provider at each call so that Setup, which runs after packages are
// initialised, is seen.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// Start begins a span named name under ctx's span.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
}

// Inject writes ctx's trace context into h as a traceparent header (a
// no-op while tracing is off: the default propagator carries nothing).
func Inject(ctx context.Context, h http.Header) {
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(h))
}

// Extract reads a trace context from h into ctx.
func Extract(ctx context.Context, h http.Header) context.Context {
	return otel.GetTextMapPropagator().Extract(ctx, propagation.HeaderCarrier(h))
}

// Transport wraps base so that each request it sends carries the
// caller's trace context and gets a client span: for the calls to model
// servers, n8n and upstream agents. A nil base is http.DefaultTransport.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	// The client span is named by the method and the host only: a path
	// may carry ids (an n8n webhook's) that would make names unbounded.
	return otelhttp.NewTransport(base, otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method + " " + r.URL.Host
	}))
}

// Handler wraps next in a server span per request, continuing the trace
// of an incoming traceparent. The span is named by the method until the
// router names it by the matched route's template (SetRoute).
func Handler(next http.Handler) http.Handler {
	return otelhttp.NewHandler(next, "http.server", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
		return r.Method
	}))
}

// SetRoute names ctx's server span by the route template that matched,
// never by the raw path, which holds thread ids.
func SetRoute(ctx context.Context, method, template string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + template)
	span.SetAttributes(semconv.HTTPRoute(template))
}

// Client returns a copy of c (a new client when nil) whose transport is
// wrapped by Transport; c itself is left as the caller made it.
func Client(c *http.Client) *http.Client {
	if c == nil {
		c = &http.Client{}
	}
	cp := *c
	cp.Transport = Transport(c.Transport)
	return &cp
}

// Traceparent returns ctx's trace context as a W3C traceparent value, ""
// when there is none or tracing is off.
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "" // tracing off: nothing to carry, and no map to make
	}
	c := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, c)
	return c["traceparent"]
}

// ParseTraceparent reads a traceparent value into a span context, invalid
// when it does not parse or tracing is off.
func ParseTraceparent(tp string) trace.SpanContext {
	ctx := otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	return trace.SpanContextFromContext(ctx)
}
