// Package generate is the reference agent's workflow builder: it turns a
// plain-English description into an n8n workflow, and applies change
// requests and test feedback to one, by keywords and without a model, so
// the builder API works offline and its tests are reproducible.
//
// What it reads:
//   - Triggers (the first one written wins; manual when none): webhook /
//     "http request comes in" / "api call", schedule words ("every day",
//     "hourly", "cron", …), files and folders (Local File Trigger), new
//     email or inbox (IMAP), forms, chats.
//   - Steps, kept in the order written: email, Slack, HTTP/API, database
//     (Postgres, or MySQL when named; "database logging" is one insert),
//     Google Sheets, logging (an Edit Fields node stamping the item), an
//     If for conditions and validation (an email-format check when the
//     text is about addresses), an AI Agent with its OpenAI model (and a
//     window memory for chats or when memory is asked for).
//   - Error handling: an Error Trigger branch that records the failure.
//     n8n runs a workflow holding an Error Trigger as its own error
//     workflow. The alternative, a node's onError "continueErrorOutput"
//     setting with an error branch, is a node field the workflow model
//     does not carry, so it would not survive a round trip.
//
// Node IDs, webhook IDs and assignment IDs are UUIDs derived from the
// description (and, for changes, the workflow's name), so the same input
// always gives the same bytes.
package generate

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/threadline/threadline/workflow"
)

// NotUnderstoodError is a description that named nothing the builder can
// build or change; Reason says what was missing.
type NotUnderstoodError struct {
	Description string
	Reason      string
}

func (e *NotUnderstoodError) Error() string {
	return fmt.Sprintf("could not understand %q: %s", e.Description, e.Reason)
}

// ErrNoWorkflow is a change asked of no workflow.
var ErrNoWorkflow = errors.New("generate: no workflow to change")

// Generate builds a workflow from a description: its trigger, then its
// steps chained in the order the description names them.
func Generate(description string) (*workflow.Workflow, error) {
	text := normalise(description)
	if text == "" {
		return nil, &NotUnderstoodError{description, "the description is empty"}
	}
	kind, at, triggerFound := findTrigger(text)
	rest := text
	if triggerFound {
		rest = mask(text, at)
	}
	steps := orderSteps(findActions(rest))
	if kind == triggerChat && !contains(steps, actionAgent) {
		steps = append(steps, actionAgent) // a chat needs something to answer it
	}
	withErrors := errorHandlingPattern.MatchString(text)
	if !triggerFound && len(steps) == 0 && !withErrors {
		return nil, &NotUnderstoodError{description, "it names no trigger, step or error handling the builder knows"}
	}

	name := workflowName(description)
	w := &workflow.Workflow{Name: name, Nodes: []workflow.Node{}, Connections: workflow.Connections{}, Settings: []byte(`{"executionOrder":"v1"}`)}
	g := &graph{w: w, seed: "generate\x00" + text}
	c := stepContext{text: text, original: description, name: name, trigger: kind}

	prev := g.addTrigger(kind, c, [2]float64{0, 0})
	out := 0
	for i, step := range steps {
		c.previous = g.node(prev).Type
		pos := [2]float64{float64(i+1) * stepX, 0}
		var cur string
		if step == actionIf && emailWordPattern.MatchString(text) {
			// A condition about addresses: valid ones go on, the others
			// are flagged on the false output.
			cur = g.addEmailCheck("={{ $json.email }}", pos)
			flag := g.addInvalidEmailFlag("={{ $json.email }}", [2]float64{pos[0] + stepX, stepY})
			g.connect(cur, 1, flag, workflow.Main)
		} else {
			cur = g.addAction(step, c, pos)
		}
		g.connect(prev, out, cur, workflow.Main)
		prev, out = cur, 0
	}
	if withErrors {
		g.addErrorBranch()
	}
	return w, nil
}

func contains[T comparable](list []T, v T) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

var requestPreamble = regexp.MustCompile(`(?i)^(please\s+)?((create|build|make|generate|design|set\s+up|setup|write)\s+(me\s+)?(an?\s+|the\s+)?(n8n\s+)?(workflow|automation|flow)?|(an?\s+|the\s+)?(n8n\s+)?(workflow|automation|flow))\s*(that|which|to|for|where)?\s+`)

// maxNameLen keeps generated names readable in n8n's workflow list.
const maxNameLen = 60

// workflowName names a workflow after its description, without the
// request around it ("Create a workflow that …"), cut at a word boundary.
func workflowName(description string) string {
	s := strings.Join(strings.Fields(description), " ")
	if m := requestPreamble.FindStringIndex(s); m != nil && m[1] < len(s) {
		s = s[m[1]:]
	}
	s = strings.TrimRight(s, " .!?,;:")
	if len(s) > maxNameLen {
		cut := strings.LastIndex(s[:maxNameLen+1], " ")
		if cut <= 0 {
			cut = maxNameLen
		}
		s = strings.TrimRight(s[:cut], " ,;:")
	}
	if s == "" {
		return "Generated Workflow"
	}
	r, size := utf8.DecodeRuneInString(s)
	return string(unicode.ToUpper(r)) + s[size:]
}
