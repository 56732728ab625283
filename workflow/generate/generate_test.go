package generate

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/threadline/threadline/workflow"
)

func TestGenerate(t *testing.T) {
	for _, c := range []struct {
		description string
		name        string // "" skips the check
		types       []string
		main        []string
		ai          []string
	}{
		{
			description: "Create a workflow that watches for new files in a folder and sends an email notification",
			name:        "Watches for new files in a folder and sends an email",
			types:       []string{"localFileTrigger", "emailSend"},
			main:        []string{"Local File Trigger>Send Email"},
		},
		{
			description: "Send welcome email to new customers",
			name:        "Send welcome email to new customers",
			types:       []string{"manualTrigger", "emailSend"},
			main:        []string{"When clicking ‘Execute workflow’>Send Email"},
		},
		{
			description: "When a webhook is called, save the data to the MySQL database and post a Slack message to #sales",
			types:       []string{"webhook", "mySql", "slack"},
			main:        []string{"Insert into MySQL>Send Slack Message", "Webhook>Insert into MySQL"},
		},
		{
			description: "Every day fetch https://api.example.com/orders, append them to Google Sheets and log the result",
			types:       []string{"scheduleTrigger", "httpRequest", "googleSheets", "set"},
			main: []string{"Append to Google Sheets>Log Event", "HTTP Request>Append to Google Sheets",
				"Schedule Trigger>HTTP Request"},
		},
		{
			description: "When a new email arrives, summarize it with an AI agent that has memory, then send a Slack message",
			types:       []string{"emailReadImap", "agent", "lmChatOpenAi", "memoryBufferWindow", "slack"},
			main:        []string{"AI Agent>Send Slack Message", "Email Trigger (IMAP)>AI Agent"},
			ai:          []string{"OpenAI Chat Model>AI Agent", "Simple Memory>AI Agent"},
		},
		{
			description: "Build a chatbot",
			types:       []string{"chatTrigger", "agent", "lmChatOpenAi", "memoryBufferWindow"},
			main:        []string{"When chat message received>AI Agent"},
			ai:          []string{"OpenAI Chat Model>AI Agent", "Simple Memory>AI Agent"},
		},
		{
			description: "On form submission, send a Slack message if the budget is over 1000",
			types:       []string{"formTrigger", "if", "slack"},
			main:        []string{"If>Send Slack Message", "On form submission>If"},
		},
		{
			description: "Send an email to customers only if their address is valid",
			types:       []string{"manualTrigger", "if", "set", "emailSend"},
			main: []string{"Validate Email:1>Flag Invalid Email", "Validate Email>Send Email",
				"When clicking ‘Execute workflow’>Validate Email"},
		},
		{
			description: "Call the API every hour, with error handling",
			types:       []string{"scheduleTrigger", "httpRequest", "errorTrigger", "set"},
			main:        []string{"Error Trigger>Log Error", "Schedule Trigger>HTTP Request"},
		},
		{
			description: "Make an API call every hour and post the result to Slack",
			types:       []string{"scheduleTrigger", "httpRequest", "slack"},
			main:        []string{"HTTP Request>Send Slack Message", "Schedule Trigger>HTTP Request"},
		},
		{
			description: "Send a new email to every lead that comes in through the API call",
			types:       []string{"webhook", "emailSend"},
			main:        []string{"Webhook>Send Email"},
		},
		{
			description: "Format the information from the profile and post it to Slack",
			types:       []string{"manualTrigger", "slack"},
			main:        []string{manual + ">Send Slack Message"},
		},
		{
			description: "Insert every order into Postgres when an HTTP request comes in, then post to Slack",
			types:       []string{"webhook", "postgres", "slack"},
			main:        []string{"Insert into Postgres>Send Slack Message", "Webhook>Insert into Postgres"},
		},
	} {
		t.Run(c.description, func(t *testing.T) {
			w, err := Generate(c.description)
			if err != nil {
				t.Fatal(err)
			}
			checkStructure(t, w)
			if c.name != "" && w.Name != c.name {
				t.Errorf("name %q; want %q", w.Name, c.name)
			}
			if got := types(w); !reflect.DeepEqual(got, c.types) {
				t.Errorf("types %v; want %v", got, c.types)
			}
			if got := edges(w, workflow.Main); !reflect.DeepEqual(got, c.main) {
				t.Errorf("main connections %v; want %v", got, c.main)
			}
			if got := append(edges(w, workflow.AILanguageModel), edges(w, workflow.AIMemory)...); !reflect.DeepEqual(got, c.ai) && (len(got) > 0 || len(c.ai) > 0) {
				t.Errorf("AI connections %v; want %v", got, c.ai)
			}
			again, err := Generate(c.description)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(mustJSON(t, w), mustJSON(t, again)) {
				t.Error("the same description gave different documents")
			}
		})
	}
}

func TestGenerateParameters(t *testing.T) {
	w, err := Generate("Send welcome email to new customers")
	if err != nil {
		t.Fatal(err)
	}
	if got := param(t, w, "Send Email", "subject"); got != "Welcome!" {
		t.Errorf("subject %v", got)
	}
	if got := param(t, w, "Send Email", "toEmail"); got != "={{ $json.email }}" {
		t.Errorf("toEmail %v: customers are addressed from the item", got)
	}

	w, err = Generate("Watch the folder /srv/inbox for new files and email me")
	if err != nil {
		t.Fatal(err)
	}
	if got := param(t, w, "Local File Trigger", "path"); got != "/srv/inbox" {
		t.Errorf("path %v", got)
	}
	if got := param(t, w, "Local File Trigger", "events"); !reflect.DeepEqual(got, []any{"add"}) {
		t.Errorf("events %v", got)
	}

	w, err = Generate("Post a slack message to #Ops on cron 0 9 * * 1")
	if err != nil {
		t.Fatal(err)
	}
	rule := param(t, w, "Schedule Trigger", "rule").(map[string]any)["interval"].([]any)[0].(map[string]any)
	if rule["field"] != "cronExpression" || rule["expression"] != "0 9 * * 1" {
		t.Errorf("schedule rule %v", rule)
	}
	if got := param(t, w, "Send Slack Message", "channelId").(map[string]any)["value"]; got != "#ops" {
		t.Errorf("channel %v", got)
	}

	w, err = Generate("Every 15 minutes send a Slack message")
	if err != nil {
		t.Fatal(err)
	}
	rule = param(t, w, "Schedule Trigger", "rule").(map[string]any)["interval"].([]any)[0].(map[string]any)
	if rule["field"] != "minutes" || rule["minutesInterval"] != 15.0 {
		t.Errorf("schedule rule %v", rule)
	}

	w, err = Generate("When a webhook receives an order, ask the AI agent and email the answer")
	if err != nil {
		t.Fatal(err)
	}
	if n := w.NodeByName("Webhook"); n.WebhookID == "" || !uuidShape.MatchString(n.WebhookID) {
		t.Errorf("webhookId %q", n.WebhookID)
	}
	if got := param(t, w, "Send Email", "text"); got != "={{ $json.output }}" {
		t.Errorf("a step after the agent reads its output, got %v", got)
	}
}

// IDs come from the description: another description, other IDs.
func TestGenerateIDsFollowTheDescription(t *testing.T) {
	a, err := Generate("Send welcome email to new customers")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate("Send a goodbye email to old customers")
	if err != nil {
		t.Fatal(err)
	}
	if a.Nodes[1].ID == b.Nodes[1].ID {
		t.Errorf("two descriptions share node id %s", a.Nodes[1].ID)
	}
}

func TestGenerateNotUnderstood(t *testing.T) {
	for _, d := range []string{"", "   ", "Make something nice"} {
		w, err := Generate(d)
		var nu *NotUnderstoodError
		if !errors.As(err, &nu) || w != nil {
			t.Errorf("Generate(%q) = %v, %v; want a NotUnderstoodError", d, w, err)
			continue
		}
		if nu.Description != d || !strings.Contains(err.Error(), "could not understand") {
			t.Errorf("Generate(%q): %v", d, err)
		}
	}
}

func TestWorkflowName(t *testing.T) {
	for in, want := range map[string]string{
		"Create a workflow that sends a daily report": "Sends a daily report",
		"please build an automation to sync leads.":   "Sync leads",
		"a workflow for invoices":                     "Invoices",
		"Create a Slack alert":                        "Create a Slack alert",
		"workflow":                                    "Workflow",
		strings.Repeat("word ", 30):                   strings.TrimSpace("Word " + strings.Repeat("word ", 11)),
	} {
		if got := workflowName(in); got != want {
			t.Errorf("workflowName(%q) = %q; want %q", in, got, want)
		}
	}
}
