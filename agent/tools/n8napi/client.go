package n8napi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// client makes the public-API requests for every tool of one Config.
type client struct {
	apiBase string // …/api/v1, no trailing slash
	display string // the instance URL for messages, password redacted
	apiKey  string
	http    *http.Client
	timeout time.Duration
}

func newClient(cfg Config) (*client, error) {
	base, err := normaliseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, errors.New("n8napi: APIKey is empty; create one in n8n under Settings > n8n API")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("n8napi: Timeout must not be negative (got %s)", cfg.Timeout)
	}
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{
			// Go re-sends custom headers such as X-N8N-API-KEY on a redirect,
			// even to another host; and an http→https redirect turns a POST
			// into a GET. Surfacing the redirect is safer than following it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	display := strings.TrimSuffix(base, "/api/v1")
	if u, err := url.Parse(display); err == nil {
		display = u.Redacted()
	}
	return &client{apiBase: base, display: display, apiKey: cfg.APIKey, http: hc, timeout: timeout}, nil
}

// call describes one request.
type call struct {
	tool   string
	method string
	path   string // below /api/v1, already escaped
	query  url.Values
	body   any // nil: no body
	// notFound says what a 404 means for this call.
	notFound string
	// notAllowed, when set, says what a 405 means for this call.
	notAllowed string
}

// do performs c and returns the response body, which is JSON. The request is
// bound to ctx and to the configured timeout; the body read is bounded.
func (cl *client) do(ctx context.Context, c call) (json.RawMessage, error) {
	target := cl.apiBase + c.path
	if len(c.query) > 0 {
		target += "?" + c.query.Encode()
	}
	var body io.Reader
	if c.body != nil {
		b, err := json.Marshal(c.body)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding the request: %w", c.tool, err)
		}
		body = bytes.NewReader(b)
	}

	rctx, cancel := context.WithTimeout(ctx, cl.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, c.method, target, body)
	if err != nil {
		return nil, fmt.Errorf("%s: building the request: %w", c.tool, cl.redact(err))
	}
	req.Header.Set("X-N8N-API-KEY", cl.apiKey)
	req.Header.Set("Accept", "application/json")
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}

	resp, err := cl.http.Do(req)
	if err != nil {
		return nil, cl.transportError(ctx, rctx, c, err)
	}
	defer resp.Body.Close()

	data, tooBig, err := readBounded(resp.Body, MaxResponseBytes)
	if err != nil {
		return nil, cl.transportError(ctx, rctx, c, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, cl.statusError(c, resp, data)
	}
	if tooBig {
		return nil, fmt.Errorf("%s: n8n's response is larger than %d MiB; narrow the request (e.g. a smaller limit)",
			c.tool, MaxResponseBytes>>20)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%s: n8n at %s answered %s %s with %d but not with JSON (Content-Type %q); "+
			"is BaseURL the n8n instance itself, with the public API enabled?",
			c.tool, cl.display, c.method, "/api/v1"+c.path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return json.RawMessage(data), nil
}

// readBounded reads at most limit bytes of r; tooBig reports that there was
// more. It stops at limit+1 so an endless body cannot hold the call.
func readBounded(r io.Reader, limit int64) (data []byte, tooBig bool, err error) {
	data, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// transportError explains a failure to get a response at all.
func (cl *client) transportError(parent, rctx context.Context, c call, err error) error {
	// The caller's own cancellation or deadline wins: report it as such, so
	// errors.Is(err, context.Canceled) holds for a cancelled run.
	if perr := parent.Err(); perr != nil {
		return fmt.Errorf("%s: %s %s aborted: %w", c.tool, c.method, "/api/v1"+c.path, perr)
	}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: n8n at %s did not answer %s %s within %s; it may be overloaded or unreachable",
			c.tool, cl.display, c.method, "/api/v1"+c.path, cl.timeout)
	}
	err = cl.redact(err)
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("%s: cannot connect to n8n at %s (connection refused); is n8n running at that URL?",
			c.tool, cl.display)
	case errors.As(err, &dnsErr):
		return fmt.Errorf("%s: cannot resolve the n8n host of %s (%s); check BaseURL", c.tool, cl.display, dnsErr.Err)
	}
	return fmt.Errorf("%s: %s %s on n8n at %s failed: %w; is n8n running at that URL?",
		c.tool, c.method, "/api/v1"+c.path, cl.display, err)
}

// redact unwraps a *url.Error (its text repeats the URL) and removes the API
// key should any lower layer have echoed it.
func (cl *client) redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if strings.Contains(err.Error(), cl.apiKey) {
		return errors.New(strings.ReplaceAll(err.Error(), cl.apiKey, "[redacted]"))
	}
	return err
}

// statusError turns a non-2xx response into an error carrying the status,
// n8n's message and what to do about it.
func (cl *client) statusError(c call, resp *http.Response, data []byte) error {
	msg := upstreamMessage(data)
	if cl.apiKey != "" {
		msg = strings.ReplaceAll(msg, cl.apiKey, "[redacted]")
	}
	var hint string
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized:
		hint = "check the n8n API key (Settings > n8n API): it may be wrong, expired or revoked"
	case code == http.StatusForbidden:
		hint = "the API key is valid but lacks the scope for this operation, or its user may not access this workflow; grant the scope in Settings > n8n API"
	case code == http.StatusNotFound:
		hint = c.notFound
	case code == http.StatusMethodNotAllowed && c.notAllowed != "":
		hint = c.notAllowed
	case code == http.StatusMethodNotAllowed:
		hint = "this n8n release does not offer that operation in its public API; upgrading n8n may add it"
	case code == http.StatusConflict:
		hint = "the workflow's state conflicts with the request; read it with get_workflow and retry"
	case code == http.StatusTooManyRequests:
		hint = "n8n is rate limiting; retry later"
	case code >= 300 && code < 400:
		hint = fmt.Sprintf("n8n redirected to %q; set BaseURL to the instance's final URL (e.g. its https address)",
			resp.Header.Get("Location"))
	case code >= 500:
		hint = "n8n failed internally; check the n8n logs, and retry if it was transient"
	case code >= 400:
		hint = "n8n rejected the request; correct the arguments as its message says"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: n8n answered %s %s with %d %s", c.tool, c.method, "/api/v1"+c.path,
		resp.StatusCode, http.StatusText(resp.StatusCode))
	if msg != "" {
		fmt.Fprintf(&b, ": %s", msg)
	}
	if hint != "" {
		fmt.Fprintf(&b, " (%s)", hint)
	}
	return &StatusError{StatusCode: resp.StatusCode, Message: msg, text: b.String()}
}

// StatusError is the error of a call n8n answered with a non-2xx status.
type StatusError struct {
	StatusCode int
	// Message is n8n's message ({"message": ...}), or the start of a
	// non-JSON body; it may be empty.
	Message string
	text    string
}

func (e *StatusError) Error() string { return e.text }

// maxMessage bounds how much of an error body is quoted back.
const maxMessage = 500

// upstreamMessage extracts n8n's error message: {"message": "..."} from the
// public API's error handler, else a short, single-line excerpt of the body
// (a proxy's error page, say).
func upstreamMessage(data []byte) string {
	var body struct {
		Message json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(data, &body); err == nil && len(body.Message) > 0 {
		var s string
		if json.Unmarshal(body.Message, &s) == nil {
			return clip(s)
		}
		if string(body.Message) != "null" {
			return clip(string(body.Message))
		}
	}
	return clip(string(data))
}

// clip makes s one line of at most maxMessage runes.
func clip(s string) string {
	s = strings.Join(strings.Fields(strings.ToValidUTF8(s, "?")), " ")
	if r := []rune(s); len(r) > maxMessage {
		s = string(r[:maxMessage]) + "…"
	}
	return s
}
