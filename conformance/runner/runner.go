// Package runner drives an agent server over HTTP through the conformance
// scenarios and checks every stream it records: AG-UI runs at /run-agent,
// native Instance AI event streams with their replays, and the SSE framing
// of both. It works against any server that speaks the protocols; against
// a Threadline server running the reference agent (or any server whose
// /status lists an agent named "script") it also plays the reference
// scenarios, which exercise every event type.
package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/threadline/threadline/conformance"
	"github.com/threadline/threadline/conformance/aguicheck"
	"github.com/threadline/threadline/conformance/nativecheck"
	"github.com/threadline/threadline/conformance/ssecheck"
)

// Protocols the runner drives.
const (
	ProtocolAGUI   = "agui"
	ProtocolNative = "native"
)

// Config says what to run against.
type Config struct {
	// Target is the server's base URL, e.g. http://127.0.0.1:8080.
	Target string
	// Protocols to check: ProtocolAGUI, ProtocolNative or both.
	Protocols []string
	// Token, when set, is sent as a bearer token on every request.
	Token string
	// Scenarios limits the run to these names (see Scenarios); none means
	// every scenario the target supports.
	Scenarios []string
	// Heartbeat, when > 0, is the server's heartbeat interval: an idle
	// native stream is recorded for a while and must carry a heartbeat at
	// least that often. 0 skips the heartbeat rule.
	Heartbeat time.Duration
	// Timeout bounds each stream (default 60 s).
	Timeout time.Duration
	// MaxCursors bounds the replays read per native scenario for the replay
	// equivalence rule (default 40; cursors are spread over the log).
	MaxCursors int
	// Progress, when set, gets one line per scenario as it finishes.
	Progress io.Writer
	// HTTPClient sends the requests (default: a client without timeout;
	// Timeout bounds each stream).
	HTTPClient *http.Client
	// Cleanup, when set, deletes the threads the run created (through
	// DELETE /instance-ai/threads/{id}) once it is over, and says so on
	// Progress. The threads are named conformance-<time>-<protocol>-<scenario>.
	Cleanup bool
}

// Scenario is one conversation the runner plays.
type Scenario struct {
	Name string
	// Message is the user message sent.
	Message string
	// Reference scenarios need the reference agent (script).
	Reference bool
	// Protocols the scenario runs on (none: both).
	Protocols []string
	// Tools are AG-UI frontend tools offered with the message.
	Tools []map[string]any
}

// Scenarios lists every scenario. "hello" is generic: any agent answers a
// message. The others are the reference agent's named scenarios.
var Scenarios = []Scenario{
	{Name: "hello", Message: "Hello! Please answer in one short sentence."},
	{Name: "simple", Message: "simple conformance", Reference: true},
	{Name: "tools", Message: "tools", Reference: true},
	{Name: "tasks", Message: "tasks", Reference: true},
	{Name: "error", Message: "error", Reference: true},
	{Name: "long", Message: "long 200", Reference: true},
	{Name: "confirm", Message: "confirm", Reference: true},
	{Name: "background", Message: "background", Reference: true},
	{Name: "frontend-tool", Message: "frontend-tool", Reference: true, Protocols: []string{ProtocolAGUI},
		Tools: []map[string]any{{"name": "pickColor", "description": "Asks the user for a color",
			"parameters": map[string]any{"type": "object", "properties": map[string]any{}}}}},
}

// Catalog returns every rule the runner judges.
func Catalog() (*conformance.Catalog, error) {
	return conformance.NewCatalog(aguicheck.Rules, Rules, nativecheck.Rules, ssecheck.Rules)
}

type runner struct {
	cfg    Config
	client *http.Client
	prefix string // thread id prefix, unique per run

	// counting is set once the scenarios start: from then on, answered
	// and refused count the responses (a refusal is 401 or 403).
	counting          atomic.Bool
	answered, refused atomic.Int64
	mu                sync.Mutex
	threads           []string // the thread ids the scenarios used
}

// ErrRefused is returned when the target refused every request the
// scenarios made (401 or 403): a report of nothing checked would read as
// nothing wrong.
var ErrRefused = errors.New("the target refused every scenario's requests")

// thread returns the id of a thread the run uses and remembers it for the
// cleanup.
func (r *runner) thread(suffix string) string {
	id := r.prefix + "-" + suffix
	r.mu.Lock()
	r.threads = append(r.threads, id)
	r.mu.Unlock()
	return id
}

// Run plays the scenarios and returns the report. It fails only when the
// target cannot be used at all (bad URL, nothing listening, auth refused);
// a scenario that fails is in the report.
func Run(ctx context.Context, cfg Config) (*conformance.Report, error) {
	catalog, err := Catalog()
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(cfg.Target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target %q: want an absolute http(s) URL such as http://127.0.0.1:8080", cfg.Target)
	}
	cfg.Target = strings.TrimRight(cfg.Target, "/")
	if len(cfg.Protocols) == 0 {
		cfg.Protocols = []string{ProtocolAGUI, ProtocolNative}
	}
	for _, p := range cfg.Protocols {
		if p != ProtocolAGUI && p != ProtocolNative {
			return nil, fmt.Errorf("protocol %q: want %s or %s", p, ProtocolAGUI, ProtocolNative)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	if cfg.MaxCursors <= 0 {
		cfg.MaxCursors = 40
	}
	r := &runner{cfg: cfg, client: cfg.HTTPClient, prefix: fmt.Sprintf("conformance-%d", time.Now().UnixNano())}
	if r.client == nil {
		r.client = &http.Client{}
	}
	reference, err := r.offersReference(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := r.plan(reference)
	if err != nil {
		return nil, err
	}
	r.counting.Store(true)
	if cfg.Cleanup {
		defer r.cleanup()
	}
	var results []conformance.ScenarioResult
	for _, p := range cfg.Protocols {
		for _, sc := range plan {
			if len(sc.Protocols) > 0 && !contains(sc.Protocols, p) {
				continue
			}
			start := time.Now()
			var res conformance.ScenarioResult
			if p == ProtocolAGUI {
				res = r.agui(ctx, sc)
			} else {
				res = r.native(ctx, sc)
			}
			res.Name, res.Protocol, res.Duration = sc.Name, p, time.Since(start)
			if cfg.Progress != nil {
				conformance.WriteProgress(cfg.Progress, res)
			}
			results = append(results, res)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	if cfg.Heartbeat > 0 && contains(cfg.Protocols, ProtocolNative) {
		start := time.Now()
		res := r.heartbeat(ctx)
		res.Name, res.Protocol, res.Duration = "idle-heartbeat", ProtocolNative, time.Since(start)
		if cfg.Progress != nil {
			conformance.WriteProgress(cfg.Progress, res)
		}
		results = append(results, res)
	}
	if r.answered.Load() == 0 && r.refused.Load() > 0 {
		return nil, fmt.Errorf("target %s: %w (%d requests answered 401 or 403): pass a token with --token", cfg.Target, ErrRefused, r.refused.Load())
	}
	return conformance.Summarize(cfg.Target, cfg.Protocols, catalog, results), nil
}

// cleanup deletes the run's threads, each once, and reports how many went.
// A thread the target does not have (a scenario that failed before making
// it, a server without the threads endpoint) is not an error.
func (r *runner) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.counting.Store(false)
	seen := map[string]bool{}
	deleted, failed := 0, 0
	for _, id := range r.threads {
		if seen[id] {
			continue
		}
		seen[id] = true
		res, err := r.do(ctx, http.MethodDelete, "/instance-ai/threads/"+url.PathEscape(id), nil, nil)
		if err != nil {
			failed++
			continue
		}
		res.Body.Close()
		switch {
		case res.StatusCode < 300:
			deleted++
		case res.StatusCode != http.StatusNotFound:
			failed++
		}
	}
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "cleanup: deleted %d of the run's %d threads", deleted, len(seen))
		if failed > 0 {
			fmt.Fprintf(r.cfg.Progress, " (%d could not be deleted)", failed)
		}
		fmt.Fprintln(r.cfg.Progress)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// plan picks the scenarios: the named ones, or all the target supports.
func (r *runner) plan(reference bool) ([]Scenario, error) {
	if len(r.cfg.Scenarios) == 0 {
		var out []Scenario
		for _, sc := range Scenarios {
			if reference || !sc.Reference {
				out = append(out, sc)
			}
		}
		return out, nil
	}
	var out []Scenario
	for _, name := range r.cfg.Scenarios {
		found := false
		for _, sc := range Scenarios {
			if sc.Name == name {
				if sc.Reference && !reference {
					return nil, fmt.Errorf("scenario %q needs the reference agent, which the target's /status does not list", name)
				}
				out, found = append(out, sc), true
			}
		}
		if !found {
			var names []string
			for _, sc := range Scenarios {
				names = append(names, sc.Name)
			}
			return nil, fmt.Errorf("unknown scenario %q: known scenarios are %s", name, strings.Join(names, ", "))
		}
	}
	return out, nil
}

// offersReference asks /status whether the reference agent answers. A
// server without /status is a generic one.
func (r *runner) offersReference(ctx context.Context) (bool, error) {
	res, err := r.do(ctx, http.MethodGet, "/status", nil, nil)
	if err != nil {
		return false, fmt.Errorf("target %s: %w", r.cfg.Target, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
		return false, fmt.Errorf("target %s refused the request (%d): pass a token with --token", r.cfg.Target, res.StatusCode)
	}
	if res.StatusCode != http.StatusOK {
		return false, nil
	}
	var st struct {
		Agents json.RawMessage `json:"agents"`
	}
	if json.NewDecoder(io.LimitReader(res.Body, 1<<20)).Decode(&st) != nil {
		return false, nil
	}
	// Threadline's /status has agents as an object keyed by name; accept
	// a list of names too.
	var byName map[string]json.RawMessage
	if json.Unmarshal(st.Agents, &byName) == nil {
		_, ok := byName["script"]
		return ok, nil
	}
	var names []string
	if json.Unmarshal(st.Agents, &names) == nil {
		return contains(names, "script"), nil
	}
	return false, nil
}

func (r *runner) do(ctx context.Context, method, path string, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.cfg.Target+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	}
	res, err := r.client.Do(req)
	if err == nil && r.counting.Load() {
		if res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden {
			r.refused.Add(1)
		} else {
			r.answered.Add(1)
		}
	}
	return res, err
}

// statusError is a refused request.
type statusError struct {
	path string
	code int
	body string
}

func (e *statusError) Error() string { return fmt.Sprintf("POST %s: %d %s", e.path, e.code, e.body) }

// postJSON sends a JSON request and decodes a JSON answer into out.
func (r *runner) postJSON(ctx context.Context, path string, body, out any) error {
	res, err := r.do(ctx, http.MethodPost, path, body, nil)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if res.StatusCode/100 != 2 {
		return &statusError{path: path, code: res.StatusCode, body: string(bytes.TrimSpace(raw))}
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("POST %s: answer is not JSON: %s", path, raw)
		}
	}
	return nil
}

// record opens an SSE request and records it until stop.
func (r *runner) record(ctx context.Context, method, path string, body any, header http.Header, stop func(conformance.TimedFrame) bool) (*conformance.Recording, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if header == nil {
		header = http.Header{}
	}
	header.Set("Accept", "text/event-stream")
	res, err := r.do(ctx, method, path, body, header)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return nil, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, bytes.TrimSpace(raw))
	}
	rec, err := conformance.Record(ctx, res, stop)
	if err != nil {
		return rec, fmt.Errorf("%s %s: the stream ended early after %d frames: %w", method, path, len(rec.Frames), err)
	}
	return rec, nil
}

// protocolVersion is the AG-UI version the runner's requests declare, as
// @ag-ui/client 1.0.0's HttpAgent does.
const protocolVersion = "1.0"

// agui plays a scenario at /run-agent: one run, each stream checked. For
// an interrupt, it then sends what the interrupt contract refuses (a run
// without resume, a resume that leaves an interrupt out, a late one when
// an interrupt expires soon), the resume that answers every interrupt, and
// that resume again.
func (r *runner) agui(ctx context.Context, sc Scenario) conformance.ScenarioResult {
	thread := r.thread("agui-" + sc.Name)
	input := map[string]any{
		"threadId": thread, "runId": "run-1", "protocolVersion": protocolVersion,
		"messages": []any{map[string]any{"id": "m1", "role": "user", "content": sc.Message}},
		"tools":    sc.Tools, "context": []any{}, "state": map[string]any{}, "forwardedProps": map[string]any{},
	}
	if sc.Tools == nil {
		input["tools"] = []any{}
	}
	rec, err := r.record(ctx, http.MethodPost, "/run-agent", input, nil, nil)
	if err != nil {
		return conformance.ScenarioResult{Error: err.Error()}
	}
	findings := append(aguicheck.CheckWith(rec, aguicheck.Options{Input: input}), ssecheck.Check(rec, ssecheck.Options{})...)
	ins := interrupts(rec)
	if len(ins) == 0 {
		return conformance.ScenarioResult{Findings: findings}
	}
	findings = append(findings, r.breakContract(ctx, thread, ins)...)
	status := "resolved"
	late, sent := r.expired(ctx, thread, ins)
	findings = append(findings, late)
	if sent != nil {
		if late.Status == conformance.Fail {
			// The late resume went through: nothing is left to resume,
			// but it can be replayed.
			return conformance.ScenarioResult{Findings: append(findings, r.replay(ctx, sent))}
		}
		status = "cancelled" // an expired interrupt can still be cancelled
	}
	resume := resumeInput(thread, "run-2", approvals(ins, status))
	rec2, err := r.record(ctx, http.MethodPost, "/run-agent", resume, nil, nil)
	if err != nil {
		return conformance.ScenarioResult{Findings: findings, Error: "resume (the refused requests before it must leave the interrupts open): " + err.Error()}
	}
	var first struct {
		Type string `json:"type"`
	}
	if data := rec2.Data(); len(data) > 0 && json.Unmarshal([]byte(data[0].Data), &first) == nil && first.Type == "RUN_ERROR" {
		findings = append(findings, conformance.Failf(ResumeCoversOpen,
			"the resume answering every interrupt after the refused requests got RUN_ERROR: a refused request closed the interrupts"))
	}
	findings = append(findings, aguicheck.CheckWith(rec2, aguicheck.Options{Input: resume, Earlier: []*conformance.Recording{rec}})...)
	findings = append(findings, ssecheck.Check(rec2, ssecheck.Options{})...)
	findings = append(findings, r.replay(ctx, resume))
	return conformance.ScenarioResult{Findings: findings}
}

// nativeEvent is the part of a native event the runner reads.
type nativeEvent struct {
	Type    string `json:"type"`
	RunID   string `json:"runId"`
	AgentID string `json:"agentId"`
	Payload struct {
		RequestID string `json:"requestId"`
	} `json:"payload"`
}

// native plays a scenario on the native endpoints: the live stream of the
// run, then the thread replayed in full and after a spread of cursors.
func (r *runner) native(ctx context.Context, sc Scenario) conformance.ScenarioResult {
	thread := r.thread("native-" + sc.Name)
	// Opening the stream before the chat needs the thread to exist. A
	// server without the threads endpoint (404/405) creates threads on the
	// first chat: then the chat goes first and the stream, opened without
	// a cursor, replays the run's start before going live.
	chatFirst := false
	if err := r.postJSON(ctx, "/instance-ai/threads", map[string]string{"id": thread}, nil); err != nil {
		var se *statusError
		if !errors.As(err, &se) || (se.code != http.StatusNotFound && se.code != http.StatusMethodNotAllowed) {
			return conformance.ScenarioResult{Error: "create the thread: " + err.Error()}
		}
		chatFirst = true
	}
	// The recording ends when the run and every agent it spawned are done
	// (background agents outlive the orchestrator's run-finish). The run's
	// id is known only once the chat answers, which a fast run can beat:
	// finished runs are remembered, and the check is made again then.
	var mu sync.Mutex
	var runID string
	finishedRuns := map[string]bool{}
	answered := map[string]bool{}
	spawned := map[string]bool{}
	over := func() bool { return runID != "" && finishedRuns[runID] && len(spawned) == 0 }
	var endRecording context.CancelCauseFunc // set once the recording runs
	stop := func(f conformance.TimedFrame) bool {
		if f.Data == "" || f.Event != "" {
			return false
		}
		var ev nativeEvent
		if json.Unmarshal([]byte(f.Data), &ev) != nil {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		switch ev.Type {
		case "confirmation-request":
			if id := ev.Payload.RequestID; id != "" && !answered[id] {
				answered[id] = true
				go func() {
					_ = r.postJSON(ctx, "/instance-ai/confirm/"+url.PathEscape(id), map[string]any{"approved": true}, nil)
				}()
			}
		case "agent-spawned":
			spawned[ev.AgentID] = true
		case "agent-completed":
			delete(spawned, ev.AgentID)
		case "run-finish":
			finishedRuns[ev.RunID] = true
		}
		return over()
	}
	sendChat := func() error {
		var chat struct {
			RunID string `json:"runId"`
		}
		if err := r.postJSON(ctx, "/instance-ai/chat/"+url.PathEscape(thread), map[string]string{"message": sc.Message}, &chat); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		runID = chat.RunID
		if over() && endRecording != nil {
			endRecording(errRunOver)
		}
		return nil
	}
	if chatFirst {
		if err := sendChat(); err != nil {
			return conformance.ScenarioResult{Error: err.Error()}
		}
	}
	// The stream is open once its headers are in; the chat, unless it went
	// first, is sent only then, so the recording holds the whole run.
	path := "/instance-ai/events/" + url.PathEscape(thread)
	sctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	res, err := r.do(sctx, http.MethodGet, path, nil, http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return conformance.ScenarioResult{Error: "open the event stream: " + err.Error()}
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return conformance.ScenarioResult{Error: fmt.Sprintf("open the event stream: %d %s", res.StatusCode, bytes.TrimSpace(raw))}
	}
	type result struct {
		rec *conformance.Recording
		err error
	}
	done := make(chan result, 1)
	rctx, cancelRecording := context.WithCancelCause(sctx)
	defer cancelRecording(nil)
	mu.Lock()
	endRecording = cancelRecording
	mu.Unlock()
	go func() {
		rec, err := conformance.Record(rctx, res, stop)
		if errors.Is(context.Cause(rctx), errRunOver) {
			err = nil
		}
		if err != nil {
			err = fmt.Errorf("the event stream ended early after %d frames: %w", len(rec.Frames), err)
		}
		done <- result{rec, err}
	}()
	if !chatFirst {
		if err := sendChat(); err != nil {
			return conformance.ScenarioResult{Error: err.Error()}
		}
	}
	// A second client joins while the run may still be going: its replay →
	// live handoff (and run-sync, if the run is live) is checked too.
	joined := make(chan result, 1)
	go func() {
		rec, err := r.record(ctx, http.MethodGet, path, nil, nil, func(f conformance.TimedFrame) bool {
			var ev nativeEvent
			if f.Event != "" || json.Unmarshal([]byte(f.Data), &ev) != nil {
				return false
			}
			mu.Lock()
			defer mu.Unlock()
			return ev.Type == "run-finish" && ev.RunID == runID
		})
		joined <- result{rec, err}
	}()
	live := <-done
	if live.err != nil {
		return conformance.ScenarioResult{Error: live.err.Error()}
	}
	findings := append(nativecheck.CheckConnection(live.rec), ssecheck.Check(live.rec, ssecheck.Options{})...)
	join := <-joined
	if join.err != nil {
		return conformance.ScenarioResult{Findings: findings, Error: "a client joining mid-run: " + join.err.Error()}
	}
	findings = append(findings, nativecheck.CheckConnection(join.rec)...)

	last := lastID(live.rec)
	if last == 0 {
		return conformance.ScenarioResult{Findings: findings}
	}
	untilLast := func(f conformance.TimedFrame) bool { return f.ID == strconv.FormatInt(last, 10) }
	full, err := r.record(ctx, http.MethodGet, path, nil, nil, untilLast)
	if err != nil {
		return conformance.ScenarioResult{Findings: findings, Error: "full replay: " + err.Error()}
	}
	findings = append(findings, nativecheck.CheckConnection(full)...)
	after := map[int64]*conformance.Recording{}
	for _, c := range cursors(full, last, r.cfg.MaxCursors) {
		h := http.Header{}
		h.Set("Last-Event-ID", strconv.FormatInt(c, 10))
		rec, err := r.record(ctx, http.MethodGet, path, nil, h, untilLast)
		if err != nil {
			return conformance.ScenarioResult{Findings: findings, Error: fmt.Sprintf("replay after %d: %v", c, err)}
		}
		after[c] = rec
		// A reconnection is a connection: its own rules apply too.
		findings = append(findings, nativecheck.CheckConnection(rec)...)
	}
	findings = append(findings, nativecheck.CheckReplay(live.rec, full, after)...)
	return conformance.ScenarioResult{Findings: findings}
}

// errRunOver ends a recording whose run was over before its id was known.
var errRunOver = errors.New("the run is over")

// lastID is the highest id a recording carries.
func lastID(rec *conformance.Recording) int64 {
	var last int64
	for _, f := range rec.Frames {
		if n, err := strconv.ParseInt(f.ID, 10, 64); err == nil && n > last {
			last = n
		}
	}
	return last
}

// cursors spreads up to max cursors over the ids of a full replay, from
// before the first (0) to just before the last.
func cursors(full *conformance.Recording, last int64, max int) []int64 {
	ids := []int64{0}
	for _, f := range full.Frames {
		if n, err := strconv.ParseInt(f.ID, 10, 64); err == nil && n < last {
			ids = append(ids, n)
		}
	}
	if len(ids) <= max {
		return ids
	}
	out := make([]int64, 0, max)
	for i := 0; i < max; i++ {
		out = append(out, ids[i*len(ids)/max])
	}
	return out
}

// heartbeat records an idle thread's stream for a while and checks its
// heartbeats.
func (r *runner) heartbeat(ctx context.Context) conformance.ScenarioResult {
	thread := r.thread("native-idle")
	if err := r.postJSON(ctx, "/instance-ai/threads", map[string]string{"id": thread}, nil); err != nil {
		return conformance.ScenarioResult{Error: "create the thread: " + err.Error()}
	}
	wait := r.cfg.Heartbeat*3 + time.Second
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := r.do(rctx, http.MethodGet, "/instance-ai/events/"+url.PathEscape(thread), nil, http.Header{"Accept": {"text/event-stream"}})
	if err != nil {
		return conformance.ScenarioResult{Error: err.Error()}
	}
	defer res.Body.Close()
	rec, _ := conformance.Record(rctx, res, nil) // ends at the deadline, by design
	return conformance.ScenarioResult{Findings: ssecheck.Check(rec, ssecheck.Options{Heartbeat: r.cfg.Heartbeat})}
}
