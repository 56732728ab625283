package generate

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/threadline/threadline/workflow"
)

func generated(t *testing.T, description string) *workflow.Workflow {
	t.Helper()
	w, err := Generate(description)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func realWorkflow(t *testing.T, file string) *workflow.Workflow {
	t.Helper()
	data, err := os.ReadFile("../../agent/n8n/testdata/real/" + file)
	if err != nil {
		t.Fatal(err)
	}
	w, err := workflow.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

const (
	welcome = "Send welcome email to new customers"
	manual  = "When clicking ‘Execute workflow’"
)

func TestModify(t *testing.T) {
	for _, c := range []struct {
		base, change string
		types        []string
		main         []string
	}{
		{
			base: welcome, change: "Add database logging after sending the email",
			types: []string{"manualTrigger", "emailSend", "postgres"},
			main:  []string{manual + ">Send Email", "Send Email>Log to Postgres"},
		},
		{
			base: welcome, change: "Add logging to the MySQL database",
			types: []string{"manualTrigger", "emailSend", "mySql"},
			main:  []string{manual + ">Send Email", "Send Email>Log to MySQL"},
		},
		{
			base: welcome, change: "Add error handling for invalid emails",
			types: []string{"manualTrigger", "emailSend", "if", "set"},
			main: []string{manual + ">Validate Email", "Validate Email:1>Flag Invalid Email",
				"Validate Email>Send Email"},
		},
		{
			base: welcome, change: "Add error handling",
			types: []string{"manualTrigger", "emailSend", "errorTrigger", "set"},
			main:  []string{"Error Trigger>Log Error", manual + ">Send Email"},
		},
		{
			base: "When a webhook is called send an email and post a Slack message", change: "Add an HTTP request after the email",
			types: []string{"webhook", "emailSend", "slack", "httpRequest"},
			main:  []string{"HTTP Request>Send Slack Message", "Send Email>HTTP Request", "Webhook>Send Email"},
		},
		{
			base: welcome, change: "Post a Slack message before the email",
			types: []string{"manualTrigger", "emailSend", "slack"},
			main:  []string{manual + ">Send Slack Message", "Send Slack Message>Send Email"},
		},
		{
			base: welcome, change: "Also write it to a Google Sheet and log it",
			types: []string{"manualTrigger", "emailSend", "googleSheets", "set"},
			main:  []string{"Append to Google Sheets>Log Event", manual + ">Send Email", "Send Email>Append to Google Sheets"},
		},
		{
			base: welcome, change: "Send another email",
			types: []string{"manualTrigger", "emailSend", "emailSend"},
			main:  []string{manual + ">Send Email", "Send Email>Send Email1"},
		},
		{
			base: "When a webhook is called send an email and post a Slack message", change: "Remove the Slack message",
			types: []string{"webhook", "emailSend"},
			main:  []string{"Webhook>Send Email"},
		},
		{
			base: "When a webhook is called send an email and post a Slack message", change: "delete the email step",
			types: []string{"webhook", "slack"},
			main:  []string{"Webhook>Send Slack Message"},
		},
		{
			base: "When a new email arrives, summarize it with an AI agent with memory, then send a Slack message", change: "remove the AI agent",
			types: []string{"emailReadImap", "slack"},
			main:  []string{"Email Trigger (IMAP)>Send Slack Message"},
		},
		{
			base: "Send an email to customers only if their address is valid", change: "remove Validate Email",
			types: []string{"manualTrigger", "emailSend"},
			main:  []string{manual + ">Send Email"},
		},
		{
			base: "Call the API every hour, with error handling", change: "Remove the error handling",
			types: []string{"scheduleTrigger", "httpRequest"},
			main:  []string{"Schedule Trigger>HTTP Request"},
		},
		{
			base: welcome, change: `Rename "Send Email" to Greet Customer`,
			types: []string{"manualTrigger", "emailSend"},
			main:  []string{manual + ">Greet Customer"},
		},
	} {
		t.Run(c.change, func(t *testing.T) {
			base := generated(t, c.base)
			before := mustJSON(t, base)
			w, err := Modify(base, c.change)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, mustJSON(t, base)) {
				t.Error("Modify changed its input")
			}
			checkStructure(t, w)
			if w.Name != base.Name {
				t.Errorf("name %q; a change keeps %q", w.Name, base.Name)
			}
			if got := types(w); !reflect.DeepEqual(got, c.types) {
				t.Errorf("types %v; want %v", got, c.types)
			}
			sort.Strings(c.main)
			if got := edges(w, workflow.Main); !reflect.DeepEqual(got, c.main) {
				t.Errorf("main connections %v; want %v", got, c.main)
			}
			again, err := Modify(base, c.change)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mustJSON(t, w), mustJSON(t, again)) {
				t.Error("the same change gave different documents")
			}
		})
	}
}

// An inserted step pushes what follows it right, so nodes do not overlap.
func TestModifyShiftsTheNodesAfterAnInsertion(t *testing.T) {
	base := generated(t, "When a webhook is called send an email and post a Slack message")
	w, err := Modify(base, "Add an HTTP request after the email")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]float64]string{}
	for _, n := range w.Nodes {
		if other, ok := seen[n.Position]; ok {
			t.Errorf("%s and %s both at %v", n.Name, other, n.Position)
		}
		seen[n.Position] = n.Name
	}
	if x := w.NodeByName("Send Slack Message").Position[0]; x != 3*stepX {
		t.Errorf("Slack at x=%v; want %v", x, 3*stepX)
	}
}

// The validation checks the address the email step sends to.
func TestModifyValidatesTheRecipient(t *testing.T) {
	w, err := Modify(generated(t, welcome), "Add error handling for invalid emails")
	if err != nil {
		t.Fatal(err)
	}
	conds := param(t, w, "Validate Email", "conditions").(map[string]any)["conditions"].([]any)
	cond := conds[0].(map[string]any)
	if cond["leftValue"] != "={{ $json.email }}" || cond["rightValue"] != emailRegex {
		t.Errorf("condition %v", cond)
	}
	if _, err := Modify(w, "validate the email address"); err == nil || !strings.Contains(err.Error(), "already validated") {
		t.Errorf("validating twice: %v", err)
	}
}

// A change to a workflow n8n itself exported: the new step follows the
// agent and reads its output; the agent's model, memory and tool stay.
func TestModifyRecordedWorkflow(t *testing.T) {
	base := realWorkflow(t, "workflow-streaming.create-body.json")
	before := mustJSON(t, base)
	w, err := Modify(base, "Send a Slack message after the AI agent")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, mustJSON(t, base)) {
		t.Error("Modify changed its input")
	}
	checkStructure(t, w)
	if got, want := edges(w, workflow.Main), []string{"AI Agent>Send Slack Message", "Webhook>AI Agent"}; !reflect.DeepEqual(got, want) {
		t.Errorf("main connections %v; want %v", got, want)
	}
	if got := edges(w, workflow.AITool); !reflect.DeepEqual(got, []string{"Calculator>AI Agent"}) {
		t.Errorf("tool connections %v", got)
	}
	if got := param(t, w, "Send Slack Message", "text"); got != "={{ $json.output }}" {
		t.Errorf("Slack text %v", got)
	}
}

func TestModifyNotUnderstood(t *testing.T) {
	base := generated(t, welcome)
	withErrors, err := Modify(base, "add error handling")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		w              *workflow.Workflow
		change, reason string
	}{
		{base, "", "empty"},
		{base, "make it nicer", "names no step"},
		{base, "remove the fax machine", `no node matches "fax machine"`},
		{base, "remove the trigger", "trigger"},
		{base, "rename the fax to Printer", `no node matches "fax"`},
		{base, "The email sending works", "already has a email step"},
		{withErrors, "add error handling", "already has an Error Trigger"},
	} {
		w, err := Modify(c.w, c.change)
		var nu *NotUnderstoodError
		if !errors.As(err, &nu) || w != nil || !strings.Contains(nu.Reason, c.reason) {
			t.Errorf("Modify(%q) = %v, %v; want a NotUnderstoodError saying %q", c.change, w, err, c.reason)
		}
	}
	if _, err := Modify(nil, "add logging"); !errors.Is(err, ErrNoWorkflow) {
		t.Errorf("Modify(nil) = %v", err)
	}
}

func TestIterate(t *testing.T) {
	base := generated(t, welcome)
	before := mustJSON(t, base)
	const (
		feedback   = "The email sending works but we need to handle cases where the recipient is invalid"
		additional = "Also add logging to track all email attempts"
	)
	w, err := Iterate(base, feedback, additional)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, mustJSON(t, base)) {
		t.Error("Iterate changed its input")
	}
	checkStructure(t, w)
	if got, want := types(w), []string{"manualTrigger", "emailSend", "if", "set", "set"}; !reflect.DeepEqual(got, want) {
		t.Errorf("types %v; want %v", got, want)
	}
	want := []string{manual + ">Validate Email", "Send Email>Log Event", "Validate Email:1>Flag Invalid Email", "Validate Email>Send Email"}
	sort.Strings(want)
	if got := edges(w, workflow.Main); !reflect.DeepEqual(got, want) {
		t.Errorf("main connections %v; want %v", got, want)
	}
	again, err := Iterate(base, feedback, additional)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustJSON(t, w), mustJSON(t, again)) {
		t.Error("the same iteration gave different documents")
	}

	// Feedback with nothing to change is fine when the requirements say
	// what to do, and an error when neither does.
	if w, err := Iterate(base, "Looks good", "post a Slack message too"); err != nil || w.NodeByName("Send Slack Message") == nil {
		t.Errorf("Iterate with only requirements: %v", err)
	}
	var nu *NotUnderstoodError
	if _, err := Iterate(base, "Looks good", ""); !errors.As(err, &nu) || !strings.Contains(err.Error(), "Looks good") {
		t.Errorf("Iterate with nothing to do: %v", err)
	}
	if _, err := Iterate(base, " ", ""); !errors.As(err, &nu) {
		t.Errorf("Iterate with empty texts: %v", err)
	}
}

// Changes to every workflow n8n exported stay well formed.
func TestModifyRecordedWorkflowsStayWellFormed(t *testing.T) {
	for _, f := range []string{"workflow-2items.create-body.json", "workflow-lastNode.create-body.json", "workflow-streaming.create-body.json"} {
		for _, change := range []string{"Add logging", "Add error handling", "Remove the AI agent", "Post to Slack before the agent"} {
			w, err := Modify(realWorkflow(t, f), change)
			if err != nil {
				t.Errorf("%s: %q: %v", f, change, err)
				continue
			}
			t.Run(f+"/"+change, func(t *testing.T) { checkStructure(t, w) })
		}
	}
}
