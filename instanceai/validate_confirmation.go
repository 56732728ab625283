package instanceai

import (
	"encoding/json"
	"fmt"
	"slices"
)

// The checks of a confirmation-request and its details; beyond n8n's
// schema, a confirmation must be one its UI can show (see displayable).

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
