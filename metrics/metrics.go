// Package metrics exposes the server's Prometheus metrics: events by type,
// writer batches, time to first text, tool-call durations, the n8n bridge's
// JSON-capture counts, live subscribers and runs, runs started and
// finished, the bus's lag, and the HTTP side (requests by route and
// status, streams and connections open, replayed events). It implements
// the core's Observer (with RunObserver and BusObserver), the n8n agent's
// CaptureObserver and httpmetrics' Recorder on its own registry, so that
// several servers in one process (tests) do not collide.
package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/threadline/threadline/instanceai"
)

// maxToolLabels bounds the distinct tool names used as label values: a
// model can invent tool names, and each new label value is a new series.
const maxToolLabels = 64

// otherTool is the label of tool names past the bound.
const otherTool = "other"

// Metrics holds the collectors.
type Metrics struct {
	reg *prometheus.Registry

	events *prometheus.CounterVec
	// byType holds the events counter of every known type, made once: the
	// writer counts each event it publishes, and a map read is cheaper
	// than the vector's label hashing. Read-only after New.
	byType        map[instanceai.EventType]prometheus.Counter
	batchRows     prometheus.Histogram
	commitSeconds prometheus.Histogram
	firstText     prometheus.Histogram
	toolSeconds   *prometheus.HistogramVec
	captured      *prometheus.CounterVec
	malformed     *prometheus.CounterVec

	requests      *prometheus.CounterVec
	requestTime   *prometheus.HistogramVec
	streamsOpen   *prometheus.GaugeVec
	streamTime    *prometheus.HistogramVec
	connsOpen     prometheus.Gauge
	runsStarted   *prometheus.CounterVec
	runsFinished  *prometheus.CounterVec
	busLag        prometheus.Histogram
	refused       *prometheus.CounterVec
	replayed      *prometheus.CounterVec
	defaultAgent  string
	prunedRows    *prometheus.CounterVec
	prunedThreads prometheus.Counter
	pruneLast     prometheus.Gauge
	logEvents     prometheus.Gauge
	logBytes      prometheus.Gauge

	mu        sync.Mutex
	toolNames map[string]bool
}

// Surfaces are the surface label's values: the APIs a client streams or
// reads from, and "other" for the rest (health, metrics, the OpenAPI
// document, unmatched requests). Their series exist from the start, so
// that an alert on one of them sees 0 rather than nothing.
var Surfaces = []string{"native", "agui", "copilotkit", "builder", "publish", "console", "other"}

// New returns metrics on a fresh registry with the Go runtime and process
// collectors.
func New() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), toolNames: map[string]bool{}}
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_events_published_total",
		Help: "Events handed to live subscribers, stored or ephemeral, by event type.",
	}, []string{"type"})
	m.batchRows = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "threadline_writer_batch_rows",
		Help:    "Rows per append to the event log (the writer coalesces deltas and batches what is queued).",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
	})
	m.commitSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "threadline_writer_commit_seconds",
		Help:    "Time to append one batch to the event log, retries included.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12),
	})
	m.firstText = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "threadline_run_first_text_seconds",
		Help:    "Time from a run's run-start to its first text-delta.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
	})
	m.toolSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "threadline_tool_call_seconds",
		Help:    "Tool-call duration from tool-call to its result, error or cancellation, by tool and outcome.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10),
	}, []string{"tool", "outcome"})
	m.captured = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_capture_objects_total",
		Help: "JSON objects the n8n bridge's capture layer recognised in agent text, by kind.",
	}, []string{"kind"})
	m.malformed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_capture_malformed_total",
		Help: "Captured objects released as plain text, by reason (invalid, other_shape, oversize, unclosed).",
	}, []string{"reason"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_http_requests_total",
		Help: "HTTP requests by route template (\"unmatched\" for none), method and status code; streams included.",
	}, []string{"route", "method", "code"})
	m.requestTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "threadline_http_request_duration_seconds",
		Help:    "Time to serve an HTTP request that is not a stream, by route template and method (streams: threadline_stream_duration_seconds).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"route", "method"})
	m.streamsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "threadline_streams_open",
		Help: "Event streams open (SSE or AG-UI protobuf), by surface.",
	}, []string{"surface"})
	m.streamTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "threadline_stream_duration_seconds",
		Help:    "How long event streams lasted, by surface: as long as their clients watched.",
		Buckets: []float64{0.1, 1, 5, 15, 60, 300, 900, 1800, 3600, 3 * 3600, 12 * 3600},
	}, []string{"surface"})
	m.connsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "threadline_http_connections_open",
		Help: "TCP connections the HTTP server holds (streams that took theirs over included; refused ones not).",
	})
	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_runs_started_total",
		Help: "Runs started on this instance, by agent (named upstream, builder, publish or the default agent's name).",
	}, []string{"agent"})
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_runs_finished_total",
		Help: "Runs finished on this instance, by agent and run-finish status (completed, cancelled, error).",
	}, []string{"agent", "status"})
	m.busLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "threadline_bus_lag_seconds",
		Help:    "Time from another instance's writer handing frames to the bus to this instance's hub taking them (host clock offsets included).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
	})
	m.replayed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_replay_events_total",
		Help: "Stored events sent to clients from the log rather than live (replays after a cursor, catch-ups, run histories), by surface.",
	}, []string{"surface"})
	for _, sf := range Surfaces {
		m.streamsOpen.WithLabelValues(sf)
		m.replayed.WithLabelValues(sf)
	}
	m.prunedRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_retention_deleted_rows_total",
		Help: "Rows the retention policy deleted, by table (threads, events, messages, confirmations, segment_checkpoints).",
	}, []string{"table"})
	m.prunedThreads = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "threadline_retention_threads_pruned_total",
		Help: "Idle threads the retention policy deleted.",
	})
	m.pruneLast = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "threadline_retention_last_run_timestamp_seconds",
		Help: "When this instance last finished a retention pass (Unix time; 0 = never).",
	})
	m.logEvents = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "threadline_event_log_events",
		Help: "Events the event log holds, as of this instance's last retention pass.",
	})
	m.logBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "threadline_event_log_bytes",
		Help: "Bytes the event log takes, as of this instance's last retention pass (PostgreSQL: the events table with its indexes; SQLite: the database file; memory: the events' JSON).",
	})
	m.byType = make(map[instanceai.EventType]prometheus.Counter, len(instanceai.AllTypes))
	for _, t := range instanceai.AllTypes {
		m.byType[t] = m.events.WithLabelValues(string(t))
	}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "threadline_events_refused_total",
		Help: "Events a run's door refused, by reason: the log's rule they broke or the size bound they crossed.",
	}, []string{"reason"})
	m.reg.MustRegister(m.events, m.batchRows, m.commitSeconds, m.firstText, m.toolSeconds, m.captured, m.malformed, m.refused,
		m.requests, m.requestTime, m.streamsOpen, m.streamTime, m.connsOpen, m.runsStarted, m.runsFinished, m.busLag, m.replayed,
		m.prunedRows, m.prunedThreads, m.pruneLast, m.logEvents, m.logBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Gauges registers gauges read at scrape time: live SSE subscribers and
// active runs.
func (m *Metrics) Gauges(subscribers, activeRuns func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "threadline_subscribers",
			Help: "Live event-stream subscribers (native and AG-UI connections in their live phase).",
		}, func() float64 { return float64(subscribers()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "threadline_active_runs",
			Help: "Runs in progress.",
		}, func() float64 { return float64(activeRuns()) }),
	)
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry the collectors are on.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// EventPublished implements instanceai.Observer.
func (m *Metrics) EventPublished(t instanceai.EventType) {
	if c, ok := m.byType[t]; ok {
		c.Inc()
		return
	}
	m.events.WithLabelValues(string(t)).Inc()
}

// BatchCommitted implements instanceai.Observer.
func (m *Metrics) BatchCommitted(rows int, took time.Duration) {
	m.batchRows.Observe(float64(rows))
	m.commitSeconds.Observe(took.Seconds())
}

// FirstText implements instanceai.Observer.
func (m *Metrics) FirstText(after time.Duration) {
	m.firstText.Observe(after.Seconds())
}

// ToolCallFinished implements instanceai.Observer.
func (m *Metrics) ToolCallFinished(tool, outcome string, took time.Duration) {
	m.toolSeconds.WithLabelValues(m.toolLabel(tool), outcome).Observe(took.Seconds())
}

func (m *Metrics) toolLabel(tool string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.toolNames[tool] {
		return tool
	}
	if len(m.toolNames) >= maxToolLabels {
		return otherTool
	}
	m.toolNames[tool] = true
	return tool
}

// CaptureObject counts a recognised object (the n8n agent's
// CaptureObserver).
func (m *Metrics) CaptureObject(kind string) { m.captured.WithLabelValues(kind).Inc() }

// CaptureMalformed counts an object released as text.
func (m *Metrics) CaptureMalformed(reason string) { m.malformed.WithLabelValues(reason).Inc() }

// DefaultAgent names the agent that runs without a named upstream in the
// runs' agent label (else "default"). Call it before the first run.
func (m *Metrics) DefaultAgent(name string) { m.defaultAgent = name }

func (m *Metrics) agentLabel(agent string) string {
	switch {
	case agent != "":
		return agent
	case m.defaultAgent != "":
		return m.defaultAgent
	}
	return "default"
}

// RunStarted implements instanceai.RunObserver.
func (m *Metrics) RunStarted(agent string) { m.runsStarted.WithLabelValues(m.agentLabel(agent)).Inc() }

// RunFinished implements instanceai.RunObserver.
func (m *Metrics) RunFinished(agent, status string) {
	m.runsFinished.WithLabelValues(m.agentLabel(agent), status).Inc()
}

// EventRefused implements instanceai.RefusalObserver. The reasons are the
// core's fixed names, so the label's values are bounded.
func (m *Metrics) EventRefused(reason string) { m.refused.WithLabelValues(reason).Inc() }

// BusLag implements instanceai.BusObserver.
func (m *Metrics) BusLag(took time.Duration) { m.busLag.Observe(took.Seconds()) }

// Request implements httpmetrics.Recorder.
func (m *Metrics) Request(route, method string, code int, took time.Duration, stream bool) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
	if !stream {
		m.requestTime.WithLabelValues(route, method).Observe(took.Seconds())
	}
}

// StreamOpened implements httpmetrics.Recorder.
func (m *Metrics) StreamOpened(surface string) func(time.Duration) {
	g := m.streamsOpen.WithLabelValues(surface)
	g.Inc()
	return func(lasted time.Duration) {
		g.Dec()
		m.streamTime.WithLabelValues(surface).Observe(lasted.Seconds())
	}
}

// Replayed implements httpmetrics.Recorder.
func (m *Metrics) Replayed(surface string, events int) {
	m.replayed.WithLabelValues(surface).Add(float64(events))
}

// ConnOpened implements httpmetrics.Recorder.
func (m *Metrics) ConnOpened() func() {
	m.connsOpen.Inc()
	return m.connsOpen.Dec
}

var (
	_ instanceai.Observer    = (*Metrics)(nil)
	_ instanceai.RunObserver = (*Metrics)(nil)
	_ instanceai.BusObserver = (*Metrics)(nil)
)

// RetentionDeleted counts the rows a retention transaction deleted, by
// table (retention.Observer).
func (m *Metrics) RetentionDeleted(rows map[string]int64) {
	for table, n := range rows {
		if n > 0 {
			m.prunedRows.WithLabelValues(table).Add(float64(n))
		}
	}
	m.prunedThreads.Add(float64(rows["threads"]))
}

// RetentionPass records a finished retention pass and the log's size
// after it (retention.Observer).
func (m *Metrics) RetentionPass(at time.Time, events, bytes int64) {
	m.pruneLast.Set(float64(at.UnixNano()) / 1e9)
	m.logEvents.Set(float64(events))
	m.logBytes.Set(float64(bytes))
}

var _ instanceai.Observer = (*Metrics)(nil)
