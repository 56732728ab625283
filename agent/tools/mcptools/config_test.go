package mcptools_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/threadline/threadline/agent/tools/mcptools"
)

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

func TestMCPConfigParse(t *testing.T) {
	raw := `{
	  "mcpServers": {
	    "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${HOME_DIR}"],
	           "env": {"TOKEN": "${SECRET}", "PLAIN": "a$b"}, "approval": "always",
	           "tools": {"read_file": {"approval": "never"}, "move_file": {"disabled": true}}, "timeout": "90s"},
	    "web": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${SECRET}"}, "timeout": 5},
	    "off": {"command": "x", "disabled": true, "alwaysAllow": ["ignored"]}
	  },
	  "otherClientKey": true
	}`
	f, err := mcptools.Parse([]byte(raw), env(map[string]string{"HOME_DIR": "/home/a", "SECRET": "s3"}))
	if err != nil {
		t.Fatal(err)
	}
	fs := f.Servers["fs"]
	if fs.Command != "npx" || fs.Args[2] != "/home/a" || fs.Env["TOKEN"] != "s3" || fs.Env["PLAIN"] != "a$b" ||
		fs.Approval != mcptools.ApprovalAlways || fs.Tools["read_file"].Approval != mcptools.ApprovalNever ||
		!fs.Tools["move_file"].Disabled || fs.Timeout != 90*time.Second {
		t.Errorf("fs: %+v", fs)
	}
	web := f.Servers["web"]
	if web.URL != "https://mcp.example.com/mcp" || web.Headers["Authorization"] != "Bearer s3" || web.Approval != mcptools.ApprovalHints || web.Timeout != 5*time.Second {
		t.Errorf("web: %+v", web)
	}
	if !f.Servers["off"].Disabled {
		t.Errorf("off: %+v", f.Servers["off"])
	}
}

func TestMCPConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct{ raw, want string }{
		{`[]`, "not a JSON object"},
		{`{}`, `no "mcpServers" key`},
		{`{"mcpServers": []}`, `"mcpServers" must be an object`},
		{`{"mcpServers": {"a b": {"command": "x"}}}`, `mcpServers."a b"`},
		{`{"mcpServers": {"s": {}}}`, "mcpServers.s: needs a command (stdio) or a url"},
		{`{"mcpServers": {"s": {"command": "x", "url": "http://h/mcp"}}}`, "mcpServers.s: set either command"},
		{`{"mcpServers": {"s": {"command": "x", "args": "-y"}}}`, "mcpServers.s.args: must be an array of strings"},
		{`{"mcpServers": {"s": {"command": "x", "env": {"A": 1}}}}`, "mcpServers.s.env: must be an object of string values"},
		{`{"mcpServers": {"s": {"command": "x", "env": {"A": "${NOPE}"}}}}`, "mcpServers.s.env.A: ${NOPE} is not set"},
		{`{"mcpServers": {"s": {"command": "x", "approval": "sometimes"}}}`, `mcpServers.s.approval: "sometimes" must be`},
		{`{"mcpServers": {"s": {"command": "x", "tools": {"t": {"approval": "maybe"}}}}}`, `mcpServers.s.tools.t.approval: "maybe"`},
		{`{"mcpServers": {"s": {"command": "x", "timeout": "soon"}}}`, `mcpServers.s.timeout: "soon" must be a positive duration`},
		{`{"mcpServers": {"s": {"command": "x", "timeout": -1}}}`, `mcpServers.s.timeout: -1 must be positive`},
		{`{"mcpServers": {"s": {"url": "ftp://h/mcp"}}}`, `mcpServers.s.url: "ftp://h/mcp" must be an absolute http(s) URL`},
		{`{"mcpServers": {"s": {"url": "http://h/mcp", "type": "sse"}}}`, "mcpServers.s.type: the SSE transport"},
		{`{"mcpServers": {"s": {"url": "http://h/mcp", "env": {"A": "b"}}}}`, "args, env and cwd are for a command server"},
		{`{"mcpServers": {"s": {"command": "x", "headers": {"A": "b"}}}}`, "mcpServers.s.headers: headers are for a url server"},
	} {
		_, err := mcptools.Parse([]byte(tc.raw), env(nil))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.raw, err, tc.want)
		}
	}
}

func TestMCPConfigReadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(path, []byte(`{"mcpServers": {"s": {"command": 3}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := mcptools.ReadFile(path, env(nil))
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "mcpServers.s.command: must be a string") {
		t.Errorf("error %v", err)
	}
	if _, err := mcptools.ReadFile(filepath.Join(t.TempDir(), "none.json"), env(nil)); err == nil {
		t.Error("a missing file is no error")
	}
}

// docExample is the first ```json block of the document at path.
func docExample(t *testing.T, path string) []byte {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "```json\n")
	example, _, closed := strings.Cut(after, "```")
	if !ok || !closed {
		t.Fatalf("%s has no ```json example", path)
	}
	return []byte(example)
}

// TestMCPReadmeExample: the configuration the README shows loads.
func TestMCPReadmeExample(t *testing.T) {
	f, err := mcptools.Parse(docExample(t, "../../../README.md"), env(map[string]string{"TICKETS_TOKEN": "t0k"}))
	if err != nil {
		t.Fatalf("the README's example: %v", err)
	}
	if fs, tickets := f.Servers["fs"], f.Servers["tickets"]; len(f.Servers) != 2 || fs.Command != "npx" ||
		tickets.Headers["Authorization"] != "Bearer t0k" || tickets.Approval != mcptools.ApprovalAlways {
		t.Errorf("servers %+v", f.Servers)
	}
}

// TestMCPDocExample: the configuration file docs/mcp.md shows loads, and
// means what the guide says of it.
func TestMCPDocExample(t *testing.T) {
	f, err := mcptools.Parse(docExample(t, "../../../docs/mcp.md"), env(map[string]string{"TICKETS_TOKEN": "t0k"}))
	if err != nil {
		t.Fatalf("the guide's example: %v", err)
	}
	fs, everything, tickets, old := f.Servers["fs"], f.Servers["everything"], f.Servers["tickets"], f.Servers["old"]
	switch {
	case len(f.Servers) != 4:
		t.Errorf("servers %v", f.Servers)
	case fs.Command != "npx" || !fs.Tools["read_media_file"].Disabled || fs.Tools["create_directory"].Approval != mcptools.ApprovalAlways:
		t.Errorf("fs %+v", fs)
	case everything.Timeout != 2*time.Minute || everything.Env["DEBUG"] != "0":
		t.Errorf("everything %+v", everything)
	case tickets.URL == "" || tickets.Headers["Authorization"] != "Bearer t0k" || tickets.Approval != mcptools.ApprovalAlways:
		t.Errorf("tickets %+v", tickets)
	case !old.Disabled:
		t.Errorf("old %+v", old)
	}
}
