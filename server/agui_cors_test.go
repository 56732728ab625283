package server_test

import (
	"net/http"
	"testing"

	"github.com/threadline/threadline/server"
	"github.com/threadline/threadline/server/servertest"
)

func TestCORS(t *testing.T) {
	store := servertest.OpenStore(t, "memory")
	srv := servertest.Start(t, store, servertest.Options{
		Config: server.Config{AllowedOrigins: []string{"https://app.example.com"}, AgentName: "script"}})

	send := func(method, path, origin string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}

	for _, path := range []string{"/run-agent", "/health", "/instance-ai/chat/t1"} {
		res := send(http.MethodOptions, path, "https://app.example.com", preflight)
		if res.StatusCode != http.StatusNoContent || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
			res.Header.Get("Access-Control-Allow-Methods") == "" || res.Header.Get("Access-Control-Allow-Headers") != "content-type" {
			t.Fatalf("preflight %s: %d %v", path, res.StatusCode, res.Header)
		}
	}
	res := send(http.MethodOptions, "/run-agent", "https://evil.example.com", preflight)
	if res.Header.Get("Access-Control-Allow-Origin") != "" || res.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Fatalf("preflight from a foreign origin allowed: %v", res.Header)
	}
	res = send(http.MethodGet, "/health", "https://app.example.com", nil)
	if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Fatalf("GET /health: %d %v", res.StatusCode, res.Header)
	}
	res = send(http.MethodGet, "/health", "https://evil.example.com", nil)
	if res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("foreign origin got CORS headers: %v", res.Header)
	}

	status, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Agents map[string]struct {
			Status string `json:"status"`
		} `json:"agents"`
		Config struct {
			AllowedOrigins []string `json:"allowed_origins"`
		} `json:"config"`
	}
	decodeJSON(t, status, &st)
	if st.Agents["script"].Status != "ready" || len(st.Config.AllowedOrigins) != 1 {
		t.Fatalf("status: %+v", st)
	}

	// No configured origins: no CORS headers at all.
	plain := servertest.Start(t, store, servertest.Options{})
	req, _ := http.NewRequest(http.MethodGet, plain.URL+"/health", nil)
	req.Header.Set("Origin", "https://app.example.com")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("without allowed origins: %d %v", res.StatusCode, res.Header)
	}
}
