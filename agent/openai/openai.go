// Package openai is an agent that talks to any OpenAI-compatible Chat
// Completions server (OpenAI, LM Studio, Ollama, vLLM, llama.cpp): it sends
// the thread's conversation with the available tools, streams the answer as
// Instance AI events, runs the server-side tools the model calls (asking a
// person first when a tool needs approval), hands client tools to the
// client, and loops until the model answers without calling a tool.
//
// Failures end the run with a *instanceai.ProviderError whose message says
// what happened and what to do, and whose details carry the upstream's
// words (never the API key).
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/threadline/threadline/agent/conversation"
	"github.com/threadline/threadline/agent/internal/bound"
	"github.com/threadline/threadline/agent/internal/healthcache"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/builder/op"
	"github.com/threadline/threadline/instanceai"
	"github.com/threadline/threadline/internal/tracing"
)

// Defaults of Config.
const (
	DefaultMaxSteps       = 8
	DefaultMaxRetries     = 2
	DefaultRequestTimeout = 60 * time.Second
	DefaultHealthTimeout  = 30 * time.Second
	DefaultHealthCacheTTL = healthcache.DefaultTTL
	DefaultBuilderRepairs = 2
)

// Config configures the agent.
type Config struct {
	// BaseURL is the API root, e.g. https://api.openai.com/v1,
	// http://localhost:1234/v1 (LM Studio), http://localhost:11434/v1
	// (Ollama), http://localhost:8000/v1 (vLLM). Required, absolute http(s).
	BaseURL string
	// Model is the model name the server knows. Required.
	Model string
	// APIKey is sent as Authorization: Bearer (optional: local servers need
	// none).
	APIKey string
	// Provider is the name reported in errors and usage; default "openai"
	// for api.openai.com, else "openai-compatible".
	Provider     string
	SystemPrompt string
	// Tools are the server-side tools (may be nil).
	Tools *tools.Registry
	// Store is read for the thread's stored conversation when a run brings
	// none (run.History nil), and for Resume.
	Store instanceai.Store
	// MaxSteps bounds the model calls of one run (the tool loop); default 8.
	MaxSteps int
	// MaxRetries bounds the retries of one model call after a 429, a 5xx or
	// a connection reset before any event of the call was emitted; 0 means
	// the default 2, negative means none.
	MaxRetries int
	// RequestTimeout bounds the wait for the response headers and every
	// silence between stream chunks; default 60 s.
	RequestTimeout time.Duration
	// HealthTimeout bounds the health probe (/llm/health and the builder's
	// LLM check); default 30 s, the seed's health check timeout.
	HealthTimeout time.Duration
	// HealthCacheTTL is how long /llm/health answers from its last probe
	// (default 5 s): the endpoint is public, and each probe is a request
	// to the model server, so probes are shared and spaced.
	HealthCacheTTL time.Duration
	// RequestOptions are extra fields of every Chat Completions request
	// (temperature, max_tokens, top_p, seed, logit_bias, a server's own
	// parameters…), as a JSON object. The fields the agent owns (model,
	// messages, stream, stream_options, tools) cannot be set here.
	RequestOptions json.RawMessage
	// MaxEventBytes is the core's bound on one event (--max-event-bytes;
	// 0 means instanceai.DefaultMaxEventBytes). One frame of the model's
	// stream may be that and an envelope (bound.Envelope): a larger one
	// ends the run with instanceai.CodeEventTooLarge. A tool result whose
	// tool-result event would be larger is not stored nor sent to the
	// model: the call is a tool-error saying so, and the run goes on.
	MaxEventBytes int
	// BuilderRepairs bounds how often the builder sends a workflow that
	// fails validation back to the model to be fixed; 0 means the default
	// 2, negative means never.
	BuilderRepairs int
	HTTPClient     *http.Client
	Logger         *slog.Logger
}

// Agent is the OpenAI-compatible agent. It implements instanceai.Agent and
// instanceai.Resumer, and the builder API's op.Builder and op.LLMChecker.
type Agent struct {
	cfg       Config
	options   map[string]json.RawMessage // Config.RequestOptions
	chatURL   string
	modelsURL string
	client    *http.Client
	log       *slog.Logger
	local     bool
	// noStreamOptions is set once the server refused stream_options: later
	// requests leave it out instead of failing first every time.
	noStreamOptions atomic.Bool
	// noResponseFormat is set once the server refused response_format
	// json_object (the builder's JSON mode).
	noResponseFormat atomic.Bool
	// health is the last /llm/health probe, shared by its callers.
	health healthcache.Cache[healthAnswer]
}

var (
	_ instanceai.Agent   = (*Agent)(nil)
	_ instanceai.Resumer = (*Agent)(nil)
	_ op.Builder         = (*Agent)(nil)
	_ op.LLMChecker      = (*Agent)(nil)
)

// New checks the configuration, applies the defaults and returns the agent.
func New(cfg Config) (*Agent, error) {
	base := strings.TrimRight(strings.TrimSpace(cfg.BaseURL), "/")
	if base == "" {
		return nil, errors.New("openai: Config.BaseURL is required (for example http://localhost:11434/v1)")
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("openai: Config.BaseURL %q must be an absolute http(s) URL such as http://localhost:11434/v1", cfg.BaseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("openai: Config.BaseURL %q must not have a query or fragment", cfg.BaseURL)
	}
	cfg.BaseURL = base
	cfg.Model = strings.TrimSpace(cfg.Model)
	if cfg.Model == "" {
		return nil, errors.New("openai: Config.Model is required")
	}
	if cfg.MaxSteps < 0 {
		return nil, fmt.Errorf("openai: Config.MaxSteps must not be negative, got %d", cfg.MaxSteps)
	}
	if cfg.RequestTimeout < 0 {
		return nil, fmt.Errorf("openai: Config.RequestTimeout must not be negative, got %s", cfg.RequestTimeout)
	}
	if cfg.HealthTimeout < 0 {
		return nil, fmt.Errorf("openai: Config.HealthTimeout must not be negative, got %s", cfg.HealthTimeout)
	}
	if cfg.HealthCacheTTL < 0 {
		return nil, fmt.Errorf("openai: Config.HealthCacheTTL must not be negative, got %s", cfg.HealthCacheTTL)
	}
	if cfg.MaxEventBytes < 0 {
		return nil, fmt.Errorf("openai: Config.MaxEventBytes must not be negative, got %d", cfg.MaxEventBytes)
	}
	cfg.MaxEventBytes = bound.Event(cfg.MaxEventBytes)
	options, err := requestOptions(cfg.RequestOptions)
	if err != nil {
		return nil, err
	}
	if cfg.Provider == "" {
		cfg.Provider = "openai-compatible"
		if strings.EqualFold(u.Hostname(), "api.openai.com") {
			cfg.Provider = "openai"
		}
	}
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = DefaultMaxSteps
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.HealthTimeout == 0 {
		cfg.HealthTimeout = DefaultHealthTimeout
	}
	if cfg.HealthCacheTTL == 0 {
		cfg.HealthCacheTTL = DefaultHealthCacheTTL
	}
	switch {
	case cfg.BuilderRepairs == 0:
		cfg.BuilderRepairs = DefaultBuilderRepairs
	case cfg.BuilderRepairs < 0:
		cfg.BuilderRepairs = 0
	}
	// No client timeout when none is given: a stream may last minutes.
	// RequestTimeout bounds the silences instead. The model requests
	// carry the run's trace context (traceparent).
	client := tracing.Client(cfg.HTTPClient)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Agent{cfg: cfg, chatURL: base + "/chat/completions", modelsURL: base + "/models",
		client: client, log: log, local: isLocalHost(u.Hostname()), options: options}, nil
}

// Run answers the run's message: it sends the conversation to the model and
// loops over tool calls until the model answers, a client tool has to run
// in the client, or the step limit is reached.
func (a *Agent) Run(ctx context.Context, run *instanceai.Run) error {
	history := run.History
	if history == nil && a.cfg.Store != nil {
		err := run.Sync(ctx)
		var h []instanceai.HistoryMessage
		if err == nil {
			h, err = conversation.Load(ctx, a.cfg.Store, run.ThreadID, run.ID)
		}
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("could not read the thread's conversation: %w", err)
		}
		history = h
		if tr := run.ToolResult; tr != nil {
			// Kept although Sync makes the stored result readable: the
			// client's own text is what the model should see.
			history = conversation.WithToolResult(history, tr.ToolCallID, tr.Content)
		}
	}
	l := a.newLoop(run, history, run.Tools)
	if run.ToolResult == nil {
		// A run that answers a client tool has no new user message: the
		// conversation ends with the tool's answer. (Its Message, when a
		// client sent one, is the earlier user message the history holds.)
		l.msgs = append(l.msgs, instanceai.HistoryMessage{Role: instanceai.RoleUser, Content: run.Message, Attachments: run.Attachments})
	}
	return l.loop(ctx)
}

// Resume continues a run suspended on a confirmation in an earlier process:
// it reads the run's conversation from the log, settles the call the answer
// is for (and the other calls of that step still without an outcome), then
// continues the tool loop.
func (a *Agent) Resume(ctx context.Context, run *instanceai.Run, req *instanceai.ConfirmationRequest, answer instanceai.Answer) error {
	if a.cfg.Store == nil {
		return errors.New("the openai agent cannot resume a run without Config.Store")
	}
	history, open, steps, err := conversation.LoadRun(ctx, a.cfg.Store, run.ThreadID, run.ID)
	if err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return fmt.Errorf("could not read the run's conversation: %w", err)
	}
	l := a.newLoop(run, history, nil)
	l.resuming = true
	l.steps = steps
	calls := make([]stepCall, 0, len(open))
	for _, c := range open {
		calls = append(calls, stepCall{id: c.ID, name: c.Name, args: c.Arguments})
	}
	asked := req.InputType != "" && req.InputType != instanceai.InputApproval
	stop, err := l.settle(ctx, calls, &decided{toolCallID: req.ToolCallID, answer: answer, asked: asked})
	if err != nil || stop {
		return err
	}
	return l.loop(ctx)
}

// isLocalHost reports whether host is this machine or a private network:
// what the health answer's is_local means.
func isLocalHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || strings.HasSuffix(h, ".local") ||
		strings.HasSuffix(h, ".internal") || strings.HasSuffix(h, ".lan") {
		return true
	}
	ip := parseIP(h)
	return ip != nil && (ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified())
}

// ownedFields are the request fields the agent sets itself.
var ownedFields = []string{"model", "messages", "stream", "stream_options", "tools"}

// requestOptions checks Config.RequestOptions: a JSON object that does not
// set a field the agent owns.
func requestOptions(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	var options map[string]json.RawMessage
	if err := json.Unmarshal(raw, &options); err != nil || options == nil {
		return nil, fmt.Errorf("openai: Config.RequestOptions must be a JSON object such as {\"temperature\":0.2,\"max_tokens\":1024}")
	}
	for _, f := range ownedFields {
		if _, ok := options[f]; ok {
			return nil, fmt.Errorf("openai: Config.RequestOptions must not set %q: the agent sets it", f)
		}
	}
	return options, nil
}
