// Package upstreamtest is a hand-written AG-UI agent for tests of the
// upstream agent: an HTTP endpoint that answers a RunAgentInput with AG-UI
// 1.0 SSE, as @ag-ui/encoder writes it ("data: <json>\n\n", Content-Type
// text/event-stream), playing a script chosen by the last user message. It
// covers what real frameworks stream (text, reasoning, tool calls, state,
// steps, interrupts) and what they do not: stalls, malformed events,
// HTTP errors, events after the run's end and events larger than any
// bound.
package upstreamtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/threadline/threadline/agui"
)

// Scripts, by the run's last user message (its first word).
const (
	// Full streams reasoning, text, a tool call and its result, state
	// (snapshot and delta), a step, a CUSTOM event and a text chunk.
	Full = "full"
	// Parallel streams two tool calls whose arguments interleave.
	Parallel = "parallel"
	// Encrypted streams a reasoning message, a text message and a tool
	// call, each followed by a REASONING_ENCRYPTED_VALUE for it (the
	// values are EncryptedReasoning, EncryptedMessage, EncryptedCall).
	Encrypted = "encrypted"
	// Subagents runs a sub-agent (text, a tool call and its result inside
	// it) before the parent's answer.
	Subagents = "subagents"
	// Frontend calls the request's first tool and ends with the call
	// open; the request that carries its result gets the result back as
	// text.
	Frontend = "frontend"
	// Interrupt ends on an approval interrupt; the request that resumes
	// it gets the answer back as text. InterruptText asks for text.
	Interrupt     = "interrupt"
	InterruptText = "interrupt-text"
	// InterruptExpiring is Interrupt with an expiresAt ExpiringIn ahead.
	InterruptExpiring = "interrupt-expiring"
	// Slow streams Chunks text deltas, one every Interval.
	Slow = "slow"
	// Stall starts and then sends nothing until the request goes.
	Stall = "stall"
	// Echo answers with the number of messages, tools and context items
	// it received.
	Echo = "echo"
	// RunError ends with RUN_ERROR.
	RunError = "run-error"
	// Status500 answers HTTP 500, HTML a 200 text/html page, Malformed a
	// frame that is not JSON, AfterEnd text after its RUN_FINISHED, NoEnd
	// closes the stream before its run ends.
	Status500 = "status500"
	HTML      = "html"
	Malformed = "malformed"
	AfterEnd  = "after-end"
	NoEnd     = "no-end"
	// HugeLine streams a short text message, then one
	// TEXT_MESSAGE_CONTENT of HugeSize bytes on one line; HugeFrame the
	// short text, then one CUSTOM event of HugeSize bytes over data
	// lines of a kilobyte each (a JSON array, one item a line). Both are
	// written in pieces until the client goes away; Huge says how they
	// ended.
	HugeLine  = "huge-line"
	HugeFrame = "huge-frame"
)

// HugeSize is the size of the event of the HugeLine and HugeFrame scripts.
const HugeSize = 64 << 20

// The encrypted values of the Encrypted script.
const (
	EncryptedReasoning = "enc-reasoning-Zm9v"
	EncryptedMessage   = "enc-message-YmFy"
	EncryptedCall      = "enc-call-YmF6"
)

// ExpiringIn is how long the InterruptExpiring script's interrupt can be
// answered.
const ExpiringIn = 300 * time.Millisecond

// Defaults of the Slow script.
const (
	Chunks   = 40
	Interval = 25 * time.Millisecond
)

// Server is the fake agent. Its URL is the endpoint.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	requests []agui.RunAgentInput
	headers  []http.Header
	// gone counts requests whose client went away before the script ended.
	gone int
	// hugeCut and hugeWhole count the Huge scripts that ended because the
	// client went away, and those that wrote their event whole.
	hugeCut, hugeWhole int
	// gets counts GET requests: reachability probes.
	gets int
}

// Start starts the agent and closes it at the end of the test.
func Start(t testing.TB) *Server {
	s := &Server{}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Requests returns the inputs received so far.
func (s *Server) Requests() []agui.RunAgentInput {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]agui.RunAgentInput(nil), s.requests...)
}

// Headers returns the headers of the requests received so far.
func (s *Server) Headers() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.headers...)
}

// Gone returns how many requests were abandoned by their client mid-script.
func (s *Server) Gone() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gone
}

// Probes returns how many GET requests (reachability probes) the agent
// has received.
func (s *Server) Probes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// Huge returns how many HugeLine and HugeFrame streams have ended: cut,
// because the client stopped reading and went away, or whole, because it
// read the whole event.
func (s *Server) Huge() (cut, whole int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hugeCut, s.hugeWhole
}

// script picks the script: a resume or a tool result continues the
// previous one, else the last user message names it.
func script(in agui.RunAgentInput) string {
	if len(in.Resume) > 0 {
		return "resumed"
	}
	if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == agui.RoleTool {
		return "tool-result"
	}
	for i := len(in.Messages) - 1; i >= 0; i-- {
		if in.Messages[i].Role == agui.RoleUser {
			word, _, _ := strings.Cut(strings.TrimSpace(in.Messages[i].Text()), " ")
			return word
		}
	}
	return ""
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		s.mu.Lock()
		s.gets++
		s.mu.Unlock()
		_, _ = io.WriteString(w, "fake AG-UI agent\n")
		return
	}
	body, _ := io.ReadAll(r.Body)
	in, err := agui.DecodeRunAgentInput(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, in)
	s.headers = append(s.headers, r.Header.Clone())
	s.mu.Unlock()

	name := script(in)
	switch name {
	case Status500:
		http.Error(w, "<html><body>Internal Server Error</body></html>", http.StatusInternalServerError)
		return
	case HTML:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><body>Login</body></html>")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	st := &stream{w: w, in: in}
	st.send(map[string]any{"type": "RUN_STARTED", "threadId": in.ThreadID, "runId": in.RunID})
	if name == HugeLine || name == HugeFrame {
		whole := st.huge(name == HugeFrame, r)
		s.mu.Lock()
		if whole {
			s.hugeWhole++
		} else {
			s.hugeCut++
		}
		s.mu.Unlock()
		return
	}
	if !st.play(name, r) {
		s.mu.Lock()
		s.gone++
		s.mu.Unlock()
	}
}

type stream struct {
	w  http.ResponseWriter
	in agui.RunAgentInput
}

func (st *stream) send(ev map[string]any) {
	b, _ := json.Marshal(ev)
	st.raw("data: " + string(b) + "\n\n")
}

func (st *stream) raw(s string) {
	_, _ = io.WriteString(st.w, s)
	st.w.(http.Flusher).Flush()
}

// write writes s and flushes it, reporting a client that went away.
func (st *stream) write(r *http.Request, s string) error {
	if _, err := io.WriteString(st.w, s); err != nil {
		return err
	}
	if err := http.NewResponseController(st.w).Flush(); err != nil {
		return err
	}
	return r.Context().Err()
}

// huge plays HugeLine (frame false) or HugeFrame, and reports whether it
// wrote the whole event: it stops at the first write that fails.
func (st *stream) huge(frame bool, r *http.Request) bool {
	st.text("before", "Kept.")
	head, piece, tail := `data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"huge","delta":"`, strings.Repeat("x", 64<<10), "\"}\n\n"
	if frame {
		head, piece, tail = `data: {"type":"CUSTOM","name":"huge","value":[`+"\n", strings.Repeat(`data: "`+strings.Repeat("x", 1012)+`",`+"\n", 64), "data: 0]}\n\n"
	} else {
		st.send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": "huge", "role": "assistant"})
	}
	if st.write(r, head) != nil {
		return false
	}
	for n := 0; n < HugeSize; n += len(piece) {
		if st.write(r, piece) != nil {
			return false
		}
	}
	if st.write(r, tail) != nil {
		return false
	}
	if !frame {
		st.send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "huge"})
	}
	st.finished()
	return true
}

func (st *stream) finished() {
	st.send(map[string]any{"type": "RUN_FINISHED", "threadId": st.in.ThreadID, "runId": st.in.RunID})
}

func (st *stream) text(id, text string) {
	st.send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": id, "role": "assistant"})
	st.send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": id, "delta": text})
	st.send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": id})
}

// play plays the script; false means the client went away first.
func (st *stream) play(name string, r *http.Request) bool {
	in := st.in
	switch name {
	case Full:
		st.send(map[string]any{"type": "STATE_SNAPSHOT", "snapshot": map[string]any{"count": 0, "city": "Zürich"}})
		st.send(map[string]any{"type": "STEP_STARTED", "stepName": "lookup"})
		st.send(map[string]any{"type": "REASONING_START", "messageId": "r1"})
		st.send(map[string]any{"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"})
		st.send(map[string]any{"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "The user wants the weather."})
		st.send(map[string]any{"type": "REASONING_MESSAGE_END", "messageId": "r1"})
		st.send(map[string]any{"type": "REASONING_END", "messageId": "r1"})
		st.send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"})
		st.send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Let me "})
		st.send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "look that up — ☀️."})
		st.send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "m1"})
		st.send(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "call-1", "toolCallName": "get_weather", "parentMessageId": "m1"})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": `{"city":`})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "call-1", "delta": `"Zürich"}`})
		st.send(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "call-1"})
		st.send(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "call-1", "content": `{"tempC":21}`, "role": "tool"})
		st.send(map[string]any{"type": "STATE_DELTA", "delta": []any{map[string]any{"op": "replace", "path": "/count", "value": 1}}})
		st.send(map[string]any{"type": "STEP_FINISHED", "stepName": "lookup"})
		st.send(map[string]any{"type": "CUSTOM", "name": "weather.fetched", "value": map[string]any{"ok": true}})
		st.send(map[string]any{"type": "TEXT_MESSAGE_CHUNK", "messageId": "m2", "role": "assistant", "delta": "It is 21 °C."})
		st.finished()
	case Encrypted:
		enc := func(subtype, id, value string) {
			st.send(map[string]any{"type": "REASONING_ENCRYPTED_VALUE", "subtype": subtype, "entityId": id, "encryptedValue": value})
		}
		st.send(map[string]any{"type": "REASONING_START", "messageId": "er1"})
		st.send(map[string]any{"type": "REASONING_MESSAGE_START", "messageId": "er1", "role": "reasoning"})
		st.send(map[string]any{"type": "REASONING_MESSAGE_CONTENT", "messageId": "er1", "delta": "Thinking it over."})
		st.send(map[string]any{"type": "REASONING_MESSAGE_END", "messageId": "er1"})
		st.send(map[string]any{"type": "REASONING_END", "messageId": "er1"})
		enc("message", "er1", EncryptedReasoning)
		st.text("em1", "Checking the weather.")
		enc("message", "em1", EncryptedMessage)
		st.send(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "ec1", "toolCallName": "get_weather", "parentMessageId": "em1"})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "ec1", "delta": `{"city":"Bern"}`})
		st.send(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "ec1"})
		enc("tool-call", "ec1", EncryptedCall)
		st.send(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "et1", "toolCallId": "ec1", "content": `{"tempC":18}`, "role": "tool"})
		st.text("em2", "18 °C in Bern.")
		st.finished()
	case Parallel:
		st.send(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "p1", "toolCallName": "get_weather"})
		st.send(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "p2", "toolCallName": "get_time"})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "p1", "delta": `{"city":"Oslo"}`})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "p2", "delta": `{"zone":"CET"}`})
		st.send(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "p2"})
		st.send(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "p1"})
		st.send(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "pr2", "toolCallId": "p2", "content": "12:00"})
		st.send(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "pr1", "toolCallId": "p1", "content": `{"tempC":3}`})
		st.text("m1", "Oslo: 3 °C at 12:00.")
		st.finished()
	case Subagents:
		sub := func(ev map[string]any) map[string]any { ev["subagentRunId"] = "sub-1"; return ev }
		st.send(map[string]any{"type": "SUBAGENT_STARTED", "subagentRunId": "sub-1", "name": "researcher", "description": "Looks it up"})
		st.send(sub(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": "s-m1", "role": "assistant"}))
		st.send(sub(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "s-m1", "delta": "Searching."}))
		st.send(sub(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "s-m1"}))
		st.send(sub(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "s-c1", "toolCallName": "search", "parentMessageId": "s-m1"}))
		st.send(sub(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "s-c1", "delta": `{"q":"weather"}`}))
		st.send(sub(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "s-c1"}))
		st.send(sub(map[string]any{"type": "TOOL_CALL_RESULT", "messageId": "s-r1", "toolCallId": "s-c1", "content": `{"hits":3}`}))
		st.send(map[string]any{"type": "SUBAGENT_FINISHED", "subagentRunId": "sub-1", "result": "three hits",
			"outcome": map[string]any{"type": "success"}})
		st.text("m1", "The researcher found three hits.")
		st.finished()
	case Frontend:
		if len(in.Tools) == 0 {
			st.send(map[string]any{"type": "RUN_ERROR", "message": "no frontend tool was offered", "code": "no_tools"})
			return true
		}
		st.send(map[string]any{"type": "TOOL_CALL_START", "toolCallId": "fe-1", "toolCallName": in.Tools[0].Name})
		st.send(map[string]any{"type": "TOOL_CALL_ARGS", "toolCallId": "fe-1", "delta": `{"prompt":"pick one"}`})
		st.send(map[string]any{"type": "TOOL_CALL_END", "toolCallId": "fe-1"})
		st.finished()
	case "tool-result":
		last := in.Messages[len(in.Messages)-1]
		st.text("after-tool", "The browser answered: "+last.Text())
		st.finished()
	case Interrupt, InterruptText, InterruptExpiring:
		st.text("ask", "I need your approval first.")
		interrupt := map[string]any{"id": "int-1", "reason": "tool_approval", "message": "Deploy to production?",
			"responseSchema": json.RawMessage(approvalSchema)}
		if name == InterruptText {
			interrupt = map[string]any{"id": "int-1", "reason": "input", "message": "Which region?",
				"responseSchema": json.RawMessage(`{"type":"string"}`)}
		}
		if name == InterruptExpiring {
			interrupt["expiresAt"] = time.Now().Add(ExpiringIn).UTC().Format(time.RFC3339Nano)
		}
		st.send(map[string]any{"type": "RUN_FINISHED", "threadId": in.ThreadID, "runId": in.RunID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{interrupt}}})
	case "resumed":
		st.text("answer", "Resumed with "+in.Resume[0].Status+": "+string(in.Resume[0].Payload))
		st.finished()
	case Slow:
		st.send(map[string]any{"type": "TEXT_MESSAGE_START", "messageId": "slow", "role": "assistant"})
		for i := range Chunks {
			select {
			case <-r.Context().Done():
				return false
			case <-time.After(Interval):
			}
			st.send(map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": "slow", "delta": fmt.Sprintf("%d ", i)})
		}
		st.send(map[string]any{"type": "TEXT_MESSAGE_END", "messageId": "slow"})
		st.finished()
	case Stall:
		<-r.Context().Done()
		return false
	case Echo:
		st.text("echo", fmt.Sprintf("messages=%d tools=%d context=%d", len(in.Messages), len(in.Tools), len(in.Context)))
		st.finished()
	case RunError:
		st.text("partial", "Working on it")
		st.send(map[string]any{"type": "RUN_ERROR", "message": "model quota exceeded", "code": "rate_limited"})
	case Malformed:
		st.raw("data: {\"type\":\"TEXT_MESSAGE_START\",\n\n")
	case AfterEnd:
		st.text("m", "done")
		st.finished()
		st.send(map[string]any{"type": "TEXT_MESSAGE_CHUNK", "messageId": "late", "delta": "late"})
	case NoEnd:
		st.text("m", "cut")
	default:
		st.text("default", "unknown script "+name)
		st.finished()
	}
	return true
}

// approvalSchema is the responseSchema of an approval interrupt,
// {approved, userInput?}, as Threadline's own interrupts carry it.
const approvalSchema = `{"type":"object","properties":{"approved":{"type":"boolean"},"userInput":{"type":"string"}},"required":["approved"]}`
