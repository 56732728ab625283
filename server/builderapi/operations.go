package builderapi

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/gorilla/mux"

	"github.com/threadline/threadline/builder"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/auth"
	"github.com/threadline/threadline/server/httpjson"
	"github.com/threadline/threadline/server/internal/follow"
	"github.com/threadline/threadline/ssestream"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/diff"
)

// registerOperations mounts generate, modify, iterate, validate and the
// history routes.
func (a *API) registerOperations(r *mux.Router) {
	r.HandleFunc("/generate", a.generate).Methods(http.MethodPost)
	r.HandleFunc("/modify", a.modify).Methods(http.MethodPost)
	r.HandleFunc("/iterate", a.iterate).Methods(http.MethodPost)
	r.HandleFunc("/validate", a.validateWorkflow).Methods(http.MethodPost)
	r.HandleFunc("/iterations/{workflowId}", a.iterations).Methods(http.MethodGet)
	r.HandleFunc("/feedback/{workflowId}", a.feedback).Methods(http.MethodGet)
}

// operation is a decoded request: what to run and where.
type operation struct {
	req             op.Request
	threadID, runID string
	message         string // the user message recorded for the run
}

func (a *API) generate(w http.ResponseWriter, r *http.Request) {
	var body generateRequest
	if err := a.decode(w, r, &body); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	a.operate(w, r, operation{req: op.Request{Kind: op.Generate, WorkflowID: body.WorkflowID, Description: body.Description},
		threadID: body.ThreadID, runID: body.RunID, message: body.Description})
}

func (a *API) modify(w http.ResponseWriter, r *http.Request) {
	var body modifyRequest
	if err := a.decode(w, r, &body); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	a.operate(w, r, operation{req: op.Request{Kind: op.Modify, WorkflowID: body.WorkflowID,
		Description: body.ModificationDescription, Existing: string(body.ExistingWorkflowJSON)},
		threadID: body.ThreadID, runID: body.RunID, message: body.ModificationDescription})
}

func (a *API) iterate(w http.ResponseWriter, r *http.Request) {
	var body iterateRequest
	if err := a.decode(w, r, &body); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	msg := body.FeedbackFromTesting
	if body.AdditionalRequirements != "" {
		msg += "\n\n" + body.AdditionalRequirements
	}
	a.operate(w, r, operation{req: op.Request{Kind: op.Iterate, WorkflowID: body.WorkflowID, Existing: string(body.ExistingWorkflowJSON),
		Feedback: body.FeedbackFromTesting, Additional: body.AdditionalRequirements},
		threadID: body.ThreadID, runID: body.RunID, message: msg})
}

// operate starts the operation's run (or finds it again: a request that
// names the run_id of a run the thread already has resumes that run's
// stream, after Last-Event-ID when given) and streams it in the builder's
// dialect. A client that goes away leaves the run to finish: its result
// lands in the history and the log, for a reconnect to read.
func (a *API) operate(w http.ResponseWriter, r *http.Request, o operation) {
	src, err := a.begin(r, o)
	if err != nil {
		httpjson.WriteError(w, err)
		return
	}
	if src.feed != nil {
		defer src.feed.Close() // the stream may end before it reads it
	}
	log := a.cfg.Logger.With("thread", src.threadID, "run", src.runID, "operation", o.req.Kind)
	s, err := ssestream.Open(w, ssestream.Options{})
	if err != nil {
		return
	}
	m := mapping.NewInstanceToBuilder(o.req.Kind, src.threadID, src.runID, src.workflowID)
	for _, row := range src.seen {
		m.Push(row.Event)
	}
	write := func(id int64, events []mapping.BuilderEvent) error {
		for i, ev := range events {
			data, err := json.Marshal(ev)
			if err != nil {
				return err
			}
			var frameID int64
			if i == len(events)-1 {
				frameID = id
			}
			if err := s.Frame(frameID, ssestream.DataFrame(data)); err != nil {
				return err
			}
		}
		return nil
	}
	follow.Stream[mapping.BuilderEvent]{Core: a.core, ThreadID: src.threadID, RunID: src.runID, Mapper: m, Out: s,
		Write: write, Heartbeat: a.cfg.Heartbeat, Log: log, Feed: src.feed}.Run(r.Context(), src.after)
}

// source is where an operation's stream reads: its run, after a cursor,
// and (on a resume) the run's events up to the cursor, which the mapper
// folds without sending so that it knows the steps begun before.
type source struct {
	threadID, runID, workflowID string
	after                       int64
	seen                        []instanceai.StoredEvent
	// feed is the feed opened before a new run started, nil otherwise.
	feed *instanceai.Feed
}

// begin checks the caller may act and starts the run, or finds the one
// the request names.
func (a *API) begin(r *http.Request, o operation) (source, error) {
	ctx := r.Context()
	user := auth.UserFrom(ctx)
	if o.threadID == "" {
		o.threadID = instanceai.NewID("thread_")
	}
	t, err := a.core.OpenThread(ctx, o.threadID, user)
	if err != nil {
		return source{}, httpjson.AtField(err, "thread_id")
	}
	if o.runID != "" {
		if src, found, err := a.resume(r, o); err != nil || found {
			return src, err
		}
	}
	if a.builder == nil {
		return source{}, httpjson.NewError(http.StatusNotImplemented, "builder_unavailable", "",
			"the configured agent cannot build workflows; run the reference agent (--agent script) or the openai agent")
	}
	if o.req.WorkflowID == "" {
		o.req.WorkflowID = instanceai.NewID("wf_")
	}
	// The feed listens before the run starts: the run's live-only events
	// reach the stream too, in their order.
	feed, err := a.core.LiveFeed(ctx, t.ID)
	if err != nil {
		return source{}, err
	}
	work := op.Work(o.req, op.Config{Builder: a.builder, Check: a.validate, Record: a.recorder(user), Activity: &a.activity})
	timed := instanceai.AgentFunc(func(ctx context.Context, run *instanceai.Run) error {
		ctx, cancel := context.WithTimeout(ctx, a.cfg.OperationTimeout)
		defer cancel()
		return work(ctx, run)
	})
	run, err := a.core.Chat(ctx, t, instanceai.StartRequest{ThreadID: t.ID, UserID: user, Message: o.message,
		RunID: o.runID, Work: timed, WorkName: "builder"})
	if err != nil {
		feed.Close()
		return source{}, httpjson.AtField(err, "run_id")
	}
	return source{threadID: t.ID, runID: run.ID, workflowID: o.req.WorkflowID, after: feed.Last(), feed: feed}, nil
}

// resume finds the run o names in its thread; found is false when the
// thread has no such run (a new run then takes the id). The stream goes on
// after Last-Event-ID, or from the run's first event.
func (a *API) resume(r *http.Request, o operation) (source, bool, error) {
	rows, err := a.core.RunEvents(r.Context(), o.threadID, o.runID)
	if err != nil || len(rows) == 0 {
		return source{}, false, err
	}
	src := source{threadID: o.threadID, runID: o.runID, workflowID: o.req.WorkflowID, after: rows[0].Seq - 1}
	if raw := r.Header.Get("Last-Event-ID"); raw != "" {
		cursor, ok := ssestream.ParseEventID(raw)
		if !ok {
			return source{}, true, httpjson.NewError(http.StatusBadRequest, "invalid_cursor", "Last-Event-ID",
				"Last-Event-ID must be a non-negative integer event id, got %q", raw)
		}
		next, err := a.core.NextSeq(r.Context(), o.threadID)
		if err != nil {
			return source{}, true, err
		}
		if cursor >= next {
			// Beyond the log: the stream's feed says so with a reset,
			// which ends it with the operation's error event.
			src.after = cursor
			return src, true, nil
		}
		src.after = max(cursor, src.after)
	}
	for _, row := range rows {
		if row.Seq <= src.after {
			src.seen = append(src.seen, row)
		}
	}
	return src, true, nil
}

// recorder keeps modify's and iterate's history for user: the iteration
// with its hashes, sizes and changes, and iterate's feedback.
func (a *API) recorder(user string) op.Recorder {
	return func(ctx context.Context, req op.Request, built json.RawMessage) error {
		if req.Kind == op.Generate {
			return nil
		}
		before, _ := workflow.Parse([]byte(req.Existing))
		after, _ := workflow.Parse(built)
		changes, err := json.Marshal(diff.Changes(before, after))
		if err != nil {
			return err
		}
		description := req.Description
		if req.Kind == op.Iterate {
			description = req.Feedback
			if req.Additional != "" {
				description += "; " + req.Additional
			}
		}
		if _, err := a.store.AddIteration(ctx, user, builder.Iteration{WorkflowID: req.WorkflowID, Description: description,
			OriginalHash: builder.Hash([]byte(req.Existing)), ModifiedHash: builder.Hash(built), ChangesSummary: changes,
			OriginalSize: int64(len(req.Existing)), ModifiedSize: int64(len(built))}); err != nil {
			return err
		}
		if req.Kind == op.Iterate {
			_, err = a.store.AddFeedback(ctx, user, builder.Feedback{WorkflowID: req.WorkflowID, Feedback: req.Feedback,
				FeedbackType: "testing_results"})
		}
		return err
	}
}

// validateWorkflow answers a workflow's ValidationResult: 200 whether or
// not it is valid (is_valid says), 400 only for a body without one.
func (a *API) validateWorkflow(w http.ResponseWriter, r *http.Request) {
	var body validateRequest
	if err := a.decode(w, r, &body); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	result, _ := a.validate([]byte(body.WorkflowJSON))
	httpjson.Write(w, http.StatusOK, result)
}

// workflowID reads and checks the {workflowId} path variable.
func workflowID(r *http.Request) (string, error) {
	id := mux.Vars(r)["workflowId"]
	if !instanceai.ValidThreadID(id) {
		return "", httpjson.NewError(http.StatusBadRequest, "invalid_field", "workflow_id", "workflow_id %s", instanceai.ThreadIDRule)
	}
	return id, nil
}

func (a *API) iterations(w http.ResponseWriter, r *http.Request) {
	history(w, r, a.store.ListIterations)
}

func (a *API) feedback(w http.ResponseWriter, r *http.Request) {
	history(w, r, a.store.ListFeedback)
}

// history answers the caller's list of one workflow's history.
func history[T any](w http.ResponseWriter, r *http.Request, list func(ctx context.Context, ownerID, workflowID string) ([]T, error)) {
	id, err := workflowID(r)
	if err == nil {
		var items []T
		if items, err = list(r.Context(), auth.UserFrom(r.Context()), id); err == nil {
			httpjson.Write(w, http.StatusOK, nonNil(items))
			return
		}
	}
	httpjson.WriteError(w, err)
}

// nonNil makes an empty list `[]`, not `null`.
func nonNil[T any](list []T) []T {
	if list == nil {
		return []T{}
	}
	return list
}
