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
// it costs no tokens.
func (a *Agent) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		started := time.Now()
		models, parsed, err := a.listModels(r.Context(), a.cfg.HealthTimeout)
		elapsed := float64(time.Since(started).Microseconds()) / 1000
		resp := healthResponse{LLMEndpoint: a.cfg.BaseURL, LLMModel: a.cfg.Model, IsLocal: a.local,
			Timestamp: time.Now().UTC().Format(time.RFC3339)}
		status := http.StatusOK
		if err != nil {
			status = http.StatusServiceUnavailable
			resp.Status, resp.Error = "unavailable", a.scrub(err.Error())
		} else {
			resp.Status, resp.ResponseTimeMS = "available", &elapsed
			if parsed {
				found := false
				for _, m := range models {
					if m == a.cfg.Model {
						found = true
						break
					}
				}
				resp.ModelAvailable = &found
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(resp)
		}
	})
}

// listModels asks GET {BaseURL}/models. It returns the model ids, whether
// the answer was a list it could read, and a human error when the server
// did not answer 200 within timeout.
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
	resp, err := a.client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
			return nil, false, fmt.Errorf("LLM service did not respond within %s", timeout)
		case errors.Is(ctx.Err(), context.Canceled):
			return nil, false, errors.New("the health check was cancelled")
		}
		return nil, false, errors.New(a.transportFailure(err).Message)
	}
	defer resp.Body.Close()
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, false, fmt.Errorf("the LLM service at %s refused the API key (HTTP %d)", a.cfg.BaseURL, resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		msg := upstreamMessage(body).msg
		if msg != "" {
			msg = ": " + excerpt(msg, 200)
		}
		return nil, false, fmt.Errorf("the LLM service at %s answered HTTP %d to GET /models%s", a.cfg.BaseURL, resp.StatusCode, msg)
	case rerr != nil:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, false, fmt.Errorf("LLM service did not respond within %s", timeout)
		}
		return nil, false, fmt.Errorf("reading the model list of %s: %v", a.cfg.BaseURL, rerr)
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

// parseIP is net.ParseIP for a URL host (which may hold an IPv6 zone).
func parseIP(host string) net.IP {
	host, _, _ = strings.Cut(host, "%")
	return net.ParseIP(host)
}
