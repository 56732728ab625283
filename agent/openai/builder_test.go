package openai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/validate"
)

// check is the builder API's validator, as server.New builds it.
func check(doc []byte) (any, []workflow.ErrorDetail) {
	r := validate.Validate(doc, validate.Options{})
	return r, r.Errors
}

var _ op.Validator = check

// validWorkflow is a workflow n8n 1.123 accepted (agent/n8n's recording),
// compacted as the builder returns it.
func validWorkflow(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "n8n", "testdata", "real", "workflow-2items.create-body.json"))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	if _, errs := check(b.Bytes()); len(errs) > 0 {
		t.Fatalf("the fixture does not validate: %+v", errs)
	}
	return b.String()
}

// invalidWorkflow connects to a node name with a typo.
const invalidWorkflow = `{"name":"Welcome","nodes":[` +
	`{"id":"a1","name":"Webhook","type":"n8n-nodes-base.webhook","typeVersion":2,"position":[0,0],"parameters":{"path":"new"}},` +
	`{"id":"a2","name":"Send Email","type":"n8n-nodes-base.emailSend","typeVersion":2.1,"position":[220,0],"parameters":{}}],` +
	`"connections":{"Webhook":{"main":[[{"node":"Send Emial","type":"main","index":0}]]}}}`

// completionWith is OpenAI's non-streamed chat.completion (the recorded
// shape of testdata/openai_chat_completion.json) carrying content.
func completionWith(t *testing.T, content, finish string) http.HandlerFunc {
	t.Helper()
	var resp map[string]any
	if err := json.Unmarshal([]byte(fixture(t, "openai_chat_completion.json")), &resp); err != nil {
		t.Fatal(err)
	}
	choice := resp["choices"].([]any)[0].(map[string]any)
	choice["message"].(map[string]any)["content"] = content
	choice["finish_reason"] = finish
	body, _ := json.Marshal(resp)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}

func newBuilder(t *testing.T, cfg openai.Config) *openai.Agent {
	t.Helper()
	if cfg.Model == "" {
		cfg.Model = "gpt-4o"
	}
	cfg.MaxRetries = -1 // the retry policy has its own tests
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := openai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func generate(description string) op.Request {
	return op.Request{Kind: op.Generate, WorkflowID: "wf1", Description: description}
}

// lastUser is the content of a request's last user message.
func lastUser(r wireReq) string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if m := r.Messages[i]; m.Role == "user" && m.Content != nil {
			return *m.Content
		}
	}
	return ""
}

func detailOf(t *testing.T, err error) *workflow.ErrorDetail {
	t.Helper()
	var d *workflow.ErrorDetail
	if !errors.As(err, &d) {
		t.Fatalf("error %v (%T) is not an ErrorDetail", err, err)
	}
	if d.Title == "" || d.Message == "" || d.UserGuidance == "" || len(d.FixSuggestions) == 0 || d.Severity != workflow.SeverityError {
		t.Errorf("incomplete ErrorDetail %+v", d)
	}
	return d
}

func TestBuildWorkflowFirstAnswer(t *testing.T) {
	valid := validWorkflow(t)
	f := newFake(t, completionWith(t, valid, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url(), RequestOptions: json.RawMessage(`{"temperature":0.1}`)})
	doc, err := a.BuildWorkflow(context.Background(), generate("Answer webhook messages with an AI agent"), check)
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != valid {
		t.Errorf("doc %s\nwant %s", doc, valid)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Stream || r.Model != "gpt-4o" || string(r.raw["response_format"]) != `{"type":"json_object"}` || string(r.raw["temperature"]) != "0.1" {
		t.Errorf("request %s", r.body)
	}
	if len(r.Messages) != 2 || r.Messages[0].Role != "system" || !strings.Contains(*r.Messages[0].Content, `"connections"`) ||
		!strings.Contains(*r.Messages[0].Content, "ai_languageModel") || !strings.Contains(lastUser(r), "Answer webhook messages with an AI agent") {
		t.Errorf("messages %q", r.summary())
	}
}

func TestBuildWorkflowModifyAndIterateSendTheExistingWorkflow(t *testing.T) {
	valid := validWorkflow(t)
	f := newFake(t, completionWith(t, valid, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	reqs := []op.Request{
		{Kind: op.Modify, WorkflowID: "wf1", Existing: valid, Description: "add a Slack message after the agent"},
		{Kind: op.Iterate, WorkflowID: "wf1", Existing: valid, Feedback: "the agent answers too slowly", Additional: "log every request"},
	}
	for i, req := range reqs {
		if _, err := a.BuildWorkflow(context.Background(), req, check); err != nil {
			t.Fatal(err)
		}
		got := lastUser(f.requests()[i])
		for _, want := range []string{valid, req.Description, req.Feedback, req.Additional} {
			if !strings.Contains(got, want) {
				t.Errorf("%s: the request lacks %q:\n%s", req.Kind, want, got)
			}
		}
	}
}

func TestBuildWorkflowRepairsWithTheValidationErrors(t *testing.T) {
	valid := validWorkflow(t)
	f := newFake(t, completionWith(t, invalidWorkflow, "stop"), completionWith(t, valid, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	doc, err := a.BuildWorkflow(context.Background(), generate("Send a welcome email to new customers"), check)
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != valid {
		t.Errorf("doc %s, want the repaired one", doc)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests, want 2", len(reqs))
	}
	_, errs := check([]byte(invalidWorkflow))
	if len(errs) == 0 {
		t.Fatal("the invalid fixture validates")
	}
	repair := lastUser(reqs[1])
	for _, e := range errs {
		if !strings.Contains(repair, e.Message) {
			t.Errorf("the repair request lacks %q:\n%s", e.Message, repair)
		}
		for _, fix := range e.FixSuggestions {
			if !strings.Contains(repair, fix) {
				t.Errorf("the repair request lacks the fix %q:\n%s", fix, repair)
			}
		}
	}
	if !strings.Contains(repair, `"Send Emial"`) {
		t.Errorf("the repair request does not name the broken connection:\n%s", repair)
	}
	// The model sees its own answer before the errors.
	msgs := reqs[1].summary()
	if len(msgs) != 4 || msgs[2] != "assistant:"+invalidWorkflow {
		t.Errorf("repair conversation %q", msgs)
	}
}

func TestBuildWorkflowReadsFencedJSON(t *testing.T) {
	valid := validWorkflow(t)
	var pretty bytes.Buffer
	_ = json.Indent(&pretty, []byte(valid), "", "  ")
	answers := map[string]string{
		"fenced with prose": "Here is your workflow {as asked}:\n\n```json\n" + pretty.String() + "\n```\n\nImport it into n8n.",
		"thinking first":    "<think>The user wants {a webhook}. A first draft: {\"name\":\"draft\",\"nodes\":[],\"connections\":{}}</think>\n" + pretty.String(),
		"wrapped":           `{"workflow":` + valid + `}`,
	}
	for name, content := range answers {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, completionWith(t, content, "stop"))
			a := newBuilder(t, openai.Config{BaseURL: f.url()})
			doc, err := a.BuildWorkflow(context.Background(), generate("x"), check)
			if err != nil {
				t.Fatal(err)
			}
			if string(doc) != valid || len(f.requests()) != 1 {
				t.Errorf("doc %s after %d requests", doc, len(f.requests()))
			}
		})
	}
}

func TestBuildWorkflowFallsBackWithoutJSONMode(t *testing.T) {
	valid := validWorkflow(t)
	// LM Studio refuses json_object (testdata/lmstudio_error_response_format.json).
	f := newFake(t, status(400, fixture(t, "lmstudio_error_response_format.json")), completionWith(t, valid, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	for range 2 {
		doc, err := a.BuildWorkflow(context.Background(), generate("x"), check)
		if err != nil || string(doc) != valid {
			t.Fatalf("%s, %v", doc, err)
		}
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (refused, again without, and the next build without)", len(reqs))
	}
	for i, want := range []bool{true, false, false} {
		if _, sent := reqs[i].raw["response_format"]; sent != want {
			t.Errorf("request %d: response_format sent %v, want %v", i, sent, want)
		}
	}
}

func TestBuildWorkflowAnswersWithoutJSON(t *testing.T) {
	f := newFake(t, completionWith(t, "I am sorry, I can only help with questions about cooking.", "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	doc, err := a.BuildWorkflow(context.Background(), generate("x"), check)
	if doc != nil {
		t.Errorf("doc %s", doc)
	}
	d := detailOf(t, err)
	if d.Category != workflow.CategoryValidation || !strings.Contains(d.TechnicalDetails, "cooking") {
		t.Errorf("detail %+v", d)
	}
	reqs := f.requests()
	if len(reqs) != 1+openai.DefaultBuilderRepairs {
		t.Fatalf("%d requests, want %d", len(reqs), 1+openai.DefaultBuilderRepairs)
	}
	if got := lastUser(reqs[1]); !strings.Contains(got, "did not contain a workflow") || !strings.Contains(got, "one JSON object") {
		t.Errorf("follow-up %q", got)
	}
}

func TestBuildWorkflowReportsMalformedJSON(t *testing.T) {
	valid := validWorkflow(t)
	trailingComma := strings.Replace(invalidWorkflow, `"parameters":{}}]`, `"parameters":{}},]`, 1)
	f := newFake(t, completionWith(t, trailingComma, "stop"), completionWith(t, valid, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	if doc, err := a.BuildWorkflow(context.Background(), generate("x"), check); err != nil || string(doc) != valid {
		t.Fatalf("%s, %v", doc, err)
	}
	if got := lastUser(f.requests()[1]); !strings.Contains(got, "not valid JSON") || !strings.Contains(got, "line 1, column") {
		t.Errorf("follow-up %q", got)
	}
}

func TestBuildWorkflowCutOff(t *testing.T) {
	valid := validWorkflow(t)
	f := newFake(t, completionWith(t, valid[:len(valid)/2], "length"))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	_, err := a.BuildWorkflow(context.Background(), generate("x"), check)
	if d := detailOf(t, err); d.Category != workflow.CategoryLLMService || !strings.Contains(d.Message, "cut off") {
		t.Errorf("detail %+v", d)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests: a cut-off answer is not repaired", n)
	}
}

func TestBuildWorkflowRepairsExhausted(t *testing.T) {
	f := newFake(t, completionWith(t, invalidWorkflow, "stop"))
	a := newBuilder(t, openai.Config{BaseURL: f.url(), BuilderRepairs: 1})
	doc, err := a.BuildWorkflow(context.Background(), generate("x"), check)
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != invalidWorkflow {
		t.Errorf("doc %s, want the last answer", doc)
	}
	if _, errs := check(doc); len(errs) == 0 {
		t.Error("the returned workflow should still carry its findings")
	}
	if n := len(f.requests()); n != 2 {
		t.Errorf("%d requests, want 2 (one repair)", n)
	}
	never := newFake(t, completionWith(t, invalidWorkflow, "stop"))
	a = newBuilder(t, openai.Config{BaseURL: never.url(), BuilderRepairs: -1})
	if _, err := a.BuildWorkflow(context.Background(), generate("x"), check); err != nil || len(never.requests()) != 1 {
		t.Errorf("BuilderRepairs -1: %v after %d requests", err, len(never.requests()))
	}
}

func TestBuildWorkflowKeepsTheLastWorkflowWhenARepairFails(t *testing.T) {
	f := newFake(t, completionWith(t, invalidWorkflow, "stop"), status(500, fixture(t, "ollama_error_memory.json")))
	a := newBuilder(t, openai.Config{BaseURL: f.url()})
	doc, err := a.BuildWorkflow(context.Background(), generate("x"), check)
	if err != nil || string(doc) != invalidWorkflow {
		t.Errorf("%s, %v", doc, err)
	}
}

func TestBuildWorkflowModelFailures(t *testing.T) {
	cases := []struct {
		name  string
		model http.HandlerFunc
		title string
	}{
		// Ollama out of memory (testdata/ollama_error_memory.json).
		{"out of memory", status(500, fixture(t, "ollama_error_memory.json")), "LLM Service Crashed"},
		// llama-server's own 500 (testdata/llamacpp_error_500.json, recorded).
		{"server error", status(500, fixture(t, "llamacpp_error_500.json")), "LLM Service Error"},
		// llama-server in router mode, unknown model (recorded).
		{"unknown model", status(400, fixture(t, "llamacpp_error_model_not_found.json")), "Model Not Available"},
		// api.openai.com, wrong key (testdata/openai_error_401.json).
		{"unauthorized", status(401, fixture(t, "openai_error_401.json")), "LLM Service Refused the Request"},
		// llama-server, prompt over its context (recorded).
		{"context", status(400, fixture(t, "llamacpp_error_context.json")), "Workflow Too Large for the Model"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t, c.model)
			a := newBuilder(t, openai.Config{BaseURL: f.url(), APIKey: "sk-test-secret"})
			_, err := a.BuildWorkflow(context.Background(), generate("x"), check)
			d := detailOf(t, err)
			if d.Category != workflow.CategoryLLMService || d.Title != c.title || d.TechnicalDetails == "" {
				t.Errorf("detail %+v", d)
			}
			if strings.Contains(d.Message+d.TechnicalDetails, "sk-test-secret") {
				t.Error("the API key leaked into the ErrorDetail")
			}
		})
	}
	t.Run("not running", func(t *testing.T) {
		a := newBuilder(t, openai.Config{BaseURL: closedURL(t)})
		_, err := a.BuildWorkflow(context.Background(), generate("x"), check)
		if d := detailOf(t, err); d.Category != workflow.CategoryLLMService || d.Title != "LLM Service Not Running" {
			t.Errorf("detail %+v", d)
		}
	})
}

// closedURL is an API root where nothing listens.
func closedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return "http://" + addr + "/v1"
}

func TestCheckLLM(t *testing.T) {
	list := func(ids ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			var data []map[string]string
			for _, id := range ids {
				data = append(data, map[string]string{"id": id, "object": "model", "owned_by": "organization_owner"})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
		}
	}
	probe := func(t *testing.T, models http.HandlerFunc, cfg openai.Config) *workflow.ErrorDetail {
		t.Helper()
		f := newFake(t, ok200)
		f.models = models
		cfg.BaseURL = f.url()
		return newBuilder(t, cfg).CheckLLM(context.Background())
	}
	t.Run("available", func(t *testing.T) {
		if d := probe(t, list("gpt-4o-mini", "gpt-4o"), openai.Config{Model: "gpt-4o"}); d != nil {
			t.Errorf("detail %+v", d)
		}
	})
	t.Run("ollama tag", func(t *testing.T) {
		if d := probe(t, list("llama3.2:latest"), openai.Config{Model: "llama3.2"}); d != nil {
			t.Errorf("detail %+v", d)
		}
	})
	t.Run("llama-server list", func(t *testing.T) {
		// Recorded from llama-server (testdata/llamacpp_models.json).
		if d := probe(t, replayJSON(fixture(t, "llamacpp_models.json")), openai.Config{Model: "tiny"}); d != nil {
			t.Errorf("detail %+v", d)
		}
	})
	t.Run("no list", func(t *testing.T) {
		// A server whose answer is not a list answered: it is taken as up.
		if d := probe(t, replayJSON(`{"ok":true}`), openai.Config{Model: "m"}); d != nil {
			t.Errorf("detail %+v", d)
		}
	})
	cases := []struct {
		name   string
		models http.HandlerFunc
		cfg    openai.Config
		title  string
		says   string
	}{
		{"wrong model", list("llama-3.2-3b-instruct", "qwen2.5-7b-instruct"), openai.Config{Model: "llama-3.1-8b"},
			"Model Not Available", "qwen2.5-7b-instruct"},
		{"out of memory", status(500, fixture(t, "ollama_error_memory.json")), openai.Config{}, "LLM Service Crashed", "memory"},
		{"crashed", status(500, fixture(t, "lmstudio_error_crashed.json")), openai.Config{}, "LLM Service Crashed", "crashed"},
		{"exit code 137", status(503, `{"error":"model runner exited with exit code 137"}`), openai.Config{}, "LLM Service Crashed", "137"},
		{"server error", status(500, fixture(t, "llamacpp_error_500.json")), openai.Config{}, "LLM Service Error", "500"},
		{"unauthorized", status(401, fixture(t, "openai_error_401.json")), openai.Config{}, "LLM Service Refused the Request", "401"},
		{"forbidden", status(403, `{"error":"forbidden"}`), openai.Config{APIKey: "k"}, "LLM Service Refused the Request", "403"},
		{"timeout", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		}, openai.Config{HealthTimeout: 200 * time.Millisecond}, "LLM Service Timed Out", "did not respond within 200ms"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := probe(t, c.models, c.cfg)
			if d == nil {
				t.Fatal("no detail")
			}
			detailOf(t, d)
			all := d.Message + " " + d.TechnicalDetails + " " + strings.Join(d.FixSuggestions, " ")
			if d.Category != workflow.CategoryLLMService || d.Title != c.title || !strings.Contains(all, c.says) {
				t.Errorf("detail %+v", d)
			}
		})
	}
	t.Run("not running", func(t *testing.T) {
		d := newBuilder(t, openai.Config{BaseURL: closedURL(t)}).CheckLLM(context.Background())
		if d == nil {
			t.Fatal("no detail")
		}
		detailOf(t, d)
		if d.Category != workflow.CategoryLLMService || d.Title != "LLM Service Not Running" || !strings.Contains(d.Message, "connection refused") {
			t.Errorf("detail %+v", d)
		}
	})
}

// replayJSON answers 200 with a JSON body.
func replayJSON(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}
}

// The server finds the builder by asserting the agent it is given.
func TestAgentIsABuilderForTheServer(t *testing.T) {
	var agent any = newBuilder(t, openai.Config{BaseURL: "http://localhost:1/v1"})
	if _, ok := agent.(op.Builder); !ok {
		t.Error("not an op.Builder")
	}
	if _, ok := agent.(op.LLMChecker); !ok {
		t.Error("not an op.LLMChecker")
	}
}
