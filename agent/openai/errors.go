package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/threadline/threadline/instanceai"
)

// Error codes of the ProviderErrors the agent returns.
const (
	CodeConnectionFailed  = "connection_failed"
	CodeUnauthorized      = "unauthorized"
	CodeModelNotFound     = "model_not_found"
	CodeNotFound          = "not_found"
	CodeRateLimited       = "rate_limited"
	CodeUpstreamError     = "upstream_error"
	CodeBadRequest        = "bad_request"
	CodeContextLength     = "context_length_exceeded"
	CodeMaxTokens         = "max_tokens"
	CodeContentFilter     = "content_filter"
	CodeStreamInterrupted = "stream_interrupted"
	CodeInvalidResponse   = "invalid_response"
	CodeTimeout           = "timeout"
	CodeStepLimit         = "step_limit"
	CodeToolFailed        = "tool_failed"
)

// maxDetails bounds the upstream text an error's technical details repeat.
const maxDetails = 2048

// excerpt shortens s to at most n bytes on a rune boundary.
func excerpt(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// upstreamError is what an error body says, as far as it can be read.
type upstreamError struct {
	msg string
	// code is the error's code as sent, quotes dropped: a string from
	// OpenAI ("model_not_found"), a number from llama-server and vLLM
	// (the HTTP status again). "" when absent or null.
	code string
	// typ is the error's type ("invalid_request_error", llama-server's
	// "exceed_context_size_error").
	typ string
}

// upstreamMessage extracts the human message of an error body: OpenAI's,
// Ollama's and llama-server's {"error":{"message"}}, {"error":"…"} (LM
// Studio, older llama.cpp), or vLLM's {"object":"error","message"}. Zero
// when none is found.
func upstreamMessage(body []byte) upstreamError {
	var v struct {
		Error   json.RawMessage `json:"error"`
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Code    json.RawMessage `json:"code"`
	}
	if json.Unmarshal(body, &v) != nil {
		return upstreamError{}
	}
	if len(v.Error) > 0 {
		var s string
		if json.Unmarshal(v.Error, &s) == nil {
			return upstreamError{msg: s}
		}
		var o struct {
			Message string          `json:"message"`
			Type    string          `json:"type"`
			Code    json.RawMessage `json:"code"`
		}
		if json.Unmarshal(v.Error, &o) == nil {
			return upstreamError{msg: o.Message, code: rawCode(o.Code), typ: o.Type}
		}
	}
	return upstreamError{msg: v.Message, code: rawCode(v.Code), typ: v.Type}
}

// rawCode renders an error code sent as a string or a number.
func rawCode(raw json.RawMessage) string {
	c := strings.Trim(strings.TrimSpace(string(raw)), `"`)
	if c == "null" {
		return ""
	}
	return c
}

// contextExceeded reports whether an error says the prompt does not fit the
// model's context: OpenAI's code, llama-server's type, or the wording of
// servers that send neither (vLLM: "maximum context length", llama-server:
// "exceeds the available context size").
func (u upstreamError) contextExceeded() bool {
	if u.code == CodeContextLength || u.typ == "exceed_context_size_error" {
		return true
	}
	m := strings.ToLower(u.msg)
	return strings.Contains(m, "context length") || strings.Contains(m, "maximum context") ||
		strings.Contains(m, "context size") || strings.Contains(m, "context window")
}

// modelMissing reports whether an error says the requested model does not
// exist. OpenAI answers 404 with code model_not_found; llama-server in
// router mode answers 400 "model 'x' not found", and Ollama 404
// "model \"x\" not found".
func (u upstreamError) modelMissing() bool {
	if u.code == CodeModelNotFound {
		return true
	}
	m := strings.ToLower(u.msg)
	return strings.Contains(m, "model") && strings.Contains(m, "not found")
}

// failure builds the ProviderError of a call, with the API key scrubbed
// from everything it repeats.
func (a *Agent) failure(code string, status int, message, details string) *instanceai.ProviderError {
	return &instanceai.ProviderError{
		Message:    a.scrub(message),
		Code:       code,
		Provider:   a.cfg.Provider,
		StatusCode: status,
		Details:    a.scrub(excerpt(details, maxDetails)),
	}
}

// scrub removes the API key from text that came from upstream or from an
// error that may quote the request.
func (a *Agent) scrub(s string) string {
	if a.cfg.APIKey != "" && len(a.cfg.APIKey) >= 4 {
		s = strings.ReplaceAll(s, a.cfg.APIKey, "[redacted]")
	}
	return s
}

// statusFailure turns a non-200 answer into a ProviderError with guidance.
func (a *Agent) statusFailure(status int, header http.Header, body []byte, models []string) *instanceai.ProviderError {
	up := upstreamMessage(body)
	msg := up.msg
	details := fmt.Sprintf("HTTP %d from POST %s: %s", status, a.chatURL, string(body))
	said := ""
	if msg != "" {
		said = fmt.Sprintf(" It said: %q.", excerpt(msg, 300))
	}
	where := a.cfg.BaseURL
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		hint := "Check the API key configured for this agent."
		if a.cfg.APIKey == "" {
			hint = "No API key is configured for this agent; this server needs one."
		}
		return a.failure(CodeUnauthorized, status, fmt.Sprintf("The model server at %s refused the request (HTTP %d).%s %s", where, status, said, hint), details)
	case status == http.StatusNotFound && (up.modelMissing() || strings.Contains(strings.ToLower(string(body)), strings.ToLower(a.cfg.Model))),
		status == http.StatusBadRequest && up.modelMissing():
		hint := "Check the model name, or load/pull the model on the server."
		if len(models) > 0 {
			hint = fmt.Sprintf("Check the model name; the server lists: %s.", strings.Join(models, ", "))
		}
		return a.failure(CodeModelNotFound, status, fmt.Sprintf("The model %q is not available at %s (HTTP %d).%s %s", a.cfg.Model, where, status, said, hint), details)
	case status == http.StatusNotFound:
		return a.failure(CodeNotFound, status, fmt.Sprintf("%s answered 404 Not Found.%s Check the base URL: it must end at the API root (for example http://localhost:11434/v1), so that %s exists.", a.chatURL, said, a.chatURL), details)
	case status == http.StatusTooManyRequests:
		return a.failure(CodeRateLimited, status, fmt.Sprintf("The model server at %s is rate limiting requests (HTTP 429) and retries did not get through.%s Wait a moment and try again, or check the account's quota.", where, said), details)
	case status >= 500:
		return a.failure(CodeUpstreamError, status, fmt.Sprintf("The model server at %s failed (HTTP %d) and retries did not help.%s Try again in a minute; if it keeps failing, check the server's logs or status page.", where, status, said), details)
	case up.contextExceeded():
		return a.failure(CodeContextLength, status, fmt.Sprintf("The conversation is too long for the model's context window.%s Start a new thread, or use a model with a larger context.", said), details)
	default:
		return a.failure(CodeBadRequest, status, fmt.Sprintf("The model server at %s rejected the request (HTTP %d).%s Check the model name and that the server supports streaming chat completions with tools.", where, status, said), details)
	}
}

// rateLimitTooLong is the error for a Retry-After beyond the wait bound.
func (a *Agent) rateLimitTooLong(wait time.Duration, body []byte) *instanceai.ProviderError {
	at := time.Now().Add(wait).UTC().Format(time.RFC3339)
	return a.failure(CodeRateLimited, http.StatusTooManyRequests,
		fmt.Sprintf("The model server at %s is rate limiting requests and asks to wait %s. Try again after %s.", a.cfg.BaseURL, wait.Round(time.Second), at),
		fmt.Sprintf("HTTP 429 from POST %s, Retry-After %s: %s", a.chatURL, wait.Round(time.Second), string(body)))
}

// transportFailure turns an error of the HTTP exchange into a ProviderError.
func (a *Agent) transportFailure(err error) *instanceai.ProviderError {
	details := fmt.Sprintf("POST %s: %v", a.chatURL, err)
	switch {
	case errors.Is(err, errIdleTimeout):
		return a.failure(CodeTimeout, 0, fmt.Sprintf("The model server at %s sent nothing for %s. It may be overloaded or still loading the model; try again, or raise the timeout (--openai-timeout).", a.cfg.BaseURL, a.cfg.RequestTimeout), details)
	case errors.Is(err, syscall.ECONNREFUSED):
		return a.failure(CodeConnectionFailed, 0, fmt.Sprintf("Could not connect to the model server at %s (connection refused). Is the server running at that address?", a.cfg.BaseURL), details)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return a.failure(CodeConnectionFailed, 0, fmt.Sprintf("Could not resolve the host of %s. Check the base URL.", a.cfg.BaseURL), details)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return a.failure(CodeTimeout, 0, fmt.Sprintf("The model server at %s did not answer in time. Try again, check that it is reachable, or raise the timeout (--openai-timeout).", a.cfg.BaseURL), details)
	}
	return a.failure(CodeConnectionFailed, 0, fmt.Sprintf("The connection to the model server at %s failed. Check that the server is running and reachable, then try again.", a.cfg.BaseURL), details)
}

// retryableTransport reports whether a transport error is worth another
// attempt: the connection was reset or closed before any answer (a server
// restarting, a proxy dropping an idle connection). A refused connection is
// not: nothing listens there, and waiting will not change that soon.
func retryableTransport(err error) bool {
	if errors.Is(err, errIdleTimeout) || errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")
}
