package mcptools

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/instanceai"
)

func NeedsApproval(cfg Server, t *mcp.Tool) (bool, string) { return needsApproval(cfg, t) }

func ToolName(server, tool string, taken map[string]string) string {
	return toolName(server, tool, taken)
}

// ElicitQuestions and ElicitAnswer expose the elicitation form mapping.
func ElicitQuestions(schema any) ([]instanceai.Question, string, error) {
	f, err := elicitForm(schema)
	if err != nil {
		return nil, "", err
	}
	var qs []instanceai.Question
	for _, p := range f.props {
		qs = append(qs, instanceai.Question{ID: p.name, Question: p.question, Type: p.kind, Options: p.options})
	}
	return qs, f.text, nil
}

func ElicitAnswer(schema any, a instanceai.Answer) (*mcp.ElicitResult, error) {
	f, err := elicitForm(schema)
	if err != nil {
		return nil, err
	}
	return f.result(a), nil
}
