package mcptools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/instanceai"
)

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_-]`)

// toolName is <server>__<tool> in the characters OpenAI allows. A name
// that had to be changed (other characters, longer than 64) ends in a
// hash of the original, so that two names that sanitise alike stay apart.
func toolName(server, tool string, taken map[string]string) string {
	orig := server + "__" + tool
	name := unsafeChars.ReplaceAllString(orig, "_")
	_, clash := taken[name]
	if name == orig && len(name) <= 64 && !clash {
		return name
	}
	sum := sha256.Sum256([]byte(orig))
	suffix := "_" + hex.EncodeToString(sum[:])[:8]
	if len(name) > 64-len(suffix) {
		name = name[:64-len(suffix)]
	}
	return name + suffix
}

// needsApproval applies the policy: a per-tool override, else the
// server's policy, else the tool's hints with MCP's defaults (readOnlyHint
// false, destructiveHint true): a tool asks unless it says it is read-only
// or says destructiveHint false.
func needsApproval(cfg Server, t *mcp.Tool) (ask bool, severity string) {
	a := t.Annotations
	destructive := a == nil || (!a.ReadOnlyHint && (a.DestructiveHint == nil || *a.DestructiveHint))
	switch {
	case destructive:
		severity = instanceai.SeverityDestructive
	case a.ReadOnlyHint:
		severity = instanceai.SeverityInfo
	default:
		severity = instanceai.SeverityWarning
	}
	policy := cfg.Approval
	if p := cfg.Tools[t.Name].Approval; p != "" && p != ApprovalHints {
		policy = p
	}
	switch policy {
	case ApprovalAlways:
		return true, severity
	case ApprovalNever:
		return false, severity
	}
	return destructive, severity
}

// tool makes the tools.Tool of one server tool.
func (s *server) tool(name string, t *mcp.Tool) tools.Tool {
	params, err := json.Marshal(t.InputSchema)
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(params), []byte("{")) {
		params = json.RawMessage(`{"type":"object","properties":{}}`)
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	ask, severity := needsApproval(s.cfg, t)
	return tools.Tool{
		Name: name, Description: desc, Parameters: params, NeedsApproval: ask, Severity: severity,
		Execute: func(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
			return s.call(ctx, t.Name, args)
		},
	}
}

// errTimedOut is the cause of a call's context when the server's timeout
// ended it.
var errTimedOut = errors.New("the MCP call timed out")

// call calls the server's tool with the run's context, bounded by the
// server's timeout, and renders its result.
func (s *server) call(ctx context.Context, tool string, args json.RawMessage) (json.RawMessage, error) {
	sess, err := s.current()
	if err != nil {
		return nil, err
	}
	call, _ := tools.CallFrom(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timeout := func() { cancel(errTimedOut) }
	var timerMu sync.Mutex
	timer := time.AfterFunc(s.cfg.Timeout, timeout)
	defer timer.Stop()
	in := &inflight{tool: tool, call: call, ctx: ctx,
		pause: func() {
			timerMu.Lock()
			timer.Stop()
			timerMu.Unlock()
		},
		resume: func() {
			timerMu.Lock()
			timer.Reset(s.cfg.Timeout)
			timerMu.Unlock()
		}}
	done := s.track(in)
	defer done()
	ctx = context.WithValue(ctx, inflightKey{}, in)
	params := &mcp.CallToolParams{Name: tool, Arguments: json.RawMessage(args)}
	params.SetProgressToken(in.token)
	res, err := sess.CallTool(ctx, params)
	if err != nil {
		switch {
		case errors.Is(context.Cause(ctx), errTimedOut):
			return nil, fmt.Errorf("the MCP server %q did not answer %s within %s (timed out)", s.name, tool, s.cfg.Timeout)
		case ctx.Err() != nil:
			return nil, context.Cause(ctx)
		}
		if oversized(err) {
			limit := s.m.opts.MaxMessageBytes
			if s.cfg.stdio() {
				limit = mcp.DefaultMaxLineLength
			}
			return nil, fmt.Errorf("the MCP server %q answered %s with a message larger than %s, the bound on one MCP message, "+
				"so the result was not read; call the tool again asking for less. The server is being restarted: "+
				"its connection cannot be read past such a message", s.name, tool, bound.Size(limit))
		}
		var wire *jsonrpc.Error
		if errors.As(err, &wire) {
			return nil, fmt.Errorf("the MCP server %q refused the call to %s: %s", s.name, tool, wire.Message)
		}
		// The connection failed under the call: the server died or closed
		// its end (EOF, connection closed); the supervisor restarts it.
		return nil, fmt.Errorf("the MCP server %q stopped answering during the call to %s: %v", s.name, tool, err)
	}
	return render(res, call)
}

// oversized reports whether err is a transport's refusal of a message
// over its bound. The go-sdk keeps only the text of such a cause (it wraps
// it with %v), so the text is what is looked for: this package's cap on an
// HTTP answer's body, the streamable transport's MaxEventSize, the stdio
// transport's line bound.
func oversized(err error) bool {
	msg := err.Error()
	if errors.Is(err, mcp.ErrConnectionClosed) {
		// A call on a connection an earlier message broke: not its own.
		return false
	}
	return errors.Is(err, errMessageTooLarge) || strings.Contains(msg, errMessageTooLarge.Error()) ||
		strings.Contains(msg, "SSE event exceeded") || strings.Contains(msg, "exceeded the configured maximum line length")
}

type inflightKey struct{}

// result is what the model and the log get of a call's result.
type result struct {
	// Text joins the text content.
	Text string `json:"text,omitempty"`
	// Structured is the structuredContent, as the server sent it.
	Structured json.RawMessage `json:"structuredContent,omitempty"`
	// Images are described here; their bytes go to the model as content
	// parts (tools.Call.Attach), not into the log.
	Images []media `json:"images,omitempty"`
	Audio  []media `json:"audio,omitempty"`
	// Resources are the resource links and embedded resources.
	Resources []resource `json:"resources,omitempty"`
}

type media struct {
	MimeType string `json:"mimeType"`
	Bytes    int    `json:"bytes"`
	// Sent says whether the model received it.
	Sent bool `json:"sentToModel"`
}

type resource struct {
	URI         string `json:"uri"`
	Name        string `json:"name,omitempty"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
	// Text is an embedded text resource's content.
	Text string `json:"text,omitempty"`
	// Bytes is the size of an embedded binary resource (not included).
	Bytes int `json:"bytes,omitempty"`
}

// render turns a CallToolResult into the tool's JSON result, or an error
// with the server's text when isError is set.
func render(res *mcp.CallToolResult, call *tools.Call) (json.RawMessage, error) {
	var out result
	var texts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			texts = append(texts, c.Text)
		case *mcp.ImageContent:
			m := media{MimeType: c.MIMEType, Bytes: len(c.Data)}
			if call != nil && call.Attach != nil {
				call.Attach(instanceai.Attachment{Type: instanceai.AttachmentFile, Kind: instanceai.KindImage,
					MimeType: c.MIMEType, Data: base64.StdEncoding.EncodeToString(c.Data), FileName: "tool-image"})
				m.Sent = true
			}
			out.Images = append(out.Images, m)
		case *mcp.AudioContent:
			out.Audio = append(out.Audio, media{MimeType: c.MIMEType, Bytes: len(c.Data)})
		case *mcp.ResourceLink:
			out.Resources = append(out.Resources, resource{URI: c.URI, Name: c.Name, Title: c.Title,
				Description: c.Description, MimeType: c.MIMEType})
		case *mcp.EmbeddedResource:
			if r := c.Resource; r != nil {
				out.Resources = append(out.Resources, resource{URI: r.URI, MimeType: r.MIMEType, Text: r.Text, Bytes: len(r.Blob)})
			}
		}
	}
	out.Text = strings.Join(texts, "\n")
	if res.IsError {
		msg := out.Text
		if msg == "" {
			msg = "the tool reported an error without a message"
		}
		return nil, errors.New(msg)
	}
	if res.StructuredContent != nil {
		raw, err := json.Marshal(res.StructuredContent)
		if err == nil {
			out.Structured = raw
		}
	}
	if out.Structured == nil && len(out.Images) == 0 && len(out.Audio) == 0 && len(out.Resources) == 0 {
		// Text only: the model reads it as the tool message, unwrapped.
		raw, _ := json.Marshal(out.Text)
		return raw, nil
	}
	return json.Marshal(out)
}

// progress turns a progress notification into a status event of the run
// whose call carries the token.
func (s *server) progress(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p := req.Params
	token := fmt.Sprint(p.ProgressToken)
	s.mu.Lock()
	in := s.calls[token]
	s.mu.Unlock()
	if in == nil || in.call == nil || in.call.Status == nil {
		return
	}
	msg := fmt.Sprintf("%s: %g", in.call.ToolName, p.Progress)
	if p.Total > 0 {
		msg = fmt.Sprintf("%s: %g of %g", in.call.ToolName, p.Progress, p.Total)
	}
	if p.Message != "" {
		msg += " — " + p.Message
	}
	if err := in.call.Status(msg); err != nil {
		s.log.Debug("progress not reported", "err", err)
	}
}

// tail keeps the last lines a stdio server wrote to stderr, for the error
// that reports its death, and logs them at debug level.
type tail struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 2048

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailBytes {
		t.buf = t.buf[len(t.buf)-tailBytes:]
	}
	if t.log != nil && t.log.Enabled(context.Background(), slog.LevelDebug) {
		t.log.Debug("MCP server stderr", "text", strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func (t *tail) last() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.TrimSpace(strings.Join(lines, " | "))
}

// withStderr adds what a stdio server last wrote to stderr to err.
func withStderr(err error, t *tail) error {
	if err == nil || t == nil {
		return err
	}
	if last := t.last(); last != "" {
		return fmt.Errorf("%w (stderr: %s)", err, last)
	}
	return err
}
