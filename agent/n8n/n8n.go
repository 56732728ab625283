// Package n8n is the agent that bridges runs to n8n workflows: a Webhook
// trigger whose Response mode is "Streaming" feeding an AI Agent node with
// streaming on (a Chat Trigger in streaming mode works the same way).
//
// # Request
//
// Each run POSTs one JSON body to the chosen webhook:
//
//	{"chatInput": <message>, "sessionId": <thread id>, "action": "sendMessage"}
//
// This is what n8n's own chat widget sends (packages/frontend/@n8n/chat/src/api/message.ts,
// sendMessage and sendTextOnly: action "sendMessage", then the
// chatSessionKey and chatInputKey, whose defaults in
// packages/frontend/@n8n/chat/src/constants/defaults.ts are "sessionId" and
// "chatInput"). A Chat Trigger exposes those fields as the item's JSON, where
// the AI Agent's default prompt ({{ $json.chatInput }}) and the memory nodes'
// default session key ({{ $json.sessionId }}) read them, so the thread id
// keys the agent's memory. A plain Webhook node nests the request body under
// "body" (packages/nodes-base/nodes/Webhook/Webhook.node.ts), so there the
// agent's prompt must read {{ $json.body.chatInput }} and the memory's key
// {{ $json.body.sessionId }}. Config.Header carries header auth.
//
// # Response
//
// In streaming mode the Webhook node answers 200 at once with
// "Content-Type: application/json; charset=utf-8" and chunked encoding
// (Webhook.node.ts, responseMode === 'streaming'), then writes one
// StructuredChunk per line: {type: begin|item|end|error, content?, metadata:
// {nodeId, nodeName, timestamp, runIndex, itemIndex}}
// (packages/frontend/@n8n/chat/src/types/streaming.ts). Newer n8n writes
// {"type":"keepalive"} every 30 s while the stream is open
// (packages/cli/src/webhooks/streaming-webhook-response-heartbeat.ts). The
// unmerged n8n PR 20499 adds tool-call-start / tool-call-end chunks.
// Recordings of n8n 1.123 (testdata/real/) show neither: only begin, item,
// end and error; error chunks carry no timestamp, may lack content and are
// not followed by the open item's end; a tool call shows only as an extra,
// empty begin/end pair of the agent's item, which yields no event. The
// chat widget's own reader (message.ts, createLineParser) splits on
// newlines across reads the same way ndjson.Reader does.
//
// Every item (nodeId, runIndex, itemIndex) is its own text stream and gets
// its own JSON-capture layer (capture.Layer, seed 004) and its own
// stable responseId. See MapStream for the mapping to Instance AI events.
//
// A webhook left in "When Last Node Finishes" mode answers with the agent's
// JSON instead ({"output": "..."}); its text is used as is.
package n8n

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/threadline/threadline/agent/internal/endpoint"
	"github.com/threadline/threadline/agent/n8n/capture"
	"github.com/threadline/threadline/instanceai"
)

// Defaults of Config.
const (
	DefaultConnectTimeout = 30 * time.Second
	DefaultIdleTimeout    = 120 * time.Second
)

// Webhook is one named n8n workflow: Name is what StartRequest.AgentName
// selects, URL the webhook's production URL (…/webhook/<path>; the test
// URL, …/webhook-test/<path>, only answers while the editor listens).
type Webhook = endpoint.Named

// Config configures the agent.
type Config struct {
	// Webhooks lists the workflows; the first is the default. At least one;
	// names unique and non-empty; URLs absolute http(s).
	Webhooks []Webhook
	// Header holds extra headers sent with every request (e.g. the
	// Webhook node's header auth).
	Header http.Header
	// HTTPClient sends the requests; nil means a client without a total
	// timeout (the stream may last long; the timeouts below bound it).
	HTTPClient *http.Client
	// ConnectTimeout bounds the wait for the response headers; 0 means
	// DefaultConnectTimeout.
	ConnectTimeout time.Duration
	// IdleTimeout bounds the silence on the body (keepalives count); 0
	// means DefaultIdleTimeout. n8n 1.123 sends no keepalives: it stays
	// silent from the begin chunk until the model's first token
	// (testdata/real/stream-stall35s.ndjson), so this must exceed the
	// model's longest pause on such releases.
	IdleTimeout time.Duration
	// MaxObject bounds one captured object; 0 means
	// capture.DefaultMaxObject.
	MaxObject int
	// NoCapture turns the JSON-capture layer off (StreamOptions.NoCapture):
	// the workflow's text reaches the thread as it is, objects included.
	// The zero value keeps capture on, as seed 004's agents need it.
	NoCapture bool
	// Observer receives the capture layer's counts; nil is a no-op.
	Observer CaptureObserver
	// MaxEventBytes is the core's bound on one event (--max-event-bytes;
	// 0 means instanceai.DefaultMaxEventBytes): one line of the stream may
	// be that and its envelope (StreamOptions.MaxEventBytes).
	MaxEventBytes int
	Logger        *slog.Logger
}

// Agent runs messages through n8n webhooks. It is safe for concurrent runs.
type Agent struct {
	conn      endpoint.Conn
	webhooks  []Webhook
	maxObject int
	maxEvent  int
	noCapture bool
	obs       CaptureObserver
	log       *slog.Logger
}

// New checks cfg and returns the agent.
func New(cfg Config) (*Agent, error) {
	if err := endpoint.Check("n8n: Config.Webhooks", cfg.Webhooks, "https://n8n.example.com/webhook/<path>"); err != nil {
		return nil, err
	}
	if cfg.MaxObject < 0 {
		return nil, errors.New("n8n: Config.MaxObject: must not be negative")
	}
	if cfg.MaxEventBytes < 0 {
		return nil, errors.New("n8n: Config.MaxEventBytes: must not be negative")
	}
	conn, err := endpoint.NewConn("n8n", endpoint.Conn{Client: cfg.HTTPClient, Header: cfg.Header,
		ConnectTimeout: cfg.ConnectTimeout, IdleTimeout: cfg.IdleTimeout}, DefaultConnectTimeout, DefaultIdleTimeout)
	if err != nil {
		return nil, err
	}
	a := &Agent{conn: conn, webhooks: slices.Clone(cfg.Webhooks), maxObject: cfg.MaxObject, maxEvent: cfg.MaxEventBytes,
		noCapture: cfg.NoCapture, obs: cfg.Observer, log: cfg.Logger}
	if a.maxObject == 0 {
		a.maxObject = capture.DefaultMaxObject
	}
	if a.log == nil {
		a.log = slog.Default()
	}
	return a, nil
}

// Names returns the webhook names, in order (instanceai.NamedAgent).
func (a *Agent) Names() []string { return endpoint.Names(a.webhooks) }

func (a *Agent) webhook(name string) (Webhook, error) {
	return endpoint.Pick(a.webhooks, name)
}

// Run sends the run's message to the webhook run.AgentName names and emits
// what the stream carries. Failures come back as *instanceai.ProviderError,
// which the registry turns into the error event and run-finish{error}.
func (a *Agent) Run(ctx context.Context, run *instanceai.Run) error {
	wh, err := a.webhook(run.AgentName)
	if err != nil {
		return err
	}
	body, err := json.Marshal(map[string]string{
		"chatInput": run.Message, "sessionId": run.ThreadID, "action": "sendMessage",
	})
	if err != nil {
		return err
	}
	st, err := a.conn.Open(ctx, wh.URL, body, "application/json", "application/json, application/x-ndjson, text/plain;q=0.9")
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		var oe *endpoint.OpenError
		if errors.As(err, &oe) && oe.TimedOut {
			return &instanceai.ProviderError{Provider: Provider, Code: CodeTimeout,
				Message: fmt.Sprintf("n8n did not answer the webhook %q within %s. Check that n8n is up and the workflow starts; "+
					"a long-running workflow must use Response mode Streaming so it answers at once.", wh.Name, a.conn.ConnectTimeout),
				Details: err.Error()}
		}
		return &instanceai.ProviderError{Provider: Provider, Code: CodeConnectionFailed,
			Message: fmt.Sprintf("Could not reach n8n for the webhook %q. Check that n8n is running and that the webhook URL's host and port are right.", wh.Name),
			Details: err.Error()}
	}
	defer st.Close()
	resp := st.Response

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return statusError(wh, resp)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "" && !acceptedType(ct) {
		a.log.Warn("n8n webhook answered with an unexpected content type; reading it as a stream anyway",
			"webhook", wh.Name, "contentType", ct)
	}

	err = MapStream(st.Body, StreamOptions{RunID: run.ID, MaxObject: a.maxObject, MaxEventBytes: a.maxEvent, NoCapture: a.noCapture, Observer: a.obs,
		Logger: a.log.With("webhook", wh.Name, "run", run.ID)}, run.Emit)
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var pe *instanceai.ProviderError
	if errors.As(err, &pe) && pe.Code == CodeStreamInterrupted && st.Idle() {
		return &instanceai.ProviderError{Provider: Provider, Code: CodeTimeout,
			Message: fmt.Sprintf("n8n sent nothing for %s, not even a keepalive, so the run was stopped; the text received so far is kept. "+
				"Check the workflow's execution in n8n. n8n releases without the streaming heartbeat (1.123 and older) stay silent "+
				"while the model thinks, so a slow model may need a longer idle timeout.", a.conn.IdleTimeout),
			Details: pe.Details}
	}
	return err
}

func acceptedType(ct string) bool {
	ct = strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	return ct == "application/json" || ct == "application/x-ndjson" || ct == "text/plain"
}

// n8nError is the JSON body of n8n's webhook errors: {code, message, hint,
// stacktrace} for an unknown webhook (testdata/real/webhook-404.json),
// {message} for a failed workflow (testdata/real/lastnode-model-500.json).
type n8nError struct {
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// statusError explains a non-2xx answer.
func statusError(wh Webhook, resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	details := fmt.Sprintf("POST %s: HTTP %d", endpoint.Redact(wh.URL), resp.StatusCode)
	var ne n8nError
	if json.Unmarshal(b, &ne) == nil && ne.Message != "" {
		// Only message and hint: the stacktrace n8n adds outside production
		// mode names its install paths and helps no one here.
		details += ": " + prefix([]byte(ne.Message), 512)
		if ne.Hint != "" {
			details += " (hint: " + prefix([]byte(ne.Hint), 512) + ")"
		}
	} else if s := strings.TrimSpace(string(b)); s != "" {
		details += ": " + prefix([]byte(s), 1024)
	}
	pe := &instanceai.ProviderError{Provider: Provider, StatusCode: resp.StatusCode, Details: validText(details)}
	switch code := resp.StatusCode; {
	case code == http.StatusNotFound && strings.Contains(wh.URL, "/webhook-test/"):
		pe.Code = CodeWebhookNotFound
		pe.Message = fmt.Sprintf("n8n has no webhook at the URL of %q (HTTP 404). It is a test URL (/webhook-test/), which only "+
			"answers once after \"Execute workflow\" is clicked in the editor: use the production URL (/webhook/) of the active workflow.", wh.Name)
	case code == http.StatusNotFound:
		pe.Code = CodeWebhookNotFound
		pe.Message = fmt.Sprintf("n8n has no webhook at the URL of %q (HTTP 404). Activate the workflow in n8n "+
			"(a production URL only answers while the workflow is active), and check the webhook URL and path.", wh.Name)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		pe.Code = CodeUnauthorized
		pe.Message = fmt.Sprintf("n8n refused the request to %q (HTTP %d). Check the webhook's authentication: the header "+
			"configured for this agent must match the Webhook node's Header Auth credential.", wh.Name, code)
	case code >= 500 && ne.Message == "Error in workflow":
		// A Webhook node in "When Last Node Finishes" mode says no more
		// than this when a node fails, e.g. the agent's model answering 500.
		pe.Code = CodeUpstreamError
		pe.Message = fmt.Sprintf("A node of the workflow behind %q failed, and n8n said only \"Error in workflow\" (HTTP %d). "+
			"Open the workflow's executions in n8n to see which node and why. With the Webhook node's Response mode set to "+
			"Streaming, n8n reports the failing node's own message instead.", wh.Name, code)
	case code >= 500:
		pe.Code = CodeUpstreamError
		pe.Message = fmt.Sprintf("n8n failed to run the workflow behind %q (HTTP %d). Open the workflow's executions in n8n to see what went wrong.", wh.Name, code)
	default:
		pe.Code = CodeHTTPError
		pe.Message = fmt.Sprintf("n8n rejected the request to %q (HTTP %d). Check that the Webhook node accepts POST with a JSON body.", wh.Name, code)
	}
	return pe
}

var _ instanceai.NamedAgent = (*Agent)(nil)
