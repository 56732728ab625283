package servers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// client is shared by every publisher: keep-alive connections, enough of
// them for the concurrent publishers.
var client = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}

// Post sends body as JSON to path and decodes a JSON answer into out (when
// not nil). header adds request headers.
func (s *Server) Post(path string, body []byte, out any) error {
	return s.PostWith(path, body, nil, out)
}

// PostWith is Post with request headers.
func (s *Server) PostWith(path string, body []byte, header map[string]string, out any) error {
	req, err := http.NewRequest(http.MethodPost, s.Base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if s.Kind == Centrifugo {
		req.Header.Set("X-API-Key", CentrifugoAPIKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// Delete sends DELETE path and checks that it succeeded.
func (s *Server) Delete(path string) error {
	req, err := http.NewRequest(http.MethodDelete, s.Base+path, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("DELETE %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return nil
}

// Get decodes the JSON answer of GET path into out.
func (s *Server) Get(path string, out any) error {
	b, err := s.GetBody(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// GetBody is the answer of GET path.
func (s *Server) GetBody(path string) ([]byte, error) {
	resp, err := client.Get(s.Base + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// Publish sends one message with data to channel, the way each peer's
// user publishes: a POST of the body to the Joe server, a publish command
// to Centrifugo's HTTP API. Threadline's producers publish into a run
// (see Producer).
func (s *Server) Publish(channel string, data []byte) error {
	switch s.Kind {
	case Joe:
		return s.Post("/publish", data, nil)
	case Centrifugo:
		cmd, _ := json.Marshal(map[string]any{"channel": channel, "data": json.RawMessage(data)})
		var reply struct {
			Error *struct{ Message string } `json:"error"`
		}
		if err := s.Post("/api/publish", cmd, &reply); err != nil {
			return err
		}
		if reply.Error != nil {
			return fmt.Errorf("centrifugo publish: %s", reply.Error.Message)
		}
		return nil
	}
	return fmt.Errorf("%s has no publish endpoint", s.Kind)
}

// CentrifugoFill publishes n messages to channel's history through the
// batch API (not timed; it only fills the history a recovery reads) and
// returns the history's epoch and last offset.
func (s *Server) CentrifugoFill(channel string, n int, data func(i int) []byte) (epoch string, offset int64, err error) {
	const perBatch = 1000
	for i := 0; i < n; i += perBatch {
		var cmds []map[string]any
		for j := i; j < min(n, i+perBatch); j++ {
			cmds = append(cmds, map[string]any{"publish": map[string]any{"channel": channel, "data": json.RawMessage(data(j))}})
		}
		body, _ := json.Marshal(map[string]any{"commands": cmds})
		if err := s.Post("/api/batch", body, nil); err != nil {
			return "", 0, err
		}
	}
	var h struct {
		Result struct {
			Epoch  string `json:"epoch"`
			Offset int64  `json:"offset"`
		} `json:"result"`
	}
	body, _ := json.Marshal(map[string]any{"channel": channel, "limit": 0})
	if err := s.Post("/api/history", body, &h); err != nil {
		return "", 0, err
	}
	return h.Result.Epoch, h.Result.Offset, nil
}

// Producer is an external producer of Threadline's publish API: one run
// of a thread, appended to one event per request, numbered in order (so
// one request at a time: a producer's sequence allows no gap).
type Producer struct {
	s      *Server
	thread string
	run    string
	seq    int
}

// StartRun starts a run on thread (which must exist) through the publish
// API.
func (s *Server) StartRun(thread string) (*Producer, error) {
	var out struct {
		RunID string `json:"runId"`
	}
	if err := s.Post("/publish/threads/"+thread+"/runs", []byte(`{}`), &out); err != nil {
		return nil, err
	}
	return &Producer{s: s, thread: thread, run: out.RunID}, nil
}

// Append sends one text delta, answered once Threadline took it.
func (p *Producer) Append(text string) error {
	body, _ := json.Marshal(map[string]any{"type": "text-delta", "payload": map[string]string{"text": text}})
	err := p.s.PostWith("/publish/threads/"+p.thread+"/runs/"+p.run+"/events", body, map[string]string{
		"Producer-Id": "bench", "Producer-Epoch": "0", "Producer-Seq": fmt.Sprint(p.seq)}, nil)
	if err == nil {
		p.seq++
	}
	return err
}

// Finish ends the run completed.
func (p *Producer) Finish() error {
	return p.s.Post("/publish/threads/"+p.thread+"/runs/"+p.run+"/finish", []byte(`{"status":"completed"}`), nil)
}
