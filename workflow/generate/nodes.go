package generate

import (
	"strconv"
	"strings"

	"github.com/threadline/threadline/workflow"
)

// Node types and the type versions n8n 1.x exports for them (checked
// against n8n's node catalog; the AI versions are those of the workflows
// recorded from n8n 1.123).
const (
	typeManualTrigger = "n8n-nodes-base.manualTrigger"
	typeWebhook       = "n8n-nodes-base.webhook"
	typeSchedule      = "n8n-nodes-base.scheduleTrigger"
	typeFileTrigger   = "n8n-nodes-base.localFileTrigger"
	typeIMAP          = "n8n-nodes-base.emailReadImap"
	typeFormTrigger   = "n8n-nodes-base.formTrigger"
	typeChatTrigger   = "@n8n/n8n-nodes-langchain.chatTrigger"
	typeErrorTrigger  = "n8n-nodes-base.errorTrigger"
	typeEmailSend     = "n8n-nodes-base.emailSend"
	typeSlack         = "n8n-nodes-base.slack"
	typeHTTPRequest   = "n8n-nodes-base.httpRequest"
	typePostgres      = "n8n-nodes-base.postgres"
	typeMySQL         = "n8n-nodes-base.mySql"
	typeSheets        = "n8n-nodes-base.googleSheets"
	typeSet           = "n8n-nodes-base.set"
	typeIf            = "n8n-nodes-base.if"
	typeAgent         = "@n8n/n8n-nodes-langchain.agent"
	typeOpenAIModel   = "@n8n/n8n-nodes-langchain.lmChatOpenAi"
	typeMemory        = "@n8n/n8n-nodes-langchain.memoryBufferWindow"
)

// emailRegex is what the validation IF matches a recipient against.
const emailRegex = `^[^\s@]+@[^\s@]+\.[^\s@]+$`

// stepContext is what a node's parameters depend on: the description, the
// trigger the data comes from and the step before.
type stepContext struct {
	text     string // normalised description
	original string // the description as written, for paths, URLs, channels
	name     string // workflow name
	trigger  triggerKind
	previous string // type of the node feeding this one
}

// payload is the expression a step reads the incoming item with.
func (c stepContext) payload() string {
	switch {
	case c.previous == typeAgent:
		return "={{ $json.output }}"
	case c.trigger == triggerEmail && c.previous == typeIMAP:
		return "={{ $json.text }}"
	case c.trigger == triggerFile && c.previous == typeFileTrigger:
		return "=New file: {{ $json.path }}"
	}
	return "={{ JSON.stringify($json, null, 2) }}"
}

type obj = map[string]any

// resourceLocator is n8n's value for a "resourceLocator" parameter.
func resourceLocator(mode, value string) obj {
	return obj{"__rl": true, "mode": mode, "value": value}
}

// addTrigger adds the trigger node of kind at pos and returns its name.
func (g *graph) addTrigger(kind triggerKind, c stepContext, pos [2]float64) string {
	switch kind {
	case triggerWebhook:
		name := g.add("Webhook", typeWebhook, 2.1, pos, obj{"httpMethod": "POST", "path": slug(c.name), "options": obj{}})
		g.setWebhookID(name)
		return name
	case triggerSchedule:
		return g.add("Schedule Trigger", typeSchedule, 1.2, pos, obj{"rule": obj{"interval": []obj{scheduleRule(c.text)}}})
	case triggerFile:
		path := "/data/incoming"
		if m := pathPattern.FindStringSubmatch(c.original); m != nil {
			path = strings.TrimSpace(m[0])
		}
		return g.add("Local File Trigger", typeFileTrigger, 1, pos, obj{"triggerOn": "folder", "path": path, "events": []string{"add"}, "options": obj{}})
	case triggerEmail:
		return g.add("Email Trigger (IMAP)", typeIMAP, 2, pos, obj{"options": obj{}})
	case triggerForm:
		name := g.add("On form submission", typeFormTrigger, 2.2, pos, obj{
			"formTitle": c.name,
			"formFields": obj{"values": []obj{
				{"fieldLabel": "Name", "requiredField": true},
				{"fieldLabel": "Email", "fieldType": "email", "requiredField": true},
			}},
			"options": obj{},
		})
		g.setWebhookID(name)
		return name
	case triggerChat:
		name := g.add("When chat message received", typeChatTrigger, 1.1, pos, obj{"options": obj{}})
		g.setWebhookID(name)
		return name
	}
	return g.add("When clicking ‘Execute workflow’", typeManualTrigger, 1, pos, obj{})
}

// setWebhookID gives a webhook-listening node the stable webhookId n8n
// registers its URL under.
func (g *graph) setWebhookID(name string) {
	n := g.node(name)
	n.WebhookID = uuid(g.seed + "\x00webhook\x00" + name)
}

// scheduleRule reads the interval from the description: a cron
// expression, "every 5 minutes", hourly, weekly, monthly, else daily.
func scheduleRule(text string) obj {
	if m := cronPattern.FindString(text); m != "" {
		return obj{"field": "cronExpression", "expression": strings.TrimSpace(m)}
	}
	if m := everyNPattern.FindStringSubmatch(text); m != nil {
		field := m[2] + "s"
		return obj{"field": field, m[2] + "sInterval": atoi(m[1])}
	}
	switch {
	case strings.Contains(text, "minute"):
		return obj{"field": "minutes"}
	case strings.Contains(text, "hour"):
		return obj{"field": "hours"}
	case strings.Contains(text, "week") || weekdayPattern.MatchString(text):
		return obj{"field": "weeks"}
	case strings.Contains(text, "month"):
		return obj{"field": "months"}
	}
	return obj{"field": "days", "triggerAtHour": 9}
}

func atoi(s string) int {
	n := 0
	for _, r := range s {
		n = n*10 + int(r-'0')
	}
	return n
}

// addAction adds the node (and sub-nodes) of one step at pos and returns
// the name of the node the chain runs through.
func (g *graph) addAction(kind actionKind, c stepContext, pos [2]float64) string {
	switch kind {
	case actionEmail:
		return g.add("Send Email", typeEmailSend, 2.1, pos, emailParams(c))
	case actionSlack:
		channel := "#general"
		if m := channelPattern.FindString(strings.ToLower(c.original)); m != "" {
			channel = m
		}
		return g.add("Send Slack Message", typeSlack, 2.3, pos, obj{
			"select":       "channel",
			"channelId":    resourceLocator("name", channel),
			"text":         c.payload(),
			"otherOptions": obj{},
		})
	case actionHTTP:
		url := "https://example.com/api"
		if m := urlPattern.FindString(c.original); m != "" {
			url = m
		}
		if fetchPattern.MatchString(c.text) {
			return g.add("HTTP Request", typeHTTPRequest, 4.2, pos, obj{"url": url, "options": obj{}})
		}
		return g.add("HTTP Request", typeHTTPRequest, 4.2, pos, obj{
			"method": "POST", "url": url, "sendBody": true, "specifyBody": "json",
			"jsonBody": "={{ JSON.stringify($json) }}", "options": obj{},
		})
	case actionDatabase:
		return g.addDatabase(c, pos)
	case actionSheets:
		return g.add("Append to Google Sheets", typeSheets, 4.5, pos, obj{
			"operation":  "append",
			"documentId": resourceLocator("list", ""),
			"sheetName":  resourceLocator("name", "Sheet1"),
			"columns":    obj{"mappingMode": "autoMapInputData", "value": obj{}, "matchingColumns": []string{}, "schema": []obj{}},
			"options":    obj{},
		})
	case actionLog:
		return g.addLog("Log Event", c.name, pos)
	case actionIf:
		return g.addCondition(pos)
	case actionAgent:
		return g.addAgent(c, pos)
	}
	panic("generate: unknown action " + string(kind))
}

func emailParams(c stepContext) obj {
	to := "notifications@example.com"
	if personPattern.MatchString(c.text) || c.trigger == triggerWebhook || c.trigger == triggerForm {
		to = "={{ $json.email }}"
	}
	if c.trigger == triggerEmail && c.previous == typeIMAP {
		to = "={{ $json.from }}"
	}
	subject, text := "Notification: "+c.name, c.payload()
	switch {
	case welcomePattern.MatchString(c.text):
		subject, text = "Welcome!", "=Hi {{ $json.name }},\n\nWelcome aboard! We are glad to have you."
	case c.trigger == triggerFile:
		subject = "=New file: {{ $json.path }}"
	case c.trigger == triggerEmail:
		subject = "=Re: {{ $json.subject }}"
	}
	return obj{
		"fromEmail": "noreply@example.com", "toEmail": to, "subject": subject,
		"emailFormat": "text", "text": text, "options": obj{},
	}
}

// addDatabase inserts the incoming items into a table: Postgres unless
// the description names MySQL.
func (g *graph) addDatabase(c stepContext, pos [2]float64) string {
	table, verb := "records", "Insert into"
	if databaseLogPattern.MatchString(c.text) {
		table, verb = "workflow_log", "Log to"
	}
	if mysqlPattern.MatchString(c.text) {
		return g.add(verb+" MySQL", typeMySQL, 2.4, pos, obj{
			"operation": "insert", "table": resourceLocator("name", table),
			"dataMode": "autoMapInputData", "options": obj{},
		})
	}
	return g.add(verb+" Postgres", typePostgres, 2.5, pos, obj{
		"operation": "insert",
		"schema":    resourceLocator("list", "public"),
		"table":     resourceLocator("name", table),
		"columns": obj{
			"mappingMode": "autoMapInputData", "value": obj{}, "matchingColumns": []string{}, "schema": []obj{},
			"attemptToConvertTypes": false, "convertFieldsToString": false,
		},
		"options": obj{},
	})
}

// field is one string field an Edit Fields (Set) node assigns.
type field struct{ name, value string }

// addSet adds an Edit Fields (Set) node assigning string fields, keeping
// the item's own fields when keep is set. Assignment IDs derive from the
// node's name like node IDs do.
func (g *graph) addSet(name string, pos [2]float64, keep bool, fields ...field) string {
	name = g.uniqueName(name)
	id := uuid(g.seed + "\x00assignments\x00" + name)
	assignments := make([]obj, len(fields))
	for i, f := range fields {
		assignments[i] = obj{"id": uuid(id + strconv.Itoa(i+1)), "name": f.name, "value": f.value, "type": "string"}
	}
	return g.add(name, typeSet, 3.4, pos, obj{
		"assignments":        obj{"assignments": assignments},
		"includeOtherFields": keep,
		"options":            obj{},
	})
}

// addLog adds a Set node stamping each item with when and in which
// execution it passed: a log record a later step can store, visible in
// the execution log meanwhile.
func (g *graph) addLog(name, event string, pos [2]float64) string {
	return g.addSet(name, pos, true,
		field{"loggedAt", "={{ $now.toISO() }}"}, field{"event", event}, field{"executionId", "={{ $execution.id }}"})
}

// addCondition adds an If node testing that the item is not empty, a
// condition the user refines.
func (g *graph) addCondition(pos [2]float64) string {
	return g.addIf("If", pos, obj{
		"id": uuid(g.seed + "\x00condition"), "leftValue": "={{ $json }}", "rightValue": "",
		"operator": obj{"type": "object", "operation": "notEmpty", "singleValue": true},
	})
}

// addEmailCheck adds an If whose true output carries items whose address
// (an expression or a literal) looks like an email address.
func (g *graph) addEmailCheck(address string, pos [2]float64) string {
	return g.addIf("Validate Email", pos, obj{
		"id": uuid(g.seed + "\x00email-check\x00" + address), "leftValue": address, "rightValue": emailRegex,
		"operator": obj{"type": "string", "operation": "regex"},
	})
}

func (g *graph) addIf(name string, pos [2]float64, condition obj) string {
	return g.add(name, typeIf, 2.2, pos, obj{
		"conditions": obj{
			"options":    obj{"caseSensitive": true, "leftValue": "", "typeValidation": "strict", "version": 2},
			"conditions": []obj{condition},
			"combinator": "and",
		},
		"options": obj{},
	})
}

// addInvalidEmailFlag adds the step invalid addresses go to instead of
// the send: it marks the item so it can be reviewed or stored.
func (g *graph) addInvalidEmailFlag(address string, pos [2]float64) string {
	return g.addSet("Flag Invalid Email", pos, true,
		field{"error", "Invalid recipient email address"}, field{"recipient", address})
}

// addAgent adds an AI Agent with its OpenAI chat model and, for chats or
// when the description asks for it, a window memory: the shape of n8n's
// own AI agent template.
func (g *graph) addAgent(c stepContext, pos [2]float64) string {
	params := obj{"options": obj{}} // a chat trigger's message is the default prompt
	if c.trigger != triggerChat {
		prompt := "={{ JSON.stringify($json) }}"
		if c.previous == typeIMAP {
			prompt = "={{ $json.text }}"
		}
		params = obj{"promptType": "define", "text": prompt, "options": obj{"systemMessage": "You are a helpful assistant. Task: " + c.name}}
	}
	agent := g.add("AI Agent", typeAgent, 3, pos, params)
	model := g.add("OpenAI Chat Model", typeOpenAIModel, 1.3, [2]float64{pos[0] - 100, pos[1] + stepY}, obj{
		"model": resourceLocator("list", "gpt-4o-mini"), "options": obj{},
	})
	g.connect(model, 0, agent, workflow.AILanguageModel)
	if c.trigger == triggerChat || memoryPattern.MatchString(c.text) {
		memParams := obj{}
		if c.trigger != triggerChat {
			memParams = obj{"sessionIdType": "customKey", "sessionKey": "={{ $execution.id }}"}
		}
		memory := g.add("Simple Memory", typeMemory, 1.3, [2]float64{pos[0] + 40, pos[1] + stepY}, memParams)
		g.connect(memory, 0, agent, workflow.AIMemory)
	}
	return agent
}

// addErrorBranch adds an Error Trigger with a step logging the failure,
// under the rest of the canvas. A workflow holding an Error Trigger is its
// own error workflow in n8n, so the branch runs whenever an execution of
// this workflow fails.
func (g *graph) addErrorBranch() string {
	y := g.bottom() + stepY*1.5
	trigger := g.add("Error Trigger", typeErrorTrigger, 1, [2]float64{0, y}, obj{})
	logNode := g.addSet("Log Error", [2]float64{stepX, y}, false,
		field{"workflow", "={{ $json.workflow.name }}"},
		field{"executionUrl", "={{ $json.execution.url }}"},
		field{"failedNode", "={{ $json.execution.lastNodeExecuted }}"},
		field{"message", "={{ $json.execution.error.message }}"})
	g.connect(trigger, 0, logNode, workflow.Main)
	return trigger
}

// slug turns a name into a URL path segment.
func slug(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash && b.Len() > 0 {
			b.WriteByte('-')
			dash = true
		}
	}
	s := strings.TrimSuffix(b.String(), "-")
	if s == "" {
		return "workflow"
	}
	return s
}
