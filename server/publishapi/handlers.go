package publishapi

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/trace"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
)

func userFrom(r *http.Request) string { return auth.UserFrom(r.Context()) }

// The producer headers of an append.
const (
	HeaderProducerID    = "Producer-Id"
	HeaderProducerEpoch = "Producer-Epoch"
	HeaderProducerSeq   = "Producer-Seq"
)

// NDJSON is the media type of a streamed append: one event a line.
const NDJSON = "application/x-ndjson"

type startRequest struct {
	// Message, when set, is the user message the run answers: stored and
	// shown as a chat's.
	Message string `json:"message"`
	// RunID, when set, is the run's id: a start retried after a lost
	// answer finds its run again instead of a 409.
	RunID string `json:"runId"`
}

type startAnswer struct {
	ThreadID string `json:"threadId"`
	RunID    string `json:"runId"`
	AgentID  string `json:"agentId"`
	// Message is the user message the run answers ("" for none).
	Message string `json:"message,omitempty"`
	// LeaseSeconds is how long the run waits for the producer's next
	// request before it ends in error.
	LeaseSeconds float64 `json:"leaseSeconds"`
}

// start begins a run on the thread (made for the caller if new) that the
// caller's producer drives.
func (a *API) start(w http.ResponseWriter, r *http.Request) {
	ans, status, err := a.startRun(w, r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, status, ans)
}

func (a *API) startRun(w http.ResponseWriter, r *http.Request) (startAnswer, int, error) {
	ctx := r.Context()
	threadID := mux.Vars(r)["threadId"]
	if !instanceai.ValidThreadID(threadID) {
		return startAnswer{}, 0, httpjson.NewError(http.StatusBadRequest, "invalid_field", "threadId", "threadId %s", instanceai.ThreadIDRule)
	}
	var req startRequest
	if r.ContentLength != 0 {
		if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
			return startAnswer{}, 0, err
		}
	}
	if req.RunID != "" && !instanceai.ValidThreadID(req.RunID) {
		return startAnswer{}, 0, httpjson.NewError(http.StatusBadRequest, "invalid_field", "runId", "runId %s", instanceai.ThreadIDRule)
	}
	user := userFrom(r)
	t, err := a.core.OpenThread(ctx, threadID, user)
	if err != nil {
		return startAnswer{}, 0, err
	}
	p, again, err := a.ps.Start(req.RunID, func(work instanceai.Agent) (*instanceai.Run, error) {
		sr := instanceai.StartRequest{ThreadID: threadID, UserID: user, Message: req.Message, RunID: req.RunID, Work: work, WorkName: "publish",
			Trace: trace.SpanContextFromContext(ctx)}
		if req.Message != "" {
			return a.core.Chat(ctx, t, sr)
		}
		return a.core.StartRun(sr)
	})
	if err != nil {
		return startAnswer{}, 0, err
	}
	if again {
		return a.answer(p.Run()), http.StatusOK, nil
	}
	return a.answer(p.Run()), http.StatusCreated, nil
}

func (a *API) answer(run *instanceai.Run) startAnswer {
	return startAnswer{ThreadID: run.ThreadID, RunID: run.ID, AgentID: run.AgentID, Message: run.Message,
		LeaseSeconds: a.ps.Lease().Seconds()}
}

// attach takes a run that waits for its producer (one the external agent
// was given by a chat) and answers what the run is about; the producer
// then drives it as one it started. Attaching again is harmless.
func (a *API) attach(w http.ResponseWriter, r *http.Request) {
	p, err := a.lookup(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	select {
	case <-p.Run().Done():
		httpjson.WriteError(w, runError(p.Over()))
		return
	default:
	}
	p.Hold()()
	httpjson.Write(w, http.StatusOK, a.answer(p.Run()))
}

// producerHeaders reads an append's producer id, epoch and first sequence.
func producerHeaders(r *http.Request) (id string, epoch, seq int64, err error) {
	id = r.Header.Get(HeaderProducerID)
	if id == "" || len(id) > 128 || !printable(id) {
		return "", 0, 0, httpjson.NewError(http.StatusBadRequest, "invalid_header", HeaderProducerID,
			"%s is required: 1-128 printable ASCII characters naming the producer", HeaderProducerID)
	}
	number := func(name string) (int64, error) {
		n, err := strconv.ParseInt(r.Header.Get(name), 10, 64)
		if err != nil || n < 0 {
			return 0, httpjson.NewError(http.StatusBadRequest, "invalid_header", name,
				"%s is required: a non-negative integer, got %q", name, r.Header.Get(name))
		}
		return n, nil
	}
	if epoch, err = number(HeaderProducerEpoch); err != nil {
		return "", 0, 0, err
	}
	seq, err = number(HeaderProducerSeq)
	return id, epoch, seq, err
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// appendAnswer is an append's answer: its external.Receipt.
type appendAnswer struct {
	// NextSeq is the sequence number the producer's next event takes.
	NextSeq int64 `json:"nextSeq"`
	// Stored counts the events of this request stored now; Duplicates
	// those already stored by an earlier try, acknowledged again.
	Stored     int `json:"stored"`
	Duplicates int `json:"duplicates"`
}

// appendEvents appends a JSON event, a JSON array of events, or (with
// Content-Type application/x-ndjson) a stream of them, one a line, each
// stored as it comes. The answer comes once they are in the log; an
// append of live-only events (deltas, status, custom) is answered once
// they are queued, in order, on the thread's writer: the log keeps text
// in its block, not delta by delta, so waiting for the writer would
// promise no more, and a producer one request at a time would wait a
// writer's pass per delta.
func (a *API) appendEvents(w http.ResponseWriter, r *http.Request) {
	p, err := a.lookup(r)
	var id string
	var epoch, seq int64
	if err == nil {
		id, epoch, seq, err = producerHeaders(r)
	}
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	release := p.Hold()
	defer release()
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var got external.Receipt
	if mt == NDJSON {
		got, err = a.appendStream(w, r, p, id, epoch, seq)
	} else {
		got, err = a.appendBody(w, r, p, id, epoch, seq)
	}
	if err == nil && got.Durable {
		// A duplicate's first try may still be on its way to the log,
		// or have been dropped (its run taken over): it is acknowledged
		// only once it is there, as the events stored now are.
		err = p.Run().Sync(r.Context())
	}
	if err != nil {
		// Whatever stopped the append, the producer learns where to go
		// on from.
		err = runError(producerError(err))
		if e := httpjson.FromCore(err); e != nil {
			if e.Detail.Details == nil {
				e.Detail.Details = map[string]any{}
			}
			e.Detail.Details["nextSeq"] = got.NextSeq
			err = e
		}
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, appendAnswer{NextSeq: got.NextSeq, Stored: got.Stored, Duplicates: got.Duplicates})
}

// appendBody appends a JSON body's events, all of them or, when one is
// invalid, none.
func (a *API) appendBody(w http.ResponseWriter, r *http.Request, p *external.Producer, id string, epoch, seq int64) (external.Receipt, error) {
	none := external.Receipt{NextSeq: p.NextSeq()}
	data, err := httpjson.ReadBody(w, r, a.cfg.MaxBody)
	if err != nil {
		return none, err
	}
	data = bytes.TrimSpace(data)
	var raws []json.RawMessage
	if len(data) > 0 && data[0] == '[' {
		err = json.Unmarshal(data, &raws)
	} else {
		raws = []json.RawMessage{data}
	}
	if err != nil || len(data) == 0 {
		return none, httpjson.NewError(http.StatusBadRequest, "invalid_json", "",
			"the body must be a JSON event or a JSON array of events")
	}
	events := make([]instanceai.Event, len(raws))
	for i, raw := range raws {
		if events[i], err = decode(p, raw); err != nil {
			return none, atIndex(err, fmt.Sprintf("events[%d]", i))
		}
	}
	got, err := p.Append(id, epoch, seq, events)
	var refused *external.RefusedError
	if errors.As(err, &refused) {
		err = refusedAt(refused, fmt.Sprintf("events[%d]", refused.Index))
	}
	return got, err
}

// appendStream appends an NDJSON stream's events as they come, each line
// one event with the next sequence number. A bad line ends the append
// with what came before it stored; a cancel of the run ends it too.
func (a *API) appendStream(w http.ResponseWriter, r *http.Request, p *external.Producer, id string, epoch, seq int64) (external.Receipt, error) {
	// The run's end cuts the read short, so a stream waiting for its next
	// line ends with the run.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-p.Run().Done():
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 64<<10), int(a.cfg.MaxBody))
	total := external.Receipt{NextSeq: p.NextSeq()}
	for line := 0; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			line--
			continue
		}
		ev, err := decode(p, raw)
		if err != nil {
			return total, atIndex(err, fmt.Sprintf("line %d", line+1))
		}
		got, err := p.Append(id, epoch, seq+int64(line), []instanceai.Event{ev})
		total.Add(got)
		var refused *external.RefusedError
		if errors.As(err, &refused) {
			return total, refusedAt(refused, fmt.Sprintf("line %d", line+1))
		}
		if err != nil {
			return total, err
		}
		p.Touch()
	}
	if err := sc.Err(); err != nil {
		select {
		case <-p.Run().Done():
			return total, p.Over()
		default:
		}
		if errors.Is(err, bufio.ErrTooLong) {
			return total, httpjson.NewError(http.StatusRequestEntityTooLarge, "line_too_large", "",
				"an NDJSON line is larger than %d bytes", a.cfg.MaxBody)
		}
		return total, httpjson.NewError(http.StatusBadRequest, "body_unreadable", "", "the stream broke: %v", err)
	}
	return total, nil
}

// decode reads one event and checks it as the run would take it.
func decode(p *external.Producer, raw []byte) (instanceai.Event, error) {
	var ev instanceai.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return ev, err
	}
	return p.Check(ev)
}

// confirm asks the person a confirmation-request (the body is its
// payload) and answers with their answer once they give it: the request
// is a long poll, which the producer repeats with the same requestId if it
// breaks.
func (a *API) confirm(w http.ResponseWriter, r *http.Request) {
	p, err := a.lookup(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	release := p.Hold()
	defer release()
	var req instanceai.ConfirmationRequest
	if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	if req.RequestID == "" {
		req.RequestID = instanceai.NewID("cr_")
	} else if asked, err := a.core.Confirmation(r.Context(), req.RequestID); err == nil {
		a.askedBefore(w, p, asked)
		return
	} else if !errors.Is(err, instanceai.ErrNotFound) {
		httpjson.WriteError(w, err)
		return
	}
	ev := instanceai.Event{Type: instanceai.TypeConfirmRequest, RunID: p.Run().ID, AgentID: p.Run().AgentID, Payload: &req}
	if err := ev.Validate(); err != nil {
		httpjson.WriteError(w, atIndex(err, "payload"))
		return
	}
	answer, err := p.Run().Confirm(r.Context(), "", req)
	if err != nil {
		httpjson.WriteError(w, runError(err))
		return
	}
	httpjson.Write(w, http.StatusOK, answer)
}

// askedBefore answers a confirm whose requestId was asked already: a
// producer retrying after its long poll broke. An answered question gets
// its answer again; one withdrawn when the poll broke (or of another run)
// is a 409, to be asked again under a new requestId.
func (a *API) askedBefore(w http.ResponseWriter, p *external.Producer, c instanceai.Confirmation) {
	switch {
	case c.RunID != p.Run().ID:
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, "request_id_taken", "requestId",
			"requestId %q names another run's confirmation; ask with a new one", c.RequestID))
	case c.Status == instanceai.ConfirmationApproved || c.Status == instanceai.ConfirmationDenied:
		var answer instanceai.Answer
		if err := json.Unmarshal(c.Answer, &answer); err != nil {
			httpjson.WriteError(w, err)
			return
		}
		httpjson.Write(w, http.StatusOK, answer)
	case c.Status == instanceai.ConfirmationPending:
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, "confirmation_pending", "requestId",
			"the confirmation %q is asked already and awaited by another request", c.RequestID))
	default:
		httpjson.WriteError(w, httpjson.NewError(http.StatusConflict, "confirmation_withdrawn", "requestId",
			"the confirmation %q is %s (its request broke off before an answer): ask again with a new requestId", c.RequestID, c.Status))
	}
}

type finishRequest struct {
	// Status is completed (the default) or error.
	Status string `json:"status"`
	// Message says what failed, for status error.
	Message string `json:"message"`
}

// finish ends the run: completed, or in error with the producer's
// message; the answer comes once the run-finish is in the log.
func (a *API) finish(w http.ResponseWriter, r *http.Request) {
	p, err := a.lookup(r)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	var req finishRequest
	if r.ContentLength != 0 {
		if err := httpjson.Decode(w, r, a.cfg.MaxBody, &req); err != nil {
			httpjson.WriteError(w, err)
			return
		}
	}
	var end error
	switch req.Status {
	case "", "completed":
	case "error":
		end = &instanceai.ProviderError{Message: cmp.Or(req.Message, "the producer ended the run in error"), Code: "producer_error"}
	default:
		httpjson.WriteError(w, httpjson.NewError(http.StatusBadRequest, "invalid_field", "status",
			"status must be completed or error, got %q", req.Status))
		return
	}
	select {
	case <-p.Run().Done():
		httpjson.WriteError(w, runError(instanceai.ErrRunFinished))
		return
	default:
	}
	p.Finish(end)
	select {
	case <-p.Run().Done():
	case <-r.Context().Done():
		return
	}
	if err := p.Run().Sync(r.Context()); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"runId": p.Run().ID, "status": cmp.Or(req.Status, "completed")})
}
