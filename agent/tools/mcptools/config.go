package mcptools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Approval policies of a server or a tool.
const (
	// ApprovalHints asks for a tool the server does not say is read-only
	// and whose destructiveHint is not false (the MCP defaults: an
	// unannotated tool asks). The server's default.
	ApprovalHints = "hints"
	// ApprovalAlways asks before every call.
	ApprovalAlways = "always"
	// ApprovalNever runs every call without asking.
	ApprovalNever = "never"
)

// DefaultTimeout bounds one tool call when the server sets no timeout.
const DefaultTimeout = 60 * time.Second

// File is a configuration file in the mcpServers shape other MCP clients
// (Claude Desktop, Cursor, VS Code, Cline) read, plus Threadline's own
// optional keys per server.
type File struct {
	Servers map[string]Server
}

// Server configures one MCP server: a command to run over stdio, or the URL
// of a streamable-HTTP endpoint.
type Server struct {
	// Command, Args, Env and Cwd start a stdio server. Env is added to
	// Threadline's own environment.
	Command string
	Args    []string
	Env     map[string]string
	Cwd     string
	// URL and Headers reach a streamable-HTTP server.
	URL     string
	Headers map[string]string
	// Approval is the server's policy: ApprovalHints (default),
	// ApprovalAlways or ApprovalNever.
	Approval string
	// Tools overrides the policy per tool, by the server's tool name.
	Tools map[string]ToolPolicy
	// Timeout bounds one call (DefaultTimeout when zero).
	Timeout time.Duration
	// Disabled leaves the server out: not started, its tools not offered.
	Disabled bool
}

// ToolPolicy is a per-tool override.
type ToolPolicy struct {
	// Approval is ApprovalAlways or ApprovalNever ("" or ApprovalHints
	// keeps the server's policy).
	Approval string
	// Disabled hides the tool from the model.
	Disabled bool
}

// stdio reports whether the server runs as a command.
func (s Server) stdio() bool { return s.Command != "" }

// ReadFile reads and checks a configuration file; ${VAR} in env values,
// header values, args and the URL are taken from getenv.
func ReadFile(path string, getenv func(string) (string, bool)) (File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("MCP configuration: %w", err)
	}
	f, err := Parse(raw, getenv)
	if err != nil {
		return File{}, fmt.Errorf("MCP configuration %s: %w", path, err)
	}
	return f, nil
}

// Parse reads a configuration in the mcpServers shape. Its errors name the
// server and the key. Keys it does not know are ignored, so that a file
// written for another client loads.
func Parse(raw []byte, getenv func(string) (string, bool)) (File, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return File{}, fmt.Errorf("not a JSON object: %w", err)
	}
	servers, ok := top["mcpServers"]
	if !ok {
		return File{}, fmt.Errorf(`no "mcpServers" key: the file must be {"mcpServers": {"name": {"command": …} or {"url": …}}}`)
	}
	var byName map[string]json.RawMessage
	if err := json.Unmarshal(servers, &byName); err != nil || byName == nil {
		return File{}, fmt.Errorf(`"mcpServers" must be an object of servers by name`)
	}
	f := File{Servers: map[string]Server{}}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		s, err := parseServer(name, byName[name], getenv)
		if err != nil {
			return File{}, err
		}
		f.Servers[name] = s
	}
	return f, nil
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

func parseServer(name string, raw json.RawMessage, getenv func(string) (string, bool)) (Server, error) {
	at := func(key string) string { return fmt.Sprintf("mcpServers.%s.%s", name, key) }
	if !serverName.MatchString(name) {
		return Server{}, fmt.Errorf("mcpServers.%q: a server name is 1-63 letters, digits, '_', '-' or '.', starting with a letter or digit", name)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil || keys == nil {
		return Server{}, fmt.Errorf("mcpServers.%s: must be an object", name)
	}
	var s Server
	var typ string
	fields := []struct {
		key string
		dst any
	}{
		{"command", &s.Command}, {"args", &s.Args}, {"env", &s.Env}, {"cwd", &s.Cwd},
		{"url", &s.URL}, {"headers", &s.Headers}, {"type", &typ},
		{"approval", &s.Approval}, {"disabled", &s.Disabled},
	}
	for _, fl := range fields {
		v, ok := keys[fl.key]
		if !ok || bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue
		}
		if err := json.Unmarshal(v, fl.dst); err != nil {
			return Server{}, fmt.Errorf("%s: %s", at(fl.key), typeError(fl.dst))
		}
	}
	if v, ok := keys["timeout"]; ok {
		d, err := parseTimeout(v)
		if err != nil {
			return Server{}, fmt.Errorf("%s: %w", at("timeout"), err)
		}
		s.Timeout = d
	}
	if v, ok := keys["tools"]; ok {
		var tools map[string]json.RawMessage
		if err := json.Unmarshal(v, &tools); err != nil {
			return Server{}, fmt.Errorf(`%s: must be an object of tool names to {"approval": "always"|"never"}`, at("tools"))
		}
		s.Tools = map[string]ToolPolicy{}
		for tool, tv := range tools {
			var p struct {
				Approval string `json:"approval"`
				Disabled bool   `json:"disabled"`
			}
			if err := json.Unmarshal(tv, &p); err != nil {
				return Server{}, fmt.Errorf(`%s: must be {"approval": "always"|"never", "disabled": bool}`, at("tools."+tool))
			}
			switch p.Approval {
			case "", ApprovalHints, ApprovalAlways, ApprovalNever:
			default:
				return Server{}, fmt.Errorf(`%s: %q must be "always", "never" or "hints"`, at("tools."+tool+".approval"), p.Approval)
			}
			s.Tools[tool] = ToolPolicy{Approval: p.Approval, Disabled: p.Disabled}
		}
	}
	switch s.Approval {
	case "":
		s.Approval = ApprovalHints
	case ApprovalHints, ApprovalAlways, ApprovalNever:
	default:
		return Server{}, fmt.Errorf(`%s: %q must be "hints", "always" or "never"`, at("approval"), s.Approval)
	}
	switch strings.ToLower(typ) {
	case "", "stdio", "http", "streamable-http", "streamablehttp":
	case "sse":
		return Server{}, fmt.Errorf(`%s: the SSE transport (protocol 2024-11-05) is not supported; use the server's streamable-HTTP endpoint`, at("type"))
	default:
		return Server{}, fmt.Errorf(`%s: %q must be "stdio" or "http"`, at("type"), typ)
	}
	s.Command = strings.TrimSpace(s.Command)
	s.URL = strings.TrimSpace(s.URL)
	switch {
	case s.Command != "" && s.URL != "":
		return Server{}, fmt.Errorf("mcpServers.%s: set either command (stdio) or url (streamable HTTP), not both", name)
	case s.Command == "" && s.URL == "":
		return Server{}, fmt.Errorf("mcpServers.%s: needs a command (stdio) or a url (streamable HTTP)", name)
	}
	var err error
	expand := func(key, v string) string {
		if err != nil {
			return v
		}
		var out string
		out, err = expandVars(v, getenv)
		if err != nil {
			err = fmt.Errorf("%s: %w", at(key), err)
		}
		return out
	}
	for i, a := range s.Args {
		s.Args[i] = expand(fmt.Sprintf("args[%d]", i), a)
	}
	for k, v := range s.Env {
		s.Env[k] = expand("env."+k, v)
	}
	for k, v := range s.Headers {
		s.Headers[k] = expand("headers."+k, v)
	}
	s.URL = expand("url", s.URL)
	if err != nil {
		return Server{}, err
	}
	if s.URL != "" {
		u, perr := url.Parse(s.URL)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return Server{}, fmt.Errorf("%s: %q must be an absolute http(s) URL", at("url"), s.URL)
		}
	}
	if s.stdio() && len(s.Headers) > 0 {
		return Server{}, fmt.Errorf("%s: headers are for a url server; a command server takes env", at("headers"))
	}
	if !s.stdio() && (len(s.Env) > 0 || len(s.Args) > 0 || s.Cwd != "") {
		return Server{}, fmt.Errorf("mcpServers.%s: args, env and cwd are for a command server; a url server takes headers", name)
	}
	return s, nil
}

// parseTimeout reads "90s"-style durations, or a number of seconds (the
// shape Cline writes).
func parseTimeout(v json.RawMessage) (time.Duration, error) {
	var secs float64
	if err := json.Unmarshal(v, &secs); err == nil {
		if secs <= 0 {
			return 0, fmt.Errorf("%v must be positive", secs)
		}
		return time.Duration(secs * float64(time.Second)), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return 0, fmt.Errorf(`must be a duration such as "60s" or a number of seconds`)
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf(`%q must be a positive duration such as "60s" or "2m"`, s)
	}
	return d, nil
}

func typeError(dst any) string {
	switch dst.(type) {
	case *string:
		return "must be a string"
	case *[]string:
		return "must be an array of strings"
	case *map[string]string:
		return "must be an object of string values"
	case *bool:
		return "must be true or false"
	}
	return "has the wrong type"
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandVars replaces ${VAR} with the variable's value; an unset variable
// is an error (a missing secret should not start a server with an empty
// one). A lone $ is kept.
func expandVars(s string, getenv func(string) (string, bool)) (string, error) {
	var missing string
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		name := m[2 : len(m)-1]
		v, ok := getenv(name)
		if !ok && missing == "" {
			missing = name
		}
		return v
	})
	if missing != "" {
		return "", fmt.Errorf("${%s} is not set in the environment", missing)
	}
	return out, nil
}
