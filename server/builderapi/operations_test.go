package builderapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/mapping"
	"github.com/threadline/threadline/server/servertest"
	"github.com/threadline/threadline/ssestream"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/validate"
)

// builderFrame is one frame of a builder stream.
type builderFrame struct {
	id int64
	ev mapping.BuilderEvent
}

// post sends an operation and reads its stream to the end; a non-200
// answer is returned as it is with no frames.
func post(t *testing.T, s *servertest.Server, path, body string, header map[string]string) (int, []builderFrame, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := s.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(res.Body)
		return res.StatusCode, nil, raw
	}
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("%s: Content-Type %q", path, ct)
	}
	rd := ssestream.NewReader(res.Body)
	var frames []builderFrame
	for {
		f, err := rd.Next()
		if errors.Is(err, io.EOF) {
			t.Fatalf("%s: stream ended after %d frames without a terminal event", path, len(frames))
		}
		if err != nil {
			t.Fatal(err)
		}
		if f.IsComment() {
			continue
		}
		var fr builderFrame
		if err := json.Unmarshal([]byte(f.Data), &fr.ev); err != nil {
			t.Fatalf("frame %q: %v", f.Data, err)
		}
		if f.HasID {
			fr.id, _ = strconv.ParseInt(f.ID, 10, 64)
		}
		frames = append(frames, fr)
		if strings.HasSuffix(fr.ev.Type, "_FINISHED") || strings.HasSuffix(fr.ev.Type, "_ERROR") && fr.ev.Type != "VALIDATION_ERROR" {
			return res.StatusCode, frames, nil
		}
	}
}

func types(frames []builderFrame) []string {
	out := make([]string, len(frames))
	for i, f := range frames {
		out[i] = f.ev.Type
	}
	return out
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// built is the workflow of the stream's WORKFLOW_* event, and its
// validation result.
func built(t *testing.T, frames []builderFrame, typ string) (*workflow.Workflow, validate.Result) {
	t.Helper()
	for _, f := range frames {
		if f.ev.Type != typ {
			continue
		}
		if f.ev.Data == nil {
			t.Fatalf("%s without data", typ)
		}
		w, err := workflow.Parse([]byte(f.ev.Data.WorkflowJSON))
		if err != nil {
			t.Fatalf("%s: workflow_json: %v", typ, err)
		}
		var res validate.Result
		if err := json.Unmarshal(f.ev.Data.ValidationResult, &res); err != nil {
			t.Fatalf("%s: validation_result: %v", typ, err)
		}
		return w, res
	}
	t.Fatalf("no %s in %v", typ, types(frames))
	return nil, validate.Result{}
}

// The seed's three operations, end to end on every store: the event
// sequences and names exactly, the ids on every event, the workflow with
// its validation, and the history modify and iterate leave.
func TestOperations(t *testing.T) {
	servertest.ForEachStore(t, func(t *testing.T, store instanceai.Store) {
		s := servertest.Start(t, store, servertest.Options{})
		code, frames, raw := post(t, s, "/generate", `{"description":"Create a workflow that watches for new files in a folder and sends an email notification"}`, nil)
		if code != http.StatusOK {
			t.Fatalf("generate: %d %s", code, raw)
		}
		want := []string{"RUN_STARTED", "VALIDATION_STARTED", "VALIDATION_COMPLETED", "LLM_CHECK_STARTED", "LLM_AVAILABLE",
			"PROCESSING_STARTED", "WORKFLOW_GENERATED", "RUN_FINISHED"}
		if got := types(frames); !equal(got, want) {
			t.Fatalf("generate events %v; want %v", got, want)
		}
		first := frames[0].ev
		if first.WorkflowID == "" || first.ThreadID == "" || first.RunID == "" || first.Timestamp == "" {
			t.Fatalf("RUN_STARTED = %+v; want workflow_id, thread_id, run_id, timestamp", first)
		}
		var last int64
		for _, f := range frames {
			if f.ev.WorkflowID != first.WorkflowID || f.ev.ThreadID != first.ThreadID || f.ev.RunID != first.RunID {
				t.Fatalf("%s carries %s/%s/%s; want the run's", f.ev.Type, f.ev.WorkflowID, f.ev.ThreadID, f.ev.RunID)
			}
			if f.id != 0 {
				if f.id <= last {
					t.Fatalf("ids not increasing: %d after %d", f.id, last)
				}
				last = f.id
			}
		}
		if fin := frames[len(frames)-1].ev; fin.Success == nil || !*fin.Success {
			t.Fatalf("RUN_FINISHED = %+v", fin)
		}
		w, res := built(t, frames, "WORKFLOW_GENERATED")
		if !res.IsValid || len(res.Errors) != 0 || w.Nodes[0].Type != "n8n-nodes-base.localFileTrigger" {
			t.Fatalf("generated %+v, validation %+v", w.Nodes, res)
		}
		doc, _ := json.Marshal(w)

		// Modify the generated workflow in the same thread.
		body, _ := json.Marshal(map[string]string{"existing_workflow_json": string(doc),
			"modification_description": "Add database logging after sending the email", "workflow_id": first.WorkflowID,
			"thread_id": first.ThreadID})
		code, frames, raw = post(t, s, "/modify", string(body), nil)
		if code != http.StatusOK {
			t.Fatalf("modify: %d %s", code, raw)
		}
		want = []string{"MODIFICATION_STARTED", "VALIDATION_STARTED", "VALIDATION_COMPLETED", "LLM_CHECK_STARTED", "LLM_AVAILABLE",
			"PROCESSING_STARTED", "WORKFLOW_MODIFIED", "MODIFICATION_FINISHED"}
		if got := types(frames); !equal(got, want) {
			t.Fatalf("modify events %v; want %v", got, want)
		}
		modified, _ := built(t, frames, "WORKFLOW_MODIFIED")
		if len(modified.Nodes) != len(w.Nodes)+1 || modified.Nodes[len(modified.Nodes)-1].Type != "n8n-nodes-base.postgres" {
			t.Fatalf("modified nodes %+v", modified.Nodes)
		}
		mdoc, _ := json.Marshal(modified)

		// Iterate on it with the seed's feedback.
		body, _ = json.Marshal(map[string]string{"workflow_id": first.WorkflowID, "existing_workflow_json": string(mdoc),
			"feedback_from_testing":   "The email sending works but we need to handle cases where the recipient is invalid",
			"additional_requirements": "Also add logging to track all email attempts"})
		code, frames, raw = post(t, s, "/iterate", string(body), nil)
		if code != http.StatusOK {
			t.Fatalf("iterate: %d %s", code, raw)
		}
		want = []string{"ITERATION_STARTED", "VALIDATION_STARTED", "VALIDATION_COMPLETED", "LLM_CHECK_STARTED", "LLM_AVAILABLE",
			"PROCESSING_STARTED", "WORKFLOW_ITERATED", "ITERATION_FINISHED"}
		if got := types(frames); !equal(got, want) {
			t.Fatalf("iterate events %v; want %v", got, want)
		}
		iterated, _ := built(t, frames, "WORKFLOW_ITERATED")

		// The history: one iteration per modify and iterate, with hashes,
		// sizes and changes; iterate's feedback.
		var its []struct {
			WorkflowID     string `json:"workflow_id"`
			Description    string `json:"description"`
			OriginalHash   uint64 `json:"original_hash"`
			ModifiedHash   uint64 `json:"modified_hash"`
			OriginalSize   int64  `json:"original_size"`
			ModifiedSize   int64  `json:"modified_size"`
			ChangesSummary struct {
				NodesAdded         int  `json:"nodes_added"`
				ConnectionsChanged bool `json:"connections_changed"`
			} `json:"changes_summary"`
		}
		if code := s.DoInto(http.MethodGet, "/iterations/"+first.WorkflowID, "", &its); code != http.StatusOK || len(its) != 2 {
			t.Fatalf("iterations: %d %+v", code, its)
		}
		if its[0].Description != "Add database logging after sending the email" || its[0].ChangesSummary.NodesAdded != 1 ||
			!its[0].ChangesSummary.ConnectionsChanged || its[0].OriginalSize != int64(len(doc)) || its[0].ModifiedSize != int64(len(mdoc)) ||
			its[0].OriginalHash == its[0].ModifiedHash {
			t.Fatalf("first iteration %+v", its[0])
		}
		if added := its[1].ChangesSummary.NodesAdded; added != len(iterated.Nodes)-len(modified.Nodes) || added == 0 {
			t.Fatalf("second iteration adds %d nodes; the workflow grew from %d to %d", added, len(modified.Nodes), len(iterated.Nodes))
		}
		var fb []struct{ Feedback, FeedbackType string }
		if code := s.DoInto(http.MethodGet, "/feedback/"+first.WorkflowID, "", &fb); code != http.StatusOK || len(fb) != 1 {
			t.Fatalf("feedback: %d %+v", code, fb)
		}

		// The same runs are Instance AI events in the thread's log: the
		// steps as tool calls, the checklist, the user's messages.
		rows := servertest.StoredEvents(t, store, first.ThreadID)
		calls := 0
		for _, r := range rows {
			if r.Event.Type == instanceai.TypeToolCall {
				calls++
			}
		}
		if calls != 8 { // two of the three runs are in this thread: 4 steps each
			t.Fatalf("the thread's log holds %d tool calls; want 8", calls)
		}
	})
}

// Bad requests are a 400 naming the field, before any stream byte, and
// start nothing.
func TestOperationsRejectBadRequests(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	for _, c := range []struct{ path, body, field string }{
		{"/generate", `{}`, "description"},
		{"/generate", `{"description":"   "}`, "description"},
		{"/generate", `{"description":7}`, "description"},
		{"/generate", `{"description":"email","thread_id":"../etc"}`, "thread_id"},
		{"/generate", `{"description":"email","run_id":"a b"}`, "run_id"},
		{"/generate", `{"description":"email\u0000"}`, "description"},
		{"/iterate", `{"workflow_id":"wf","existing_workflow_json":"{}","feedback_from_testing":"ok","additional_requirements":"\u0000"}`, "additional_requirements"},
		{"/generate", `not json`, ""},
		{"/modify", `{"modification_description":"add slack"}`, "existing_workflow_json"},
		{"/modify", `{"existing_workflow_json":[1],"modification_description":"add slack"}`, "existing_workflow_json"},
		{"/modify", `{"existing_workflow_json":"{}"}`, "modification_description"},
		{"/iterate", `{"existing_workflow_json":"{}","feedback_from_testing":"x"}`, "workflow_id"},
		{"/iterate", `{"workflow_id":"wf","existing_workflow_json":"{}"}`, "feedback_from_testing"},
		{"/validate", `{}`, "workflow_json"},
	} {
		code, frames, raw := post(t, s, c.path, c.body, nil)
		var out struct {
			Error struct {
				Code    string
				Details map[string]any
			}
		}
		_ = json.Unmarshal(raw, &out)
		field, _ := out.Error.Details["field"].(string)
		detail, _ := out.Error.Details["error_detail"].(map[string]any)
		if code != http.StatusBadRequest || frames != nil || field != c.field || detail["user_guidance"] == "" || detail["category"] != "validation" {
			t.Errorf("%s %s: %d %s; want 400 naming %q with an error_detail", c.path, c.body, code, raw, c.field)
		}
	}
	if th := s.ListThreads(""); len(th.Threads) != 0 {
		t.Fatalf("bad requests created threads: %+v", th.Threads)
	}
}

// A modify whose existing workflow is not a workflow is VALIDATION_ERROR
// with the seed's ErrorDetail, then MODIFICATION_ERROR.
func TestModifyOfABrokenWorkflow(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	code, frames, raw := post(t, s, "/modify", `{"existing_workflow_json":"{\"name\":\"x\",\"connections\":{}}","modification_description":"add slack"}`, nil)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, raw)
	}
	want := []string{"MODIFICATION_STARTED", "VALIDATION_STARTED", "VALIDATION_ERROR", "MODIFICATION_ERROR"}
	if got := types(frames); !equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	verr := frames[2].ev.Error
	if verr == nil || verr.Category != workflow.CategoryWorkflowStructure || !strings.Contains(verr.Message, "nodes") ||
		verr.UserGuidance == "" || len(verr.FixSuggestions) == 0 || verr.TechnicalDetails == "" {
		t.Fatalf("VALIDATION_ERROR = %+v", verr)
	}
	if fin := frames[3].ev; fin.Success == nil || *fin.Success || fin.Error == nil || fin.Error.Message != verr.Message {
		t.Fatalf("MODIFICATION_ERROR = %+v", fin)
	}
}

// A request that names its run_id again resumes that run's stream after
// Last-Event-ID instead of starting another: no event twice, none lost.
func TestResumeByRunID(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	body := `{"description":"Send welcome email to new customers","thread_id":"th-b","run_id":"gen-1"}`
	_, all, _ := post(t, s, "/generate", body, nil)
	if all[0].ev.RunID != "gen-1" || all[0].ev.ThreadID != "th-b" {
		t.Fatalf("RUN_STARTED = %+v; want the client's ids", all[0].ev)
	}
	cut := -1
	for i, f := range all {
		if f.ev.Type == "LLM_AVAILABLE" {
			cut = i
		}
	}
	_, rest, _ := post(t, s, "/generate", body, map[string]string{"Last-Event-ID": strconv.FormatInt(all[cut].id, 10)})
	if got, want := types(rest), types(all[cut+1:]); !equal(got, want) {
		t.Fatalf("resumed %v; want %v", got, want)
	}
	_, again, _ := post(t, s, "/generate", body, nil)
	if !equal(types(again), types(all)) {
		t.Fatalf("from the start again: %v", types(again))
	}
	runs := map[string]bool{}
	for _, r := range servertest.StoredEvents(t, s.Store, "th-b") {
		runs[r.Event.RunID] = true
	}
	if len(runs) != 1 || !runs["gen-1"] {
		t.Fatalf("the thread holds runs %v; want gen-1 only", runs)
	}
}

// A resume whose Last-Event-ID is beyond the thread's log (the thread was
// deleted and made again, or the id is another deployment's) ends with the
// operation's error event saying so, instead of waiting for events that
// will never come.
func TestResumeFromACursorAheadOfTheLog(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	body := `{"description":"Send welcome email to new customers","thread_id":"th-c","run_id":"gen-2"}`
	post(t, s, "/generate", body, nil)
	_, rest, _ := post(t, s, "/generate", body, map[string]string{"Last-Event-ID": "99999"})
	if len(rest) == 0 {
		t.Fatal("no events")
	}
	end := rest[len(rest)-1].ev
	if !strings.HasSuffix(end.Type, "_ERROR") || end.Success == nil || *end.Success || end.Error == nil ||
		!strings.Contains(end.Error.Message, "cursor_ahead") || !strings.Contains(end.Error.FixSuggestions[0], "no Last-Event-ID") {
		t.Fatalf("the stream ends with %+v; want an error event naming the cursor", end)
	}
}

// A resume's Last-Event-ID is digits only: a sign or anything else is a
// 400 that names the header, and starts nothing.
func TestResumeRefusesAMalformedCursor(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	body := `{"description":"Send welcome email to new customers","thread_id":"th-m","run_id":"gen-m"}`
	post(t, s, "/generate", body, nil)
	for _, raw := range []string{"+1", "-1", "1.0", "abc"} {
		code, _, out := post(t, s, "/generate", body, map[string]string{"Last-Event-ID": raw})
		if code != http.StatusBadRequest || !strings.Contains(string(out), `"invalid_cursor"`) || !strings.Contains(string(out), `"Last-Event-ID"`) {
			t.Errorf("Last-Event-ID %q: %d %s", raw, code, out)
		}
	}
}

// /validate answers the ValidationResult of a recorded n8n workflow and of
// a broken one.
func TestValidateEndpoint(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{})
	doc, err := os.ReadFile("../../agent/n8n/testdata/real/workflow-lastNode.create-body.json")
	if err != nil {
		t.Fatal(err)
	}
	var res validate.Result
	body, _ := json.Marshal(map[string]json.RawMessage{"workflow_json": doc})
	if code := s.DoInto(http.MethodPost, "/validate", string(body), &res); code != http.StatusOK || !res.IsValid ||
		res.ValidationSummary.NodesValidated != 4 {
		t.Fatalf("recorded workflow: %d %+v", code, res)
	}
	if code := s.DoInto(http.MethodPost, "/validate", `{"workflow_json":"{\"name\":\"x\",\"nodes\":[],\"connections\":{} "}`, &res); code != http.StatusOK ||
		res.IsValid || len(res.Errors) == 0 || res.Errors[0].Rule != "json.syntax" {
		t.Fatalf("broken workflow: %d %+v", code, res)
	}
}

// A builder run is a run like any other: an AG-UI client that rejoins the
// thread while it builds sees the steps, the checklist state and the
// steps' calls with the workflow in the result.
func TestBuilderRunThroughAGUI(t *testing.T) {
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{AgentDelay: 300 * time.Millisecond})
	done := make(chan []builderFrame, 1)
	go func() {
		_, frames, _ := post(t, s, "/generate", `{"description":"Every day call an HTTP API and post to Slack","thread_id":"ag"}`, nil)
		done <- frames
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if rows, err := s.Store.ReadAfter(context.Background(), "ag", 0, 0); err == nil && len(rows) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the builder run did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// /status lists the builder's agents with what each works on now.
	tasks := func() map[string]int {
		var st struct {
			Agents map[string]struct {
				ActiveTasks int `json:"active_tasks"`
			} `json:"agents"`
		}
		if code := s.DoInto(http.MethodGet, "/status", "", &st); code != http.StatusOK {
			t.Fatalf("/status: %d", code)
		}
		out := map[string]int{}
		for name, a := range st.Agents {
			out[name] = a.ActiveTasks
		}
		return out
	}
	for tasks()["generator"] != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("/status never showed the generator at work: %v", tasks())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := tasks(); got["orchestrator"] != 1 || got["validator"] != 0 {
		t.Fatalf("while building: %v; want orchestrator 1, validator 0", got)
	}
	req, _ := http.NewRequest(http.MethodGet, s.URL+"/agui/threads/ag/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	res, err := s.Client.Do(req)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("rejoin: %v %v", res, err)
	}
	defer res.Body.Close()
	rd := ssestream.NewReader(res.Body)
	var seen []string
	result := ""
	for {
		f, err := rd.Next()
		if err != nil {
			t.Fatalf("rejoin ended after %v: %v", seen, err)
		}
		if f.IsComment() || f.Data == "" {
			continue
		}
		var ev struct {
			Type, StepName, Content string
		}
		if err := json.Unmarshal([]byte(f.Data), &ev); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, ev.Type+":"+ev.StepName)
		if ev.Type == "TOOL_CALL_RESULT" && strings.Contains(ev.Content, "workflow_json") {
			result = ev.Content
		}
		if ev.Type == "RUN_FINISHED" || ev.Type == "RUN_ERROR" {
			break
		}
	}
	joined := strings.Join(seen, " ")
	for _, want := range []string{"STEP_STARTED:build_workflow", "STEP_FINISHED:build_workflow", "STEP_STARTED:validate_workflow",
		"STATE_", "RUN_FINISHED:"} {
		if !strings.Contains(joined, want) {
			t.Fatalf("the AG-UI view lacks %s: %s", want, joined)
		}
	}
	if !strings.Contains(result, "n8n-nodes-base.slack") {
		t.Fatalf("no tool result carried the workflow: %q", result)
	}
	if frames := <-done; frames[len(frames)-1].ev.Type != "RUN_FINISHED" {
		t.Fatalf("the builder stream ended %v", types(frames))
	}
	for got := tasks(); got["orchestrator"] != 0 || got["generator"] != 0 || got["validator"] != 0; got = tasks() {
		if time.Now().After(deadline) {
			t.Fatalf("after the run: %v; want all idle", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// With the LLM agent and no model server, the operation says so: the
// seed's LLM_UNAVAILABLE with an llm_service ErrorDetail, then RUN_ERROR.
func TestGenerateWithTheModelDown(t *testing.T) {
	down := httptest.NewServer(http.NotFoundHandler())
	base := down.URL + "/v1"
	down.Close() // nothing listens there any more
	agent, err := openai.New(openai.Config{BaseURL: base, Model: "llama-3.2-3b-instruct", HealthTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, servertest.OpenStore(t, "memory"), servertest.Options{Agent: agent})
	code, frames, raw := post(t, s, "/generate", `{"description":"Send welcome email to new customers"}`, nil)
	if code != http.StatusOK {
		t.Fatalf("%d %s", code, raw)
	}
	want := []string{"RUN_STARTED", "VALIDATION_STARTED", "VALIDATION_COMPLETED", "LLM_CHECK_STARTED", "LLM_UNAVAILABLE", "RUN_ERROR"}
	if got := types(frames); !equal(got, want) {
		t.Fatalf("events %v; want %v", got, want)
	}
	d := frames[4].ev.Error
	if d == nil || d.Category != workflow.CategoryLLMService || d.UserGuidance == "" || len(d.FixSuggestions) == 0 {
		t.Fatalf("LLM_UNAVAILABLE = %+v", frames[4].ev)
	}
	if fin := frames[5].ev; fin.Error == nil || fin.Error.Title != d.Title {
		t.Fatalf("RUN_ERROR = %+v; want the model's detail", fin)
	}
}
