package instanceai

import "fmt"

// The checks of the setup payloads (see payload_setup.go).

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
