package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/openai/chunk"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
	"github.com/threadline/threadline/ssestream"
)

// Retry policy. A model call is retried after a 429, a 5xx, or a
// connection reset or an empty stream, and only while none of its events
// was emitted (a retry after text was shown would show it twice). The wait
// is the server's Retry-After when it sends one, else exponential backoff
// with jitter: a random wait between half and all of retryBase·2^n, capped
// at retryMax. A Retry-After longer than maxRetryAfter is not waited out:
// the run fails at once saying when to try again, rather than hold a
// person in front of a spinner.
const (
	retryBase     = 250 * time.Millisecond
	retryMax      = 8 * time.Second
	maxRetryAfter = 30 * time.Second
	// maxErrorBody bounds how much of an error answer is read.
	maxErrorBody = 16 << 10
)

// newStreamReader reads the data payloads of a Chat Completions stream
// (NextData): fields other than data do not matter to it, and a frame still
// pending at the end of the stream is dispatched, as some servers close
// right after the last data line.
//
// One frame, and so each of its lines, is bounded by the bound on one
// event and its envelope (bound.Stream): a chunk is a few hundred bytes,
// and the largest, Ollama's whole tool calls, becomes one tool-call event,
// which the core bounds anyway. Without a bound a broken server would grow
// memory freely.
func newStreamReader(body io.Reader, maxEvent int) *ssestream.Reader {
	limit := bound.Stream(maxEvent)
	return ssestream.NewReaderWith(body, ssestream.ReaderOptions{MaxLine: limit, MaxFrame: limit, DispatchAtEOF: true})
}

// errIdleTimeout cancels a model call whose server went silent for longer
// than RequestTimeout.
var errIdleTimeout = errors.New("no data from the model server within the request timeout")

// retryable wraps the failure of an attempt that may be repeated.
type retryable struct {
	err *instanceai.ProviderError
	// after is the server's Retry-After (0: none).
	after time.Duration
	// refused names the optional request field a 400 blames
	// (stream_options, response_format): the attempt is repeated once
	// without it.
	refused string
}

func (r *retryable) Error() string { return r.err.Error() }

// Optional request fields some servers refuse with a 400.
const (
	fieldStreamOptions  = "stream_options"
	fieldResponseFormat = "response_format"
)

// callResult is what one model call produced.
type callResult struct {
	text   string
	calls  []stepCall
	finish string
	usage  chunk.Usage
}

// modelCall sends the conversation and streams the answer, retrying as the
// policy allows.
//
// Its span covers the retries too; each attempt's request gets a client
// span of its own under it. Only the model's name, the step and the
// outcome are recorded: no message text.
func (a *Agent) modelCall(ctx context.Context, l *loop) (*callResult, error) {
	ctx, span := tracing.Start(ctx, "model.call",
		attribute.String("gen_ai.system", a.cfg.Provider), attribute.String("gen_ai.request.model", a.cfg.Model),
		attribute.Int("agent.step", l.steps))
	defer span.End()
	res, err := withRetries(ctx, a, func() (*callResult, error) {
		return a.attempt(ctx, l, !a.noStreamOptions.Load())
	})
	if err != nil {
		span.SetStatus(codes.Error, "model call failed")
		return nil, err
	}
	span.SetAttributes(attribute.String("gen_ai.response.finish_reason", res.finish),
		attribute.Int("gen_ai.response.tool_calls", len(res.calls)))
	return res, nil
}

// withRetries runs attempt under the retry policy: a retryable failure is
// repeated after a wait, up to MaxRetries times, and a refused optional
// field is dropped for good (the attempt reads the agent's flags) and the
// request sent again once.
func withRetries[T any](ctx context.Context, a *Agent, attempt func() (T, error)) (T, error) {
	var zero T
	retries := 0
	fellBack := map[string]bool{}
	for {
		res, err := attempt()
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return zero, context.Cause(ctx)
		}
		var r *retryable
		if !errors.As(err, &r) {
			return zero, err
		}
		if r.refused != "" {
			if fellBack[r.refused] {
				return zero, r.err
			}
			fellBack[r.refused] = true
			a.dropField(r.refused)
			continue
		}
		if r.after > maxRetryAfter {
			return zero, a.rateLimitTooLong(r.after, []byte(r.err.Details))
		}
		if retries >= a.cfg.MaxRetries {
			return zero, r.err
		}
		wait := r.after
		if wait <= 0 {
			wait = backoff(retries)
		}
		retries++
		a.log.Info("retrying the model call", "url", a.chatURL, "attempt", retries, "wait", wait, "reason", r.err.Code)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// dropField remembers that the server refused an optional field, so that
// later requests leave it out instead of failing first every time.
func (a *Agent) dropField(field string) {
	switch field {
	case fieldStreamOptions:
		// Some servers (older vLLM and llama.cpp builds, strict proxies)
		// reject the stream_options field: the run loses its usage
		// numbers, not its answer.
		a.noStreamOptions.Store(true)
		a.log.Info("the model server rejected stream_options; retrying without it (no usage reporting)", "url", a.chatURL)
	case fieldResponseFormat:
		// LM Studio accepts only json_schema and text: the builder then
		// relies on its prompt and its JSON extraction alone.
		a.noResponseFormat.Store(true)
		a.log.Info("the model server rejected response_format json_object; retrying without it", "url", a.chatURL)
	}
}

// backoff is the wait before retry n (from 0) when the server named none.
func backoff(n int) time.Duration {
	d := retryBase << min(n, 10)
	d = min(d, retryMax)
	return d/2 + rand.N(d/2+1)
}

// retryAfter reads a Retry-After header: delay seconds or an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseFloat(v, 64); err == nil && n >= 0 {
		return time.Duration(n * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// attempt makes one request and streams its answer.
func (a *Agent) attempt(ctx context.Context, l *loop, withStreamOptions bool) (*callResult, error) {
	req := chatRequest{Model: a.cfg.Model, Messages: wireMessages(l.msgs), Stream: true, Tools: l.tools}
	var optional []string
	if withStreamOptions {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
		optional = append(optional, fieldStreamOptions)
	}
	x, err := a.post(ctx, req, "text/event-stream", optional...)
	if err != nil {
		return nil, err
	}
	defer x.close()
	return a.stream(ctx, x.ctx, l, x.resp.Body, x.idle)
}

// exchange is a request whose answer is 200: the response, and the
// context and timer that bound it.
type exchange struct {
	resp *http.Response
	// ctx is cancelled with errIdleTimeout when the server goes silent
	// for RequestTimeout (idle is the timer, to reset on progress).
	ctx    context.Context
	idle   *time.Timer
	cancel context.CancelCauseFunc
}

func (x *exchange) close() {
	x.idle.Stop()
	x.cancel(nil)
	_ = x.resp.Body.Close()
}

// post sends a Chat Completions request and returns its 200 answer, or
// the classified failure (retryable where the policy allows). optional
// names the fields of req a 400 may blame, to be dropped.
func (a *Agent) post(ctx context.Context, req chatRequest, accept string, optional ...string) (*exchange, error) {
	body, err := a.encodeRequest(req)
	if err != nil {
		return nil, fmt.Errorf("encode the model request: %w", err)
	}
	actx, cancel := context.WithCancelCause(ctx)
	// One timer bounds the wait for the headers, then every silence.
	idle := time.AfterFunc(a.cfg.RequestTimeout, func() { cancel(errIdleTimeout) })
	fail := func(err error) (*exchange, error) {
		idle.Stop()
		cancel(nil)
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, a.chatURL, bytes.NewReader(body))
	if err != nil {
		return fail(fmt.Errorf("build the model request: %w", err))
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", accept)
	if a.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+a.cfg.APIKey)
	}
	resp, err := a.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return fail(context.Cause(ctx))
		}
		if errors.Is(context.Cause(actx), errIdleTimeout) {
			err = errIdleTimeout
		}
		pe := a.transportFailure(err)
		if retryableTransport(err) {
			return fail(&retryable{err: pe})
		}
		return fail(pe)
	}
	if resp.StatusCode != http.StatusOK {
		err := a.badStatus(ctx, resp, optional)
		_ = resp.Body.Close()
		return fail(err)
	}
	return &exchange{resp: resp, ctx: actx, idle: idle, cancel: cancel}, nil
}

// badStatus reads a non-200 answer and classifies it.
func (a *Agent) badStatus(ctx context.Context, resp *http.Response, optional []string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	status := resp.StatusCode
	if status == http.StatusBadRequest {
		lower := bytes.ToLower(body)
		for _, f := range optional {
			if bytes.Contains(lower, []byte(f)) {
				return &retryable{err: a.statusFailure(status, resp.Header, body, nil), refused: f}
			}
		}
	}
	switch {
	case status == http.StatusTooManyRequests || status >= 500:
		return &retryable{err: a.statusFailure(status, resp.Header, body, nil), after: retryAfter(resp.Header)}
	case status == http.StatusNotFound || (status == http.StatusBadRequest && upstreamMessage(body).modelMissing()):
		// The model list makes a better hint; llama-server's router
		// answers an unknown model with 400, not 404.
		models, _, _ := a.listModels(ctx, a.cfg.HealthTimeout)
		if len(models) > 20 {
			models = append(models[:20:20], "…")
		}
		return a.statusFailure(status, resp.Header, body, models)
	}
	return a.statusFailure(status, resp.Header, body, nil)
}

// stream reads the SSE body through the translator, emitting its events.
func (a *Agent) stream(ctx, actx context.Context, l *loop, body io.Reader, idle *time.Timer) (*callResult, error) {
	tr := chunk.NewTranslator()
	tr.NewID = func(kind string) string {
		if kind == "call" {
			return instanceai.NewID("call_")
		}
		return instanceai.NewID("resp_")
	}
	res := &callResult{}
	byCall := map[string]string{}
	names := map[string]string{}
	emitted := false
	handle := func(evs []instanceai.Event) error {
		for _, ev := range evs {
			switch p := ev.Payload.(type) {
			case *instanceai.Text:
				if ev.Type == instanceai.TypeTextDelta {
					res.text += p.Text
				}
			case *instanceai.ToolInputStart:
				p.ToolCallID = l.remapID(p.ToolCallID, byCall)
				names[p.ToolCallID] = p.ToolName
			case *instanceai.ToolCall:
				p.ToolCallID = l.remapID(p.ToolCallID, byCall)
				res.calls = append(res.calls, stepCall{id: p.ToolCallID, name: p.ToolName, args: p.Args})
			case *instanceai.ToolError:
				p.ToolCallID = l.remapID(p.ToolCallID, byCall)
				res.calls = append(res.calls, stepCall{id: p.ToolCallID, name: names[p.ToolCallID], argsErr: p.Error})
			}
			if err := l.emit(ctx, ev); err != nil {
				return err
			}
			emitted = true
		}
		return nil
	}
	sse := newStreamReader(body, a.cfg.MaxEventBytes)
	done := false
	for !done {
		idle.Reset(a.cfg.RequestTimeout)
		text, err := sse.NextData()
		data := []byte(text)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			if errors.Is(context.Cause(actx), errIdleTimeout) {
				return nil, a.transportFailure(errIdleTimeout)
			}
			if errors.Is(err, ssestream.ErrLineTooLong) || errors.Is(err, ssestream.ErrFrameTooLarge) {
				// Not retried: the same request would get the same chunk.
				return nil, a.failure(instanceai.CodeEventTooLarge, 0,
					fmt.Sprintf("The model server at %s sent one stream chunk larger than %s; the run was stopped and what came before is kept.",
						a.cfg.BaseURL, bound.Named(a.cfg.MaxEventBytes)),
					fmt.Sprintf("reading the stream of POST %s: a frame passed %d bytes (the event's bound and %d bytes for its envelope): %v",
						a.chatURL, bound.Stream(a.cfg.MaxEventBytes), bound.Envelope, err))
			}
			pe := a.failure(CodeStreamInterrupted, 0,
				fmt.Sprintf("The connection to the model server at %s broke while the answer was streaming. What arrived so far is kept; try again.", a.cfg.BaseURL),
				fmt.Sprintf("reading the stream of POST %s: %v", a.chatURL, err))
			if !emitted && retryableTransport(err) {
				return nil, &retryable{err: pe}
			}
			return nil, pe
		}
		done = string(bytes.TrimSpace(data)) == chunk.DoneMarker
		evs, perr := tr.Push(data)
		if perr != nil {
			var se *chunk.StreamError
			if errors.As(perr, &se) {
				msg := se.Message
				if msg == "" {
					msg = "no message"
				}
				return nil, a.failure(CodeUpstreamError, 0,
					fmt.Sprintf("The model server at %s reported an error while answering: %q. Try again; if it keeps failing, check the server's logs.", a.cfg.BaseURL, excerpt(msg, 300)),
					fmt.Sprintf("error object in the stream of POST %s: %s", a.chatURL, data))
			}
			return nil, a.failure(CodeInvalidResponse, 0,
				fmt.Sprintf("The model server at %s sent a stream this agent cannot read. Check that %s is an OpenAI-compatible API.", a.cfg.BaseURL, a.cfg.BaseURL),
				fmt.Sprintf("%v; payload: %s", perr, data))
		}
		if err := handle(evs); err != nil {
			return nil, err
		}
	}
	if !done {
		if tr.FinishReason() == "" {
			pe := a.failure(CodeStreamInterrupted, 0,
				fmt.Sprintf("The model server at %s closed the stream before the answer was complete. What arrived so far is kept; try again.", a.cfg.BaseURL),
				fmt.Sprintf("the stream of POST %s ended without a finish_reason or [DONE]", a.chatURL))
			if !emitted {
				return nil, &retryable{err: pe}
			}
			return nil, pe
		}
		// A finish_reason without [DONE]: some servers close right away.
		if err := handle(tr.Finish()); err != nil {
			return nil, err
		}
	}
	res.finish = tr.FinishReason()
	res.usage = tr.Usage()
	if u := res.usage; u.PromptTokens != 0 || u.CompletionTokens != 0 || u.TotalTokens != 0 {
		l.run.AddUsage(instanceai.TokenUsage{Provider: a.cfg.Provider, Model: a.cfg.Model,
			InputTokens: int64(u.PromptTokens), OutputTokens: int64(u.CompletionTokens), TotalTokens: int64(u.TotalTokens)})
	}
	return res, nil
}

// encodeRequest encodes a request with the configured extra options.
func (a *Agent) encodeRequest(req chatRequest) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil || len(a.options) == 0 {
		return body, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	for k, v := range a.options {
		fields[k] = v
	}
	return json.Marshal(fields)
}
