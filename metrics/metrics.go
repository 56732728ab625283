// Package metrics exposes the server's Prometheus metrics: events by type,
// writer batches, time to first text, tool-call durations, the n8n bridge's
// JSON-capture counts, and live subscribers and runs. It implements the
// core's Observer (and the n8n agent's CaptureObserver) on its own registry,
// so that several servers in one process (tests) do not collide.
package metrics

import (
	"net/http"
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

	prunedRows    *prometheus.CounterVec
	prunedThreads prometheus.Counter
	pruneLast     prometheus.Gauge
	logEvents     prometheus.Gauge
	logBytes      prometheus.Gauge

	mu        sync.Mutex
	toolNames map[string]bool
}

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
	m.reg.MustRegister(m.events, m.batchRows, m.commitSeconds, m.firstText, m.toolSeconds, m.captured, m.malformed,
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
