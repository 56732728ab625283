package mcptools_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sizedServerEnv makes the test binary an MCP stdio server with the tool
// "sized" (see sizedServer), so that a stdio server needs no node.
const sizedServerEnv = "THREADLINE_TEST_MCP_SIZED_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(sizedServerEnv) == "1" {
		_ = sizedServer().Run(context.Background(), &mcp.StdioTransport{})
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type sizeArgs struct {
	Bytes int `json:"bytes"`
}

// sizedServer has one read-only tool, "sized", that answers with a text
// of the number of bytes it is asked for.
func sizedServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "sized", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "sized", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, a sizeArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strings.Repeat("x", a.Bytes)}}}, nil, nil
		})
	return srv
}
