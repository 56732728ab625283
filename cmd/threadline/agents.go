package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/threadline/threadline/agent/external"
	"github.com/threadline/threadline/agent/n8n"
	"github.com/threadline/threadline/agent/openai"
	"github.com/threadline/threadline/agent/script"
	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/mcptools"
	"github.com/threadline/threadline/agent/tools/n8napi"
	"github.com/threadline/threadline/agent/upstream"
	"github.com/threadline/threadline/instanceai"
)

// agentNames lists the --agent values.
const agentNames = "script (the deterministic reference agent), openai (an OpenAI-compatible model server), n8n (n8n streaming webhooks), agui (upstream AG-UI agents), external (a producer outside Threadline drives each run through the publish API)"

// agentConfig is the configuration of the real agents.
type agentConfig struct {
	openaiBaseURL      string
	openaiModel        string
	openaiAPIKey       string
	openaiSystemPrompt string
	openaiMaxSteps     int
	openaiTimeout      time.Duration
	openaiOptions      string
	openaiHealth       time.Duration
	openaiRepairs      int

	n8nAPIURL string
	n8nAPIKey string

	mcpConfig string

	n8nWebhooks      string
	n8nWebhookHeader string
	n8nIdleTimeout   time.Duration
	n8nCapture       bool

	aguiAgents           string
	aguiHeader           string
	aguiConnectTimeout   time.Duration
	aguiIdleTimeout      time.Duration
	externalStartTimeout time.Duration
}

func agentFlags(f *envFlags, c *agentConfig) {
	f.String(&c.openaiBaseURL, "openai-base-url", "THREADLINE_OPENAI_BASE_URL", "https://api.openai.com/v1",
		"openai agent: the Chat Completions server's base URL (LM Studio http://localhost:1234/v1, Ollama http://localhost:11434/v1, vLLM http://localhost:8000/v1)")
	f.String(&c.openaiModel, "openai-model", "THREADLINE_OPENAI_MODEL", "", "openai agent: the model name (required)")
	f.Secret(&c.openaiAPIKey, "openai-api-key", "THREADLINE_OPENAI_API_KEY",
		"openai agent: API key sent as a bearer token; OPENAI_API_KEY is used when this is unset; local servers need none")
	f.String(&c.openaiSystemPrompt, "openai-system-prompt", "THREADLINE_OPENAI_SYSTEM_PROMPT", "", "openai agent: system prompt")
	f.Int(&c.openaiMaxSteps, "openai-max-steps", "THREADLINE_OPENAI_MAX_STEPS", 8, "openai agent: model calls per run (bounds the tool loop)")
	f.Duration(&c.openaiTimeout, "openai-timeout", "THREADLINE_OPENAI_TIMEOUT", 60*time.Second,
		"openai agent: wait for the response headers and longest silence between stream chunks")
	f.Duration(&c.openaiHealth, "openai-health-timeout", "THREADLINE_OPENAI_HEALTH_TIMEOUT", openai.DefaultHealthTimeout,
		"openai agent: how long /llm/health and the builder's model check wait for the model list")
	f.Int(&c.openaiRepairs, "openai-builder-repairs", "THREADLINE_OPENAI_BUILDER_REPAIRS", openai.DefaultBuilderRepairs,
		"openai agent: how often the builder sends a generated workflow's validation errors back to the model for a fix (0 = never)")
	f.String(&c.openaiOptions, "openai-request-options", "THREADLINE_OPENAI_REQUEST_OPTIONS", "",
		"openai agent: extra request fields as a JSON object, e.g. {\"temperature\":0.2,\"max_tokens\":1024}")
	f.String(&c.n8nAPIURL, "n8n-api-url", "N8N_API_URL", "",
		"openai agent: an n8n instance (http://localhost:5678) whose public REST API the model may use as tools; none = no n8n tools")
	f.Secret(&c.n8nAPIKey, "n8n-api-key", "N8N_API_KEY", "openai agent: the n8n API key (Settings > n8n API)")
	f.String(&c.mcpConfig, "mcp-config", "THREADLINE_MCP_CONFIG", "",
		"openai agent: an MCP configuration file, {\"mcpServers\": {name: {command, args, env} or {url, headers}}} plus approval policy (docs/mcp.md), whose servers' tools the model may call; none = no MCP tools")
	f.String(&c.n8nWebhooks, "n8n-webhooks", "THREADLINE_N8N_WEBHOOKS", "",
		"n8n agent: streaming webhooks, name=url,name2=url2 (the first is the default); when unset, AGENT_1_URL, AGENT_2_URL, … (names from AGENT_<N>_NAME)")
	f.Secret(&c.n8nWebhookHeader, "n8n-webhook-header", "THREADLINE_N8N_WEBHOOK_HEADER",
		"n8n agent: a header sent on every webhook call, \"Name: value\" (the Webhook node's Header Auth)")
	f.Duration(&c.n8nIdleTimeout, "n8n-idle-timeout", "THREADLINE_N8N_IDLE_TIMEOUT", n8n.DefaultIdleTimeout,
		"n8n agent: longest silence on a webhook's stream (n8n sends keepalives every 30s)")
	f.Bool(&c.n8nCapture, "n8n-capture", "THREADLINE_N8N_CAPTURE", true,
		"n8n agent: read seed-004 JSON objects (tool_call, tool_result, regular_message) out of the workflow's text; false streams the text as it is")
	f.String(&c.aguiAgents, "agui-agents", "THREADLINE_AGUI_AGENTS", "",
		"agui agent: upstream AG-UI endpoints, name=url,name2=url2 (the first is the default; a chat picks one by agent name)")
	f.Secret(&c.aguiHeader, "agui-header", "THREADLINE_AGUI_HEADER",
		"agui agent: a header sent on every upstream call, \"Name: value\" (e.g. \"Authorization: Bearer …\")")
	f.Duration(&c.aguiConnectTimeout, "agui-connect-timeout", "THREADLINE_AGUI_CONNECT_TIMEOUT", upstream.DefaultConnectTimeout,
		"agui agent: longest wait for an upstream's response headers")
	f.Duration(&c.externalStartTimeout, "external-start-timeout", "THREADLINE_EXTERNAL_START_TIMEOUT", time.Minute,
		"external agent: how long a chat's run waits for a producer to attach (POST /publish/threads/{threadId}/runs/{runId}/attach) before it ends in error")
	f.Duration(&c.aguiIdleTimeout, "agui-idle-timeout", "THREADLINE_AGUI_IDLE_TIMEOUT", upstream.DefaultIdleTimeout,
		"agui agent: longest silence on an upstream's event stream (SSE comments count)")
}

// newAgent builds the configured agent. llmHealth is the openai agent's
// /llm/health handler (nil for the others).
func newAgent(c *serveConfig, store instanceai.Store, obs n8n.CaptureObserver, producers *external.Producers,
	mcp *mcptools.Manager, logger *slog.Logger) (agent instanceai.Agent, llmHealth http.Handler, err error) {
	if mcp != nil && c.agent != "openai" {
		return nil, nil, usageError{fmt.Sprintf("--mcp-config: MCP tools are for --agent openai, not %s", c.agent)}
	}
	switch c.agent {
	case "external":
		return producers.Agent(c.agents.externalStartTimeout), nil, nil
	case "script":
		return &script.Agent{Delay: c.scriptDelay}, nil, nil
	case "openai":
		a, err := newOpenAI(&c.agents, c.limits, store, mcp, logger)
		if err != nil {
			return nil, nil, err
		}
		return a, mcpHealth(a.HealthHandler(), mcp), nil
	case "n8n":
		hooks, err := webhooks(c.agents.n8nWebhooks, os.Getenv)
		if err != nil {
			return nil, nil, err
		}
		header, err := headerFlag("n8n-webhook-header", c.agents.n8nWebhookHeader)
		if err != nil {
			return nil, nil, err
		}
		a, err := n8n.New(n8n.Config{Webhooks: hooks, Header: header, IdleTimeout: c.agents.n8nIdleTimeout,
			NoCapture: !c.agents.n8nCapture, Observer: obs, MaxEventBytes: c.limits.MaxEventBytes, Logger: logger})
		if err != nil {
			return nil, nil, usageError{err.Error()}
		}
		return a, nil, nil
	case "agui":
		a, err := newUpstream(&c.agents, c.limits, store, logger)
		if err != nil {
			return nil, nil, err
		}
		return a, a.HealthHandler(), nil
	default:
		return nil, nil, usageError{fmt.Sprintf("--agent %q: available agents are: %s", c.agent, agentNames)}
	}
}

func newOpenAI(c *agentConfig, limits instanceai.Limits, store instanceai.Store, mcp *mcptools.Manager, logger *slog.Logger) (*openai.Agent, error) {
	if c.openaiModel == "" {
		return nil, usageError{"--agent openai needs --openai-model (THREADLINE_OPENAI_MODEL)"}
	}
	key := c.openaiAPIKey
	if key == "" {
		key = os.Getenv("OPENAI_API_KEY")
	}
	var registry *tools.Registry
	if c.n8nAPIURL != "" {
		set, err := n8napi.Tools(n8napi.Config{BaseURL: c.n8nAPIURL, APIKey: c.n8nAPIKey})
		if err != nil {
			return nil, usageError{fmt.Sprintf("--n8n-api-url / --n8n-api-key: %v", err)}
		}
		if registry, err = tools.NewRegistry(set...); err != nil {
			return nil, err
		}
	}
	if mcp != nil {
		// The servers' tools as they are at each run: a server that starts
		// late, restarts or changes its list is followed.
		if _, err := mcp.Tools(); err != nil {
			return nil, usageError{fmt.Sprintf("--mcp-config: %v", err)}
		}
		registry = registry.WithSource(mcp.Current)
	}
	a, err := openai.New(openai.Config{
		BaseURL: c.openaiBaseURL, Model: c.openaiModel, APIKey: key, SystemPrompt: c.openaiSystemPrompt,
		Tools: registry, Store: store, MaxSteps: c.openaiMaxSteps, RequestTimeout: c.openaiTimeout, Logger: logger,
		RequestOptions: json.RawMessage(c.openaiOptions), HealthTimeout: c.openaiHealth, BuilderRepairs: repairs(c.openaiRepairs),
		MaxEventBytes: limits.MaxEventBytes,
	})
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return a, nil
}

// webhooks reads the n8n agent's webhook list: the flag's name=url pairs,
// or else the AGENT_<N>_URL / AGENT_<N>_NAME variables, N = 1, 2, … without
// gaps. A webhook without a name is called agent<N>.
func webhooks(list string, getenv func(string) string) ([]n8n.Webhook, error) {
	var out []n8n.Webhook
	if strings.TrimSpace(list) != "" {
		pairs, err := namedURLs("n8n-webhooks", list)
		for _, p := range pairs {
			out = append(out, n8n.Webhook{Name: p[0], URL: p[1]})
		}
		return out, err
	}
	for n := 1; ; n++ {
		url := getenv(fmt.Sprintf("AGENT_%d_URL", n))
		if url == "" {
			break
		}
		name := getenv(fmt.Sprintf("AGENT_%d_NAME", n))
		if name == "" {
			name = "agent" + strconv.Itoa(n)
		}
		out = append(out, n8n.Webhook{Name: name, URL: url})
	}
	if len(out) == 0 {
		return nil, usageError{"--agent n8n needs webhooks: --n8n-webhooks name=url (THREADLINE_N8N_WEBHOOKS) or AGENT_1_URL"}
	}
	return out, nil
}

func newUpstream(c *agentConfig, limits instanceai.Limits, store instanceai.Store, logger *slog.Logger) (*upstream.Agent, error) {
	if strings.TrimSpace(c.aguiAgents) == "" {
		return nil, usageError{"--agent agui needs upstream agents: --agui-agents name=url (THREADLINE_AGUI_AGENTS)"}
	}
	pairs, err := namedURLs("agui-agents", c.aguiAgents)
	if err != nil {
		return nil, err
	}
	var ups []upstream.Upstream
	for _, p := range pairs {
		ups = append(ups, upstream.Upstream{Name: p[0], URL: p[1]})
	}
	header, err := headerFlag("agui-header", c.aguiHeader)
	if err != nil {
		return nil, err
	}
	a, err := upstream.New(upstream.Config{Upstreams: ups, Header: header, Store: store, ConnectTimeout: c.aguiConnectTimeout,
		IdleTimeout: c.aguiIdleTimeout, MaxEventBytes: limits.MaxEventBytes, Logger: logger})
	if err != nil {
		return nil, usageError{err.Error()}
	}
	return a, nil
}

// namedURLs reads a flag's name=url,name2=url2 list; an entry without a
// name is called agent<N>.
func namedURLs(flag, list string) ([][2]string, error) {
	var out [][2]string
	for i, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		name, url, named := strings.Cut(item, "=")
		if !named {
			name, url = "agent"+strconv.Itoa(i+1), item
		}
		if strings.TrimSpace(url) == "" {
			return nil, usageError{fmt.Sprintf("--%s entry %d %q: want name=url", flag, i+1, item)}
		}
		out = append(out, [2]string{strings.TrimSpace(name), strings.TrimSpace(url)})
	}
	return out, nil
}

// headerFlag parses the flag's "Name: value".
func headerFlag(flag, s string) (http.Header, error) {
	if s == "" {
		return nil, nil
	}
	// The value is a secret: errors show at most the name.
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return nil, usageError{"--" + flag + ": want \"Name: value\" (no colon found)"}
	}
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " \t") {
		return nil, usageError{fmt.Sprintf("--%s: want \"Name: value\"; %q is not a header name", flag, name)}
	}
	h := http.Header{}
	h.Set(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
	return h, nil
}

// repairs turns the flag's count into Config.BuilderRepairs, where 0 means
// the default and a negative count none.
func repairs(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}
