package mcptools_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/threadline/threadline/agent/tools/mcptools"
	"github.com/threadline/threadline/instanceai"
)

func TestMCPApprovalPolicy(t *testing.T) {
	yes, no := true, false
	readOnly := &mcp.Tool{Name: "read", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}
	destructive := &mcp.Tool{Name: "rm", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}}
	additive := &mcp.Tool{Name: "mkdir", Annotations: &mcp.ToolAnnotations{DestructiveHint: &no}}
	defaulted := &mcp.Tool{Name: "write", Annotations: &mcp.ToolAnnotations{}} // destructiveHint absent: true
	bare := &mcp.Tool{Name: "bare"}                                            // no annotations: the spec's defaults
	hints := mcptools.Server{Approval: mcptools.ApprovalHints}
	for _, tc := range []struct {
		name     string
		cfg      mcptools.Server
		tool     *mcp.Tool
		ask      bool
		severity string
	}{
		{"read-only runs", hints, readOnly, false, instanceai.SeverityInfo},
		{"destructive asks", hints, destructive, true, instanceai.SeverityDestructive},
		{"not destructive runs", hints, additive, false, instanceai.SeverityWarning},
		{"destructiveHint absent asks", hints, defaulted, true, instanceai.SeverityDestructive},
		{"no annotations asks", hints, bare, true, instanceai.SeverityDestructive},
		{"server always", mcptools.Server{Approval: mcptools.ApprovalAlways}, readOnly, true, instanceai.SeverityInfo},
		{"server never", mcptools.Server{Approval: mcptools.ApprovalNever}, destructive, false, instanceai.SeverityDestructive},
		{"tool always over hints", mcptools.Server{Approval: mcptools.ApprovalHints,
			Tools: map[string]mcptools.ToolPolicy{"read": {Approval: mcptools.ApprovalAlways}}}, readOnly, true, instanceai.SeverityInfo},
		{"tool never over server always", mcptools.Server{Approval: mcptools.ApprovalAlways,
			Tools: map[string]mcptools.ToolPolicy{"rm": {Approval: mcptools.ApprovalNever}}}, destructive, false, instanceai.SeverityDestructive},
		{"tool hints keeps server", mcptools.Server{Approval: mcptools.ApprovalNever,
			Tools: map[string]mcptools.ToolPolicy{"rm": {Approval: mcptools.ApprovalHints}}}, destructive, false, instanceai.SeverityDestructive},
	} {
		ask, sev := mcptools.NeedsApproval(tc.cfg, tc.tool)
		if ask != tc.ask || sev != tc.severity {
			t.Errorf("%s: ask %v severity %s, want %v %s", tc.name, ask, sev, tc.ask, tc.severity)
		}
	}
}

func TestMCPToolNames(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	taken := map[string]string{}
	plain := mcptools.ToolName("fs", "read_file", taken)
	if plain != "fs__read_file" {
		t.Errorf("plain %q", plain)
	}
	dotted := mcptools.ToolName("my.server", "get.thing", taken)
	if !valid.MatchString(dotted) || !strings.HasPrefix(dotted, "my_server__get_thing_") {
		t.Errorf("dotted %q", dotted)
	}
	if again := mcptools.ToolName("my.server", "get.thing", taken); again != dotted {
		t.Errorf("not deterministic: %q then %q", dotted, again)
	}
	long := mcptools.ToolName("server", strings.Repeat("x", 80), taken)
	if !valid.MatchString(long) || len(long) != 64 {
		t.Errorf("long %q", long)
	}
	// A name that sanitises into one already taken gets a hash suffix.
	taken["a__b_c"] = "a/b_c"
	clash := mcptools.ToolName("a", "b.c", taken)
	if clash == "a__b_c" || !valid.MatchString(clash) {
		t.Errorf("clash %q", clash)
	}
}
