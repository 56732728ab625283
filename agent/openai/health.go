package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// healthResponse is the seed's LLM health answer, plus model_available when
// the server's model list could be read.
type healthResponse struct {
	Status         string   `json:"status"`
	LLMEndpoint    string   `json:"llm_endpoint"`
	LLMModel       string   `json:"llm_model"`
	IsLocal        bool     `json:"is_local"`
	Timestamp      string   `json:"timestamp"`
	ResponseTimeMS *float64 `json:"response_time_ms,omitempty"`
	ModelAvailable *bool    `json:"model_available,omitempty"`
	Error          string   `json:"error,omitempty"`
}

// HealthHandler serves GET /llm/health: 200 {"status":"available",…} when
// the server answers its model list within HealthTimeout, 503
// {"status":"unavailable",…,"error"} otherwise. Listing models is the
// cheapest authenticated request every OpenAI-compatible server has, and
// it costs no tokens. The answer is that of a probe at most HealthCacheTTL
// old (its timestamp says when it ran), and requests that come while a
// probe runs wait for it: however many clients poll the public endpoint,
// the model server gets at most one probe per HealthCacheTTL.
func (a *Agent) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h := a.health.Get(a.cfg.HealthCacheTTL, a.probeHealth)
		status, resp := h.status, h.resp
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(resp)
		}
	})
}

// probeHealth lists the server's models once, for /llm/health. It runs on
// a context of its own: the requests that share it may go before it ends.
func (a *Agent) probeHealth() healthAnswer {
	started := time.Now()
	models, parsed, err := a.listModels(context.Background(), a.cfg.HealthTimeout)
	elapsed := float64(time.Since(started).Microseconds()) / 1000
	resp := healthResponse{LLMEndpoint: a.cfg.BaseURL, LLMModel: a.cfg.Model, IsLocal: a.local,
		Timestamp: time.Now().UTC().Format(time.RFC3339)}
	if err != nil {
		resp.Status, resp.Error = "unavailable", a.scrub(err.Error())
		return healthAnswer{http.StatusServiceUnavailable, resp}
	}
	resp.Status, resp.ResponseTimeMS = "available", &elapsed
	if parsed {
		found := hasModel(models, a.cfg.Model)
		resp.ModelAvailable = &found
	}
	return healthAnswer{http.StatusOK, resp}
}

// healthAnswer is one probe's answer: the status code and the body.
type healthAnswer struct {
	status int
	resp   healthResponse
}

// probeError is a failed model-list probe: its message (the health
// answer's error) and what caused it, for CheckLLM's guidance.
type probeError struct {
	msg string
	// cause is CodeTimeout, CodeConnectionFailed, CodeUnauthorized,
	// CodeUpstreamError (an answer other than 200; status and body say
	// which) or "" (cancelled, unreadable).
	cause  string
	status int
	body   string
	// details is the technical account: the request and what came back.
	details string
}

func (e *probeError) Error() string { return e.msg }

// listModels asks GET {BaseURL}/models. It returns the model ids, whether
// the answer was a list it could read, and a *probeError with a human
// message when the server did not answer 200 within timeout.
func (a *Agent) listModels(ctx context.Context, timeout time.Duration) (ids []string, parsed bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.modelsURL, nil)
	if err != nil {
		return nil, false, err
	}
	if a.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+a.cfg.APIKey)
	}
	timedOut := func(details string) error {
		return &probeError{msg: fmt.Sprintf("LLM service did not respond within %s", timeout), cause: CodeTimeout, details: details}
	}
	resp, err := a.client.Do(req)
	if err != nil {
		details := a.scrub(fmt.Sprintf("GET %s: %v", a.modelsURL, err))
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			return nil, false, timedOut(details)
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, false, &probeError{msg: "the health check was cancelled", details: details}
		}
		pe := a.transportFailure(err)
		return nil, false, &probeError{msg: pe.Message, cause: pe.Code, details: details}
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	bad := func(cause, msg string) error {
		return &probeError{msg: msg, cause: cause, status: resp.StatusCode, body: a.scrub(excerpt(string(body), maxDetails)),
			details: a.scrub(excerpt(fmt.Sprintf("HTTP %d from GET %s: %s", resp.StatusCode, a.modelsURL, body), maxDetails))}
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, false, bad(CodeUnauthorized, fmt.Sprintf("the LLM service at %s refused the API key (HTTP %d)", a.cfg.BaseURL, resp.StatusCode))
	case resp.StatusCode != http.StatusOK:
		msg := upstreamMessage(body).msg
		if msg != "" {
			msg = ": " + excerpt(msg, 200)
		}
		return nil, false, bad(CodeUpstreamError, fmt.Sprintf("the LLM service at %s answered HTTP %d to GET /models%s", a.cfg.BaseURL, resp.StatusCode, msg))
	case rerr != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, false, timedOut(fmt.Sprintf("reading the answer of GET %s: %v", a.modelsURL, rerr))
		}
		return nil, false, &probeError{msg: fmt.Sprintf("reading the model list of %s: %v", a.cfg.BaseURL, rerr),
			details: fmt.Sprintf("GET %s: %v", a.modelsURL, rerr)}
	}
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &list) != nil || list.Data == nil {
		return nil, false, nil
	}
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	return ids, true, nil
}

// hasModel reports whether a model list offers model. Ollama lists a model
// pulled without a tag as "name:latest" and answers to the bare name too.
func hasModel(ids []string, model string) bool {
	for _, id := range ids {
		if id == model || id == model+":latest" {
			return true
		}
	}
	return false
}

// parseIP is net.ParseIP for a URL host (which may hold an IPv6 zone).
func parseIP(host string) net.IP {
	host, _, _ = strings.Cut(host, "%")
	return net.ParseIP(host)
}
