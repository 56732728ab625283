package mcptools_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/tools"
	"github.com/threadline/threadline/agent/tools/mcptools"
)

// startSized serves sizedServer over streamable HTTP, answering with JSON
// bodies, or with SSE when stream is set.
func startSized(t *testing.T, stream bool) string {
	t.Helper()
	srv := sizedServer()
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: !stream}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// counted counts the bytes read of the answers' bodies.
type counted struct {
	read atomic.Int64
}

func (c *counted) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		resp.Body = &countedBody{ReadCloser: resp.Body, n: &c.read}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// sizedTool is the server's one tool, once it is connected after
// restarts restarts.
func sizedTool(t *testing.T, m *mcptools.Manager, restarts int) tools.Tool {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for st := m.Status()["s"]; st.State != mcptools.StateConnected || st.Restarts < restarts; st = m.Status()["s"] {
		if time.Now().After(deadline) {
			t.Fatalf("the server is %+v", m.Status()["s"])
		}
		select {
		case <-m.Changed("s"):
		case <-time.After(time.Second):
		}
	}
	ts, err := m.Tools()
	if err != nil || len(ts) != 1 {
		t.Fatalf("tools %v, %v", ts, err)
	}
	return ts[0]
}

// An answer larger than the bound on one MCP message is not read past the
// bound, whatever the transport: the call is an error that names the
// bound and tells the model to ask for less, and the server, whose
// connection the go-sdk gives up, is restarted and answers again.
func TestAnAnswerOverTheMessageBound(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 20
	for _, tc := range []struct {
		name   string
		server func(t *testing.T) mcptools.Server
		// bytes is the answer's text; says the bound the error names.
		bytes int
		says  string
	}{
		// The go-sdk's CommandTransport keeps its own bound on a line.
		{"stdio", func(*testing.T) mcptools.Server {
			return mcptools.Server{Command: exe, Env: map[string]string{sizedServerEnv: "1"}}
		}, mcp.DefaultMaxLineLength + 1<<20, "larger than 16 MiB, the bound on one MCP message"},
		{"http json", func(t *testing.T) mcptools.Server { return mcptools.Server{URL: startSized(t, false)} },
			8 * limit, "larger than 1 MiB, the bound on one MCP message"},
		{"http sse", func(t *testing.T) mcptools.Server { return mcptools.Server{URL: startSized(t, true)} },
			8 * limit, "larger than 1 MiB, the bound on one MCP message"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := &counted{}
			m := mcptools.New(mcptools.File{Servers: map[string]mcptools.Server{"s": tc.server(t)}},
				mcptools.Options{MaxMessageBytes: limit, MinBackoff: 10 * time.Millisecond, HTTPClient: &http.Client{Transport: body}})
			t.Cleanup(func() { _ = m.Close() })
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			tool := sizedTool(t, m, 0)
			before := body.read.Load()
			_, err := tool.Execute(context.Background(), []byte(`{"bytes":`+itoa(tc.bytes)+`}`))
			if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "asking for less") {
				t.Fatalf("a call answered with %d bytes: %v, want an error saying %q", tc.bytes, err, tc.says)
			}
			// Over stdio the go-sdk reads the pipe; over SSE it drains the
			// rest of the answer, discarding it, to reuse the connection.
			if n := body.read.Load() - before; tc.name == "http json" && n > limit+64<<10 {
				t.Fatalf("read %d bytes of an answer bounded at %d", n, limit)
			}
			out, err := sizedTool(t, m, 1).Execute(context.Background(), []byte(`{"bytes":5}`))
			if err != nil || string(out) != `"xxxxx"` {
				t.Fatalf("after the restart: %s, %v", out, err)
			}
		})
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
