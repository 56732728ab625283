package instanceai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ValidationError names the field of an event (or request) that is wrong.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string { return e.Field + ": " + e.Reason }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func required(field, v string) error {
	if v == "" {
		return &ValidationError{Field: field, Reason: "is required"}
	}
	return nil
}

// unsafeObjectKeys are the ids n8n's agent-run reducer refuses to use as
// object keys (UNSAFE_OBJECT_KEYS): an event keyed by one is silently dropped.
var unsafeObjectKeys = []string{"__proto__", "constructor", "prototype"}

// requiredKey is required plus the reducer's safe-key rule, for ids the
// reducer uses as object keys (agentId, parentId, toolCallId, workflowId).
func requiredKey(field, v string) error {
	if err := required(field, v); err != nil {
		return err
	}
	if slices.Contains(unsafeObjectKeys, v) {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("must not be %q (n8n's agent-run reducer ignores events keyed by it)", v)}
	}
	return nil
}

func oneOf(field, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return &ValidationError{Field: field, Reason: fmt.Sprintf("must be one of %v, got %q", allowed, v)}
	}
	return nil
}

func optionalOneOf(field, v string, allowed ...string) error {
	if v == "" {
		return nil
	}
	return oneOf(field, v, allowed...)
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// jsonKind is the kind of a JSON text by its first byte: '{', '[', '"',
// 'n' (null), 't'/'f' (boolean), '0' (number) or 0 when empty or invalid.
// Invalid UTF-8 counts as invalid: encoding/json lets it through in raw
// values, and PostgreSQL would then refuse the row while SQLite kept it.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || !json.Valid(raw) || !utf8.Valid(raw) {
		return 0
	}
	switch c := raw[0]; c {
	case '{', '[', '"', 'n', 't', 'f':
		return c
	default:
		return '0'
	}
}

// jsonObject accepts an unset field (it marshals as {}) or a JSON object.
func jsonObject(field string, raw json.RawMessage) error {
	if raw == nil || jsonKind(raw) == '{' {
		return nil
	}
	return &ValidationError{Field: field, Reason: "must be a JSON object"}
}

// jsonValue accepts an unset field (it marshals as null or is omitted) or any
// JSON value.
func jsonValue(field string, raw json.RawMessage) error {
	if raw == nil || jsonKind(raw) != 0 {
		return nil
	}
	return &ValidationError{Field: field, Reason: "must be a JSON value"}
}

func finite(field string, f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return invalid(field, "must be a finite number")
	}
	return nil
}

func nonNegative(field string, n int) error {
	if n < 0 {
		return invalid(field, "must not be negative, got %d", n)
	}
	return nil
}

// jsLength is the length of s as JavaScript counts it (UTF-16 code units),
// which is what n8n's length limits measure.
func jsLength(s string) int {
	n := 0
	for _, r := range s {
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// isJSSpace reports whether JavaScript's String.prototype.trim removes r.
func isJSSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', ' ', 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000, 0xFEFF:
		return true
	}
	return r >= 0x2000 && r <= 0x200A
}

func jsTrim(s string) string { return strings.TrimFunc(s, isJSSpace) }

// exactHTTPOrigin accepts an http or https origin written exactly as a browser
// serialises it (lower-case scheme and host, no default port, no path), at
// most 300 characters. It is conservative: hosts that a browser would rewrite
// (IDN, IPv6, short IPv4 forms) are refused rather than guessed.
func exactHTTPOrigin(field, v string) error {
	bad := func(why string) error {
		return invalid(field, "must be an exact HTTP origin such as https://api.example.com (%s), got %q", why, v)
	}
	if jsLength(v) > 300 {
		return bad("at most 300 characters")
	}
	scheme, rest, ok := strings.Cut(v, "://")
	if !ok || (scheme != "http" && scheme != "https") {
		return bad("scheme http or https")
	}
	host, port, hasPort := strings.Cut(rest, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		switch {
		case err != nil || n < 0 || n > 65535 || strconv.Itoa(n) != port:
			return bad("port")
		case (scheme == "http" && n == 80) || (scheme == "https" && n == 443):
			return bad("no default port")
		}
	}
	if host == "" {
		return bad("host")
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' || strings.HasPrefix(l, "xn--") {
			return bad("host")
		}
		for i := 0; i < len(l); i++ {
			if c := l[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return bad("host")
			}
		}
	}
	// A host whose last label is numeric is an IPv4 address to a browser:
	// only the canonical dotted quad survives unchanged.
	if last := labels[len(labels)-1]; strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		if len(labels) != 4 {
			return bad("IPv4 address")
		}
		for _, l := range labels {
			n, err := strconv.Atoi(l)
			if err != nil || n > 255 || strconv.Itoa(n) != l {
				return bad("IPv4 address")
			}
		}
	}
	return nil
}

// Validate checks an event the way a producer must before publishing it:
// envelope fields present, payload of the right kind and complete. An event
// that passes marshals to JSON that n8n's instanceAiEventSchema accepts
// unchanged. Some rules are stricter than the schema (identifiers must not be
// empty; a confirmation must be one n8n's UI can show).
func (e *Event) Validate() error {
	if newPayload(e.Type) == nil {
		return &ValidationError{Field: "type", Reason: fmt.Sprintf("unknown event type %q", e.Type)}
	}
	if err := required("runId", e.RunID); err != nil {
		return err
	}
	if err := requiredKey("agentId", e.AgentID); err != nil {
		return err
	}
	if e.Payload == nil {
		return &ValidationError{Field: "payload", Reason: "is required"}
	}
	if want, got := fmt.Sprintf("%T", newPayload(e.Type)), fmt.Sprintf("%T", e.Payload); want != got {
		return &ValidationError{Field: "payload", Reason: fmt.Sprintf("%s needs a %s payload, got %s", e.Type, want, got)}
	}
	if err := e.Payload.validate(e.Type); err != nil {
		if ve, ok := err.(*ValidationError); ok {
			return &ValidationError{Field: "payload." + ve.Field, Reason: ve.Reason}
		}
		return err
	}
	return nil
}

func (p *Text) validate(EventType) error { return nil }

func (p *RunStart) validate(EventType) error { return required("messageId", p.MessageID) }

func (p *RunFinish) validate(EventType) error {
	if err := oneOf("status", p.Status, RunCompleted, RunCancelled, RunError, RunInterrupted); err != nil {
		return err
	}
	for i, u := range p.Usage {
		if u.InputTokens < 0 || u.OutputTokens < 0 || u.TotalTokens < 0 {
			return &ValidationError{Field: fmt.Sprintf("usage[%d]", i), Reason: "token counts must not be negative"}
		}
	}
	return nil
}

func (p *ToolInputStart) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), required("toolName", p.ToolName))
}

func (p *ToolCall) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), required("toolName", p.ToolName),
		jsonObject("args", p.Args))
}

func (p *ToolResult) validate(EventType) error {
	return firstErr(requiredKey("toolCallId", p.ToolCallID), jsonValue("result", p.Result))
}

func (p *ToolError) validate(EventType) error {
	return requiredKey("toolCallId", p.ToolCallID)
}

func (p *AgentSpawned) validate(EventType) error {
	if err := firstErr(requiredKey("parentId", p.ParentID), required("role", p.Role),
		optionalOneOf("kind", p.Kind, AgentKindBuilder, AgentKindDataTable, AgentKindPlanner,
			AgentKindEvalSetup, AgentKindAgentBuilder)); err != nil {
		return err
	}
	if p.TargetResource != nil {
		return oneOf("targetResource.type", p.TargetResource.Type, TargetWorkflow, TargetDataTable,
			TargetCredential, TargetOther, TargetAgent, TargetConfigEval)
	}
	return nil
}

func (p *AgentCompleted) validate(EventType) error {
	return firstErr(required("role", p.Role),
		optionalOneOf("status", p.Status, RunCompleted, RunCancelled, RunError))
}

func validQuestions(field string, qs []Question) error {
	for i, q := range qs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := firstErr(required(f+".id", q.ID), required(f+".question", q.Question),
			oneOf(f+".type", q.Type, QuestionSingle, QuestionMulti, QuestionText)); err != nil {
			return err
		}
	}
	return nil
}

func validTasks(field string, tl TaskList) error {
	for i, t := range tl.Tasks {
		f := fmt.Sprintf("%s.tasks[%d]", field, i)
		if err := firstErr(required(f+".id", t.ID), required(f+".description", t.Description),
			oneOf(f+".status", t.Status, TaskTodo, TaskInProgress, TaskDone, TaskFailed, TaskCancelled)); err != nil {
			return err
		}
	}
	return nil
}

func validPlanItems(field string, items []PlannedTask) error {
	for i, it := range items {
		if err := required(fmt.Sprintf("%s[%d].id", field, i), it.ID); err != nil {
			return err
		}
	}
	return nil
}

func validSetupHint(field string, h *CredentialSetupHint) error {
	if h == nil {
		return nil
	}
	if err := jsonObject(field+".template.body", h.Template.Body); err != nil {
		return err
	}
	if len(h.Placeholders) == 0 {
		return invalid(field+".placeholders", "must have at least one entry")
	}
	for i, ph := range h.Placeholders {
		f := fmt.Sprintf("%s.placeholders[%d]", field, i)
		if err := firstErr(required(f+".name", ph.Name), optionalOneOf(f+".type", ph.Type, "password", "plain")); err != nil {
			return err
		}
	}
	if len(h.AcceptedStatusCodes) > 10 {
		return invalid(field+".acceptedStatusCodes", "must have at most 10 entries, got %d", len(h.AcceptedStatusCodes))
	}
	if h.ServiceOrigin != "" {
		return exactHTTPOrigin(field+".serviceOrigin", h.ServiceOrigin)
	}
	return nil
}

func validCredentialRefs(field string, refs []CredentialRef) error {
	for i, r := range refs {
		if err := required(fmt.Sprintf("%s[%d].id", field, i), r.ID); err != nil {
			return err
		}
	}
	return nil
}

func validCredentialRequests(field string, reqs []CredentialRequest) error {
	for i, r := range reqs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := firstErr(required(f+".credentialType", r.CredentialType),
			validCredentialRefs(f+".existingCredentials", r.ExistingCredentials),
			validSetupHint(f+".setupHint", r.SetupHint)); err != nil {
			return err
		}
	}
	return nil
}

func validSetupRequests(field string, reqs []WorkflowSetupNode) error {
	for i, r := range reqs {
		f := fmt.Sprintf("%s[%d]", field, i)
		n := r.Node
		if err := firstErr(required(f+".node.name", n.Name), required(f+".node.type", n.Type),
			required(f+".node.id", n.ID), finite(f+".node.typeVersion", n.TypeVersion),
			finite(f+".node.position[0]", n.Position[0]), finite(f+".node.position[1]", n.Position[1]),
			jsonObject(f+".node.parameters", n.Parameters)); err != nil {
			return err
		}
		for _, key := range sortedKeys(n.Credentials) {
			c := n.Credentials[key]
			cf := fmt.Sprintf("%s.node.credentials.%s.id", f, key)
			if c.AIGatewayManaged && c.ID != nil {
				return invalid(cf, "must be null for an AI-gateway-managed credential")
			}
			if !c.AIGatewayManaged && c.ID == nil {
				return invalid(cf, "is required (null only for an AI-gateway-managed credential)")
			}
		}
		if err := firstErr(validCredentialRefs(f+".existingCredentials", r.ExistingCredentials),
			validSetupHint(f+".setupHint", r.SetupHint)); err != nil {
			return err
		}
		if r.TriggerTestResult != nil {
			if err := oneOf(f+".triggerTestResult.status", r.TriggerTestResult.Status, "success", "error", "listening"); err != nil {
				return err
			}
		}
		for j, ep := range r.EditableParameters {
			ef := fmt.Sprintf("%s.editableParameters[%d]", f, j)
			if err := firstErr(required(ef+".name", ep.Name), jsonValue(ef+".default", ep.Default)); err != nil {
				return err
			}
			for k, o := range ep.Options {
				switch jsonKind(o.Value) {
				case '"', '0', 't', 'f':
				default:
					return invalid(fmt.Sprintf("%s.options[%d].value", ef, k), "must be a string, number or boolean")
				}
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func validRowPreview(field string, r *RowPreview) error {
	if r == nil {
		return invalid(field, "is required")
	}
	for i, v := range r.Values {
		if err := required(fmt.Sprintf("%s.values[%d].column", field, i), v.Column); err != nil {
			return err
		}
	}
	return nonNegative(field+".remainingColumns", r.RemainingColumns)
}

func validFilterPreview(field string, fp *FilterPreview) error {
	if fp == nil {
		return invalid(field, "is required")
	}
	if err := oneOf(field+".type", fp.Type, "and", "or"); err != nil {
		return err
	}
	for i, c := range fp.Filters {
		f := fmt.Sprintf("%s.filters[%d]", field, i)
		if err := firstErr(required(f+".columnName", c.ColumnName),
			oneOf(f+".condition", c.Condition, "eq", "neq", "like", "ilike", "gt", "gte", "lt", "lte")); err != nil {
			return err
		}
		if c.Value != nil {
			switch jsonKind(c.Value) {
			case '"', '0', 't', 'f', 'n':
			default:
				return invalid(f+".value", "must be a string, number, boolean or null")
			}
		}
	}
	return nil
}

var approvalActions = []string{
	ApprovalEditWorkflow, ApprovalDeleteTable, ApprovalAddColumn, ApprovalDeleteColumn,
	ApprovalRenameColumn, ApprovalInsertRows, ApprovalUpdateRows, ApprovalDeleteRows,
	ApprovalArchiveWorkflow, ApprovalRestoreWorkflow, ApprovalUnpublishWorkflow,
	ApprovalRestoreVersion, ApprovalUpdateVersion, ApprovalRunWorkflow, ApprovalPublishWorkflow,
}

func validApprovalDetails(field string, d *ApprovalDetails) error {
	if d == nil {
		return nil
	}
	if err := oneOf(field+".action", d.Action, approvalActions...); err != nil {
		return err
	}
	// Which fields belong to which action; any other set field would be
	// dropped on the wire, so it is refused.
	for _, f := range []struct {
		name    string
		set     bool
		actions []string
	}{
		{"summary", d.Summary != "", []string{ApprovalEditWorkflow, ApprovalRunWorkflow, ApprovalPublishWorkflow}},
		{"column", d.Column != "", []string{ApprovalAddColumn, ApprovalDeleteColumn, ApprovalRenameColumn}},
		{"columnType", d.ColumnType != "", []string{ApprovalAddColumn}},
		{"newName", d.NewName != "", []string{ApprovalRenameColumn}},
		{"count", d.Count != 0, []string{ApprovalInsertRows}},
		{"rows", d.Rows != nil, []string{ApprovalInsertRows}},
		{"changes", d.Changes != nil, []string{ApprovalUpdateRows}},
		{"filter", d.Filter != nil, []string{ApprovalUpdateRows, ApprovalDeleteRows}},
		{"name", d.Name != nil, []string{ApprovalArchiveWorkflow, ApprovalRestoreWorkflow, ApprovalUnpublishWorkflow, ApprovalUpdateVersion}},
		{"id", d.ID != "", []string{ApprovalArchiveWorkflow, ApprovalRestoreWorkflow, ApprovalUnpublishWorkflow}},
		{"version", d.Version != "", []string{ApprovalRestoreVersion, ApprovalUpdateVersion}},
		{"createdAt", d.CreatedAt != "", []string{ApprovalRestoreVersion}},
		{"description", d.Description != nil, []string{ApprovalUpdateVersion}},
		{"trigger", d.Trigger != "", []string{ApprovalRunWorkflow}},
		{"selectedVersion", d.SelectedVersion, []string{ApprovalPublishWorkflow}},
		{"supportingCount", d.SupportingCount != 0, []string{ApprovalPublishWorkflow}},
		{"verification", d.Verification != nil, []string{ApprovalPublishWorkflow}},
	} {
		if f.set && !slices.Contains(f.actions, d.Action) {
			return invalid(field+"."+f.name, "is not a field of action %s", d.Action)
		}
	}
	switch d.Action {
	case ApprovalAddColumn:
		return firstErr(required(field+".column", d.Column),
			oneOf(field+".columnType", d.ColumnType, "string", "number", "boolean", "date"))
	case ApprovalDeleteColumn:
		return required(field+".column", d.Column)
	case ApprovalRenameColumn:
		return firstErr(required(field+".column", d.Column), required(field+".newName", d.NewName))
	case ApprovalInsertRows:
		if err := nonNegative(field+".count", d.Count); err != nil {
			return err
		}
		for i := range d.Rows {
			if err := validRowPreview(fmt.Sprintf("%s.rows[%d]", field, i), &d.Rows[i]); err != nil {
				return err
			}
		}
	case ApprovalUpdateRows:
		return firstErr(validRowPreview(field+".changes", d.Changes), validFilterPreview(field+".filter", d.Filter))
	case ApprovalDeleteRows:
		return validFilterPreview(field+".filter", d.Filter)
	case ApprovalArchiveWorkflow, ApprovalRestoreWorkflow, ApprovalUnpublishWorkflow:
		if d.Name == nil {
			return invalid(field+".name", "is required")
		}
		return required(field+".id", d.ID)
	case ApprovalRestoreVersion, ApprovalUpdateVersion:
		return required(field+".version", d.Version)
	case ApprovalPublishWorkflow:
		if err := nonNegative(field+".supportingCount", d.SupportingCount); err != nil {
			return err
		}
		if v := d.Verification; v != nil {
			return firstErr(oneOf(field+".verification.level", v.Level, "unproven", "partial", "failed", "no-verdict"),
				finite(field+".verification.plannedNodeCount", v.PlannedNodeCount))
		}
	}
	return nil
}

// plannedTaskShape reports whether raw has the shape of n8n's planned task
// argument: id, title, kind, spec strings, deps an array of strings, and
// optional tools (strings), workflowId (string), isSupportingWorkflow (bool).
func plannedTaskShape(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if jsonKind(raw) != '{' || json.Unmarshal(raw, &m) != nil {
		return false
	}
	isString := func(k string) bool { v, ok := m[k]; return ok && jsonKind(v) == '"' }
	isStrings := func(k string) bool {
		var a []json.RawMessage
		v, ok := m[k]
		if !ok || jsonKind(v) != '[' || json.Unmarshal(v, &a) != nil {
			return false
		}
		for _, s := range a {
			if jsonKind(s) != '"' {
				return false
			}
		}
		return true
	}
	_, hasTools := m["tools"]
	_, hasWorkflow := m["workflowId"]
	sup, hasSup := m["isSupportingWorkflow"]
	return isString("id") && isString("title") && isString("kind") && isString("spec") && isStrings("deps") &&
		(!hasTools || isStrings("tools")) && (!hasWorkflow || isString("workflowId")) &&
		(!hasSup || jsonKind(sup) == 't' || jsonKind(sup) == 'f')
}

func argsContainPlannedTasks(args json.RawMessage) bool {
	var m map[string]json.RawMessage
	if jsonKind(args) != '{' || json.Unmarshal(args, &m) != nil {
		return false
	}
	var tasks []json.RawMessage
	if jsonKind(m["tasks"]) != '[' || json.Unmarshal(m["tasks"], &tasks) != nil {
		return false
	}
	return slices.ContainsFunc(tasks, plannedTaskShape)
}

// displayable mirrors n8n's isDisplayableConfirmationRequest: a confirmation
// the UI would not show leaves its run waiting for an answer that never
// comes.
func (p *ConfirmationRequest) displayable() error {
	if len(p.SetupRequests) > 0 || len(p.CredentialRequests) > 0 || p.DomainAccess != nil ||
		p.ChannelConfig != nil || p.MCPConnectRequest != nil {
		return nil
	}
	it := p.InputType
	if it == "" {
		it = InputApproval
	}
	switch it {
	case InputQuestions:
		if len(p.Questions) == 0 {
			return invalid("questions", "must have at least one entry for inputType questions")
		}
	case InputPlanReview:
		if len(p.PlanItems) == 0 && !argsContainPlannedTasks(p.Args) {
			return invalid("planItems", "must have at least one entry for inputType plan-review (or args.tasks must hold planned tasks)")
		}
	case InputResourceDecision:
		if p.ResourceDecision == nil {
			return invalid("resourceDecision", "is required for inputType resource-decision")
		}
	default:
		if jsTrim(p.Message) == "" {
			return invalid("message", "must not be blank for inputType %s", it)
		}
	}
	return nil
}

func (p *ConfirmationRequest) validate(EventType) error {
	if err := firstErr(required("requestId", p.RequestID), requiredKey("toolCallId", p.ToolCallID),
		required("toolName", p.ToolName), jsonObject("args", p.Args),
		oneOf("severity", p.Severity, SeverityDestructive, SeverityWarning, SeverityInfo),
		optionalOneOf("inputType", p.InputType, InputApproval, InputText, InputQuestions, InputPlanReview,
			InputResourceDecision, InputContinue),
		validApprovalDetails("approvalDetails", p.ApprovalDetails),
		validQuestions("questions", p.Questions),
		validPlanItems("planItems", p.PlanItems),
		validCredentialRequests("credentialRequests", p.CredentialRequests),
		validSetupRequests("setupRequests", p.SetupRequests)); err != nil {
		return err
	}
	if ta := p.TargetApproval; ta != nil {
		if err := firstErr(required("targetApproval.toolName", ta.ToolName), jsonValue("targetApproval.args", ta.Args)); err != nil {
			return err
		}
	}
	if p.Tasks != nil {
		if err := validTasks("tasks", *p.Tasks); err != nil {
			return err
		}
	}
	if cf := p.CredentialFlow; cf != nil {
		if err := oneOf("credentialFlow.stage", cf.Stage, "generic", "finalize"); err != nil {
			return err
		}
	}
	if cd := p.CredentialDestination; cd != nil {
		if err := exactHTTPOrigin("credentialDestination.origin", cd.Origin); err != nil {
			return err
		}
		if len(cd.NodeNames) == 0 {
			return invalid("credentialDestination.nodeNames", "must have at least one entry")
		}
		for i, n := range cd.NodeNames {
			f := fmt.Sprintf("credentialDestination.nodeNames[%d]", i)
			switch {
			case n == "" || jsTrim(n) != n:
				return invalid(f, "must be non-blank without surrounding whitespace, got %q", n)
			case jsLength(n) > 255:
				return invalid(f, "must be at most 255 characters")
			}
		}
	}
	if da := p.DomainAccess; da != nil {
		if err := firstErr(required("domainAccess.url", da.URL), required("domainAccess.host", da.Host)); err != nil {
			return err
		}
	}
	if ws := p.WebSearch; ws != nil {
		if err := required("webSearch.query", ws.Query); err != nil {
			return err
		}
	}
	if rd := p.ResourceDecision; rd != nil {
		for i, o := range rd.Options {
			if err := oneOf(fmt.Sprintf("resourceDecision.options[%d]", i), o,
				DecisionDenyOnce, DecisionAllowOnce, DecisionAllowForSession); err != nil {
				return err
			}
		}
	}
	if cc := p.ChannelConfig; cc != nil {
		if err := firstErr(required("channelConfig.integrationType", cc.IntegrationType),
			required("channelConfig.agentId", cc.AgentID)); err != nil {
			return err
		}
	}
	if mr := p.MCPConnectRequest; mr != nil {
		if len(mr.Servers) == 0 {
			return invalid("mcpConnectRequest.servers", "must have at least one entry")
		}
		for i, s := range mr.Servers {
			f := fmt.Sprintf("mcpConnectRequest.servers[%d]", i)
			if err := required(f+".serverSlug", s.ServerSlug); err != nil {
				return err
			}
			if len(s.UsesCredentials) == 0 {
				return invalid(f+".usesCredentials", "must have at least one entry")
			}
			for j, c := range s.UsesCredentials {
				if err := required(fmt.Sprintf("%s.usesCredentials[%d].credentialType", f, j), c.CredentialType); err != nil {
					return err
				}
			}
		}
	}
	return p.displayable()
}

func (p *TasksUpdate) validate(EventType) error {
	return firstErr(validTasks("tasks", p.Tasks), validPlanItems("planItems", p.PlanItems))
}

func (p *Status) validate(EventType) error { return nil }

func (p *ThreadTitle) validate(EventType) error { return required("title", p.Title) }

func (p *ErrorPayload) validate(EventType) error { return required("content", p.Content) }

func (p *FilesystemRequest) validate(EventType) error {
	return firstErr(required("requestId", p.RequestID), required("toolCall.name", p.ToolCall.Name),
		jsonObject("toolCall.arguments", p.ToolCall.Arguments))
}

func (p *SetupItems) validate(EventType) error {
	if n := jsLength(p.WorkflowID); n < 1 || n > 64 {
		return invalid("workflowId", "must be 1 to 64 characters, got %d", n)
	}
	if err := requiredKey("workflowId", p.WorkflowID); err != nil {
		return err
	}
	for i, it := range p.Items {
		f := fmt.Sprintf("items[%d]", i)
		if err := firstErr(required(f+".id", it.ID),
			oneOf(f+".kind", it.Kind, SetupItemCredential, SetupItemParameters)); err != nil {
			return err
		}
		credential := it.Kind == SetupItemCredential
		for _, x := range []struct {
			name string
			set  bool
		}{
			{"credentialType", it.CredentialType != ""}, {"appDisplayName", it.AppDisplayName != ""},
			{"nodeBindings", it.NodeBindings != nil}, {"setupHint", it.SetupHint != nil},
			{"reason", it.Reason != ""},
		} {
			if x.set && !credential {
				return invalid(f+"."+x.name, "is not a field of kind %s", it.Kind)
			}
		}
		if credential && (it.NodeName != "" || it.ParameterNames != nil) {
			name := "nodeName"
			if it.NodeName == "" {
				name = "parameterNames"
			}
			return invalid(f+"."+name, "is not a field of kind %s", it.Kind)
		}
		if credential {
			if err := firstErr(required(f+".credentialType", it.CredentialType),
				validSetupHint(f+".setupHint", it.SetupHint)); err != nil {
				return err
			}
			for j, b := range it.NodeBindings {
				if err := required(fmt.Sprintf("%s.nodeBindings[%d].nodeName", f, j), b.NodeName); err != nil {
					return err
				}
			}
		} else if err := required(f+".nodeName", it.NodeName); err != nil {
			return err
		}
	}
	return nil
}

func (p *PreferencesApplied) validate(EventType) error {
	for i, pr := range p.Preferences {
		f := fmt.Sprintf("preferences[%d]", i)
		if err := firstErr(required(f+".id", pr.ID),
			oneOf(f+".scope", pr.Scope, PreferenceUser, PreferenceProject, PreferenceInstance)); err != nil {
			return err
		}
	}
	if err := nonNegative("renderedLength", p.RenderedLength); err != nil {
		return err
	}
	if p.InjectedThisTurn && p.CarriedFromRunID != "" {
		return invalid("carriedFromRunId", "must be absent when injectedThisTurn is true")
	}
	return nil
}
