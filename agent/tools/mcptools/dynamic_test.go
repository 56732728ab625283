package mcptools_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/mcptools"
)

// lateServer is an MCP server (the go-sdk's own, over streamable HTTP)
// that answers 503 until it is up, as a server that starts after
// Threadline does.
type lateServer struct {
	srv *mcp.Server
	up  atomic.Bool
	url string
}

func startLateServer(t *testing.T) *lateServer {
	t.Helper()
	l := &lateServer{srv: mcp.NewServer(&mcp.Implementation{Name: "late", Version: "1"}, nil)}
	l.addTool("first")
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return l.srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !l.up.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	l.url = ts.URL
	return l
}

type noArgs struct{}

func (l *lateServer) addTool(name string) {
	mcp.AddTool(l.srv, &mcp.Tool{Name: name, Description: "says its name", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, noArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
		})
}

// offered waits until the registry offers exactly want (by name), failing
// after a generous bound.
func offered(t *testing.T, reg *tools.Registry, want ...string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []string
		for _, tool := range reg.List() {
			got = append(got, tool.Name)
		}
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry offers %v, want %v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A server that is down when Threadline starts offers no tools; once it
// answers (a restart with backoff reaches it), its tools are offered and
// run, without a restart of Threadline. Then it adds a tool and says so
// (tools/list_changed): the new tool is offered too.
func TestMCPServerThatStartsLateAndChangesItsTools(t *testing.T) {
	late := startLateServer(t)
	m := mcptools.New(mcptools.File{Servers: map[string]mcptools.Server{"late": {URL: late.url}}},
		mcptools.Options{MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, ConnectTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = m.Close() })
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("Start reported no failure for a server that answers 503")
	}
	own, err := tools.NewRegistry(tools.Tool{Name: "own",
		Execute: func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	reg := own.WithSource(m.Current)
	if st := m.Status()["late"]; st.State == mcptools.StateConnected || st.Tools != 0 {
		t.Fatalf("a server that is down: %+v", st)
	}
	offered(t, reg, "own")

	late.up.Store(true)
	offered(t, reg, "own", "late__first")
	tool, ok := reg.Get("late__first")
	if !ok || tool.NeedsApproval {
		t.Fatalf("late__first: %+v %v", tool, ok)
	}
	out, err := tool.Execute(context.Background(), json.RawMessage(`{}`))
	if err != nil || string(out) != `"first"` {
		t.Fatalf("the late server's tool answered %s, %v", out, err)
	}

	late.addTool("second")
	offered(t, reg, "own", "late__first", "late__second")
	if st := m.Status()["late"]; st.State != mcptools.StateConnected || st.Tools != 2 {
		t.Fatalf("after the change: %+v", st)
	}
}
