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
	p := a.ps.newProducer()
	p.attach.Do(func() { close(p.attached) })
	sr := instanceai.StartRequest{ThreadID: threadID, UserID: user, Message: req.Message, RunID: req.RunID, Work: p, WorkName: "publish",
		Trace: trace.SpanContextFromContext(ctx)}
	var run *instanceai.Run
	if req.Message != "" {
		run, err = a.core.Chat(ctx, t, sr)
	} else {
		run, err = a.core.StartRun(sr)
	}
	var active *instanceai.RunActiveError
	if errors.As(err, &active) && req.RunID != "" && active.RunID == req.RunID {
		if again := a.ps.get(req.RunID); again != nil {
			return a.answer(again.run), http.StatusOK, nil
		}
	}
	if err != nil {
		return startAnswer{}, 0, err
	}
	p.run = run
	a.ps.track(p)
	return a.answer(run), http.StatusCreated, nil
}

func (a *API) answer(run *instanceai.Run) startAnswer {
	return startAnswer{ThreadID: run.ThreadID, RunID: run.ID, AgentID: run.AgentID, Message: run.Message,
		LeaseSeconds: a.ps.lease.Seconds()}
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
	case <-p.run.Done():
		httpjson.WriteError(w, runError(p.over()))
		return
	default:
	}
	p.hold()()
	httpjson.Write(w, http.StatusOK, a.answer(p.run))
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

type appendAnswer struct {
	// NextSeq is the sequence number the producer's next event takes.
	NextSeq int64 `json:"nextSeq"`
	// Stored counts the events of this request stored now; Duplicates
	// those already stored by an earlier try, acknowledged again.
	Stored     int `json:"stored"`
	Duplicates int `json:"duplicates"`
	// durable is set when an event of it, stored now or acknowledged as
	// a duplicate, is one the log stores as it comes: the answer then
	// waits until it is stored (see appendEvents). A duplicate's first
	// try may still be on its way to the log, or have been dropped (its
	// run taken over): it is acknowledged only once it is there.
	durable bool
}

// add counts another append's answer into a.
func (a *appendAnswer) add(b appendAnswer) {
	a.NextSeq = b.NextSeq
	a.Stored += b.Stored
	a.Duplicates += b.Duplicates
	a.durable = a.durable || b.durable
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
	release := p.hold()
	defer release()
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var ans appendAnswer
	if mt == NDJSON {
		ans, err = a.appendStream(w, r, p, id, epoch, seq)
	} else {
		ans, err = a.appendBody(w, r, p, id, epoch, seq)
	}
	if err == nil && ans.durable {
		err = p.run.Sync(r.Context())
	}
	if err != nil {
		// Whatever stopped the append, the producer learns where to go
		// on from.
		err = runError(err)
		if e := httpjson.FromCore(err); e != nil {
			if e.Detail.Details == nil {
				e.Detail.Details = map[string]any{}
			}
			e.Detail.Details["nextSeq"] = ans.NextSeq
			err = e
		}
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, ans)
}

// appendBody appends a JSON body's events, all of them or, when one is
// invalid, none.
func (a *API) appendBody(w http.ResponseWriter, r *http.Request, p *producer, id string, epoch, seq int64) (appendAnswer, error) {
	none := appendAnswer{NextSeq: p.nextSeq()}
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
		if events[i], err = p.decode(raw); err != nil {
			return none, atIndex(err, fmt.Sprintf("events[%d]", i))
		}
	}
	return p.append(id, epoch, seq, events, func(i int) string { return fmt.Sprintf("events[%d]", i) })
}

// appendStream appends an NDJSON stream's events as they come, each line
// one event with the next sequence number. A bad line ends the append
// with what came before it stored; a cancel of the run ends it too.
func (a *API) appendStream(w http.ResponseWriter, r *http.Request, p *producer, id string, epoch, seq int64) (appendAnswer, error) {
	// The run's end cuts the read short, so a stream waiting for its next
	// line ends with the run.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-p.run.Done():
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
		case <-stop:
		}
	}()
	sc := bufio.NewScanner(r.Body)
	sc.Buffer(make([]byte, 0, 64<<10), int(a.cfg.MaxBody))
	var total appendAnswer
	total.NextSeq = p.nextSeq()
	for line := 0; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			line--
			continue
		}
		ev, err := p.decode(raw)
		if err != nil {
			return total, atIndex(err, fmt.Sprintf("line %d", line+1))
		}
		ans, err := p.append(id, epoch, seq+int64(line), []instanceai.Event{ev}, func(int) string { return fmt.Sprintf("line %d", line+1) })
		total.add(ans)
		if err != nil {
			return total, err
		}
		p.touch()
	}
	if err := sc.Err(); err != nil {
		select {
		case <-p.run.Done():
			return total, p.over()
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

// refusedAt names where in the request an event the run's door refused
// was: a rule of the log it breaks (400, the field within the event), or a
// size bound it is over (413). Other errors are the run's, not the event's.
func refusedAt(err error, where string) error {
	var rule *instanceai.RuleError
	var limit *instanceai.LimitError
	switch {
	case errors.As(err, &rule):
		return httpjson.NewError(http.StatusBadRequest, instanceai.CodeRuleBroken, where+"."+rule.Field, "%s: %v", where, err).
			With(map[string]any{"rule": rule.Rule, "eventType": rule.Type})
	case errors.As(err, &limit):
		return httpjson.NewError(http.StatusRequestEntityTooLarge, limit.Code, where, "%s: %v", where, err).
			With(map[string]any{"limit": limit.Limit, "eventType": limit.Type})
	}
	return err
}

// atIndex names where in the body an invalid event was.
func atIndex(err error, where string) error {
	var e *httpjson.Error
	if errors.As(err, &e) {
		return err
	}
	return httpjson.NewError(http.StatusBadRequest, "invalid_event", where, "%s: %v", where, err)
}

// refused are the event types a producer does not append: the run's start
// and finish are Threadline's (the finish route ends the run), and a
// confirmation is asked through the confirm route, which waits for the
// answer.
var refused = map[instanceai.EventType]string{
	instanceai.TypeRunStart:       "the run-start is Threadline's",
	instanceai.TypeRunFinish:      "finish the run with POST …/finish",
	instanceai.TypeConfirmRequest: "ask with POST …/confirm, which answers with the person's answer",
}

// decode reads and checks one event as the run would take it.
func (p *producer) decode(raw []byte) (instanceai.Event, error) {
	var ev instanceai.Event
	if err := json.Unmarshal(raw, &ev); err != nil {
		return ev, err
	}
	if why, ok := refused[ev.Type]; ok {
		return ev, fmt.Errorf("a producer does not append %s events: %s", ev.Type, why)
	}
	// The run, its user and the time are Threadline's to stamp.
	ev.UserID, ev.TS = "", 0
	ev = p.run.Stamp(ev)
	return ev, ev.Validate()
}

// over is why a request to the run's producer, which has ended, fails:
// what became of events it was sent (another instance took the run over),
// its cancel, or its finish.
func (p *producer) over() error {
	if err := p.run.NotStored(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancelled {
		return errCancelled
	}
	return instanceai.ErrRunFinished
}

func (p *producer) nextSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// append stores the events whose sequence numbers start at seq, skipping
// those an earlier try stored. where names the i-th event in the request,
// for a refusal.
func (p *producer) append(id string, epoch, seq int64, events []instanceai.Event, where func(i int) string) (appendAnswer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.id == "":
		p.id, p.epoch = id, epoch
	case id != p.id:
		return appendAnswer{NextSeq: p.next}, httpjson.NewError(http.StatusConflict, "producer_conflict", HeaderProducerID,
			"the run is driven by another producer")
	case epoch < p.epoch:
		return appendAnswer{NextSeq: p.next}, httpjson.NewError(http.StatusConflict, "producer_fenced", HeaderProducerEpoch,
			"epoch %d is fenced off: epoch %d of this producer has taken over", epoch, p.epoch)
	case epoch > p.epoch:
		// The producer restarted: its new epoch counts from 0.
		p.epoch, p.next = epoch, 0
	}
	if seq > p.next {
		return appendAnswer{NextSeq: p.next}, httpjson.NewError(http.StatusConflict, "sequence_gap", HeaderProducerSeq,
			"%s %d leaves a gap: the next event is %d", HeaderProducerSeq, seq, p.next)
	}
	ans := appendAnswer{Duplicates: int(min(p.next-seq, int64(len(events))))}
	for _, ev := range events[:ans.Duplicates] {
		ans.durable = ans.durable || instanceai.DurabilityOf(ev.Type) != instanceai.Ephemeral
	}
	for i, ev := range events[ans.Duplicates:] {
		p.segmentID(&ev)
		if err := p.run.Emit(ev); err != nil {
			ans.NextSeq = p.next
			if p.cancelled {
				err = errCancelled
			}
			return ans, refusedAt(err, where(ans.Duplicates+i))
		}
		p.next++
		ans.Stored++
		ans.durable = ans.durable || instanceai.DurabilityOf(ev.Type) != instanceai.Ephemeral
	}
	ans.NextSeq = p.next
	return ans, nil
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
	release := p.hold()
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
	ev := instanceai.Event{Type: instanceai.TypeConfirmRequest, RunID: p.run.ID, AgentID: p.run.AgentID, Payload: &req}
	if err := ev.Validate(); err != nil {
		httpjson.WriteError(w, atIndex(err, "payload"))
		return
	}
	answer, err := p.run.Confirm(r.Context(), "", req)
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
func (a *API) askedBefore(w http.ResponseWriter, p *producer, c instanceai.Confirmation) {
	switch {
	case c.RunID != p.run.ID:
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
	case <-p.run.Done():
		httpjson.WriteError(w, runError(instanceai.ErrRunFinished))
		return
	default:
	}
	p.once.Do(func() { p.finish <- end })
	select {
	case <-p.run.Done():
	case <-r.Context().Done():
		return
	}
	if err := p.run.Sync(r.Context()); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	httpjson.Write(w, http.StatusOK, map[string]string{"runId": p.run.ID, "status": cmp.Or(req.Status, "completed")})
}
