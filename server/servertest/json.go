package servertest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/threadline/threadline/instanceai"
)

// Do sends a request with a JSON body ("" sends none) to path and decodes
// the JSON object it answers with (nil for an empty answer). It fails the
// test only when the request cannot be sent or the answer is not JSON:
// the status is the caller's to judge.
func (s *Server) Do(method, path, body string) (status int, answer map[string]any) {
	s.t.Helper()
	status, v := s.DoValue(method, path, body)
	if v == nil {
		return status, nil
	}
	answer, ok := v.(map[string]any)
	if !ok {
		s.t.Fatalf("%s %s: %d, answer %v is not a JSON object", method, path, status, v)
	}
	return status, answer
}

// DoInto sends a request like Do and, when the status is 2xx and out is
// not nil, decodes the answer into out (failing the test if it does not
// decode). It returns the status.
func (s *Server) DoInto(method, path, body string, out any) int {
	s.t.Helper()
	status, raw := s.send(method, path, body)
	if out != nil && status < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			s.t.Fatalf("%s %s: %d %q: %v", method, path, status, raw, err)
		}
	}
	return status
}

// DoValue is Do for answers of any JSON shape (a list, say): it returns the
// status and the decoded answer (nil for an empty one), failing the test on
// an answer that is not JSON.
func (s *Server) DoValue(method, path, body string) (status int, answer any) {
	s.t.Helper()
	status, raw := s.send(method, path, body)
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &answer); err != nil {
			s.t.Fatalf("%s %s: %d, non-JSON answer %q", method, path, status, raw)
		}
	}
	return status, answer
}

func (s *Server) send(method, path, body string) (int, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := s.Client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		s.t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return res.StatusCode, raw
}

// Chat posts message to the thread and returns the run's id; anything but
// 200 with a runId fails the test.
func (s *Server) Chat(thread, message string) (runID string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"message": message})
	code, out := s.Do(http.MethodPost, "/instance-ai/chat/"+thread, string(body))
	if code != http.StatusOK {
		s.t.Fatalf("chat %q on %s: %d %v", message, thread, code, out)
	}
	runID, _ = out["runId"].(string)
	if runID == "" {
		s.t.Fatalf("chat %q on %s: answer has no runId: %v", message, thread, out)
	}
	return runID
}

// Cancel cancels the thread's active run; anything but 200 {"ok":true}
// fails the test.
func (s *Server) Cancel(thread string) {
	s.t.Helper()
	if code, out := s.Do(http.MethodPost, "/instance-ai/chat/"+thread+"/cancel", ""); code != http.StatusOK || out["ok"] != true {
		s.t.Fatalf("cancel %s: %d %v", thread, code, out)
	}
}

// Confirm answers the confirmation request with a JSON body such as
// {"approved":true} and returns the answer; anything but 200 fails the
// test.
func (s *Server) Confirm(requestID, body string) map[string]any {
	s.t.Helper()
	code, out := s.Do(http.MethodPost, "/instance-ai/confirm/"+requestID, body)
	if code != http.StatusOK {
		s.t.Fatalf("confirm %s with %s: %d %v", requestID, body, code, out)
	}
	return out
}

// Thread is a thread as the native API describes it.
type Thread struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Archived  bool      `json:"archived"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// ThreadPage is one page of GET /instance-ai/threads.
type ThreadPage struct {
	Threads []Thread `json:"threads"`
	Page    int      `json:"page"`
	Limit   int      `json:"limit"`
	HasMore bool     `json:"hasMore"`
}

// CreateThread posts body ("" for none, or {"id":…,"title":…}) to
// /instance-ai/threads and returns the thread; a status other than
// wantStatus (201 for a new thread, 200 for one that exists) fails the
// test.
func (s *Server) CreateThread(body string, wantStatus int) Thread {
	s.t.Helper()
	var th Thread
	if code := s.DoInto(http.MethodPost, "/instance-ai/threads", body, &th); code != wantStatus {
		s.t.Fatalf("create thread %s: %d, want %d", body, code, wantStatus)
	}
	return th
}

// EnsureThread creates the thread with that id unless it exists; any
// status but 200 or 201 fails the test.
func (s *Server) EnsureThread(id string) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]string{"id": id})
	if code, out := s.Do(http.MethodPost, "/instance-ai/threads", string(body)); code != http.StatusOK && code != http.StatusCreated {
		s.t.Fatalf("create thread %s: %d %v", id, code, out)
	}
}

// ListThreads returns the page of threads query selects ("" or
// "?page=2&limit=5", say); anything but 200 fails the test.
func (s *Server) ListThreads(query string) ThreadPage {
	s.t.Helper()
	var p ThreadPage
	if code := s.DoInto(http.MethodGet, "/instance-ai/threads"+query, "", &p); code != http.StatusOK {
		s.t.Fatalf("list threads%s: %d", query, code)
	}
	return p
}

// ThreadStatus returns GET /instance-ai/threads/{thread}/status; anything
// but 200 fails the test.
func (s *Server) ThreadStatus(thread string) instanceai.ThreadStatus {
	s.t.Helper()
	var st instanceai.ThreadStatus
	if code := s.DoInto(http.MethodGet, "/instance-ai/threads/"+thread+"/status", "", &st); code != http.StatusOK {
		s.t.Fatalf("status of %s: %d", thread, code)
	}
	return st
}
