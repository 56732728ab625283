package instanceai

import "encoding/json"

// The payloads that concern the person's machine and setup: a filesystem
// request for the local gateway, what a workflow still needs before it
// can run (setup items), and the AI preferences applied to a run.

// FilesystemToolCall is the tool call a filesystem request forwards.
// Arguments is a JSON object; nil marshals as {}.
type FilesystemToolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// MarshalJSON writes arguments as {} when unset.
func (p FilesystemToolCall) MarshalJSON() ([]byte, error) {
	type plain FilesystemToolCall
	p.Arguments = objectOrEmpty(p.Arguments)
	return json.Marshal(plain(p))
}

// FilesystemRequest asks a local gateway to run a tool.
type FilesystemRequest struct {
	RequestID string             `json:"requestId"`
	ToolCall  FilesystemToolCall `json:"toolCall"`
}

// Setup item kinds.
const (
	SetupItemCredential = "credential"
	SetupItemParameters = "parameters"
)

// NodeBinding names a node a credential setup item applies to.
type NodeBinding struct {
	NodeName string `json:"nodeName"`
}

// SetupItem is one thing a workflow still needs. Kind selects the variant:
// credential (CredentialType, AppDisplayName, NodeBindings, SetupHint,
// Reason) or parameters (NodeName, ParameterNames); only the fields of that
// variant are marshalled.
type SetupItem struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`

	CredentialType string               `json:"credentialType,omitempty"`
	AppDisplayName string               `json:"appDisplayName,omitempty"`
	NodeBindings   []NodeBinding        `json:"nodeBindings,omitempty"`
	SetupHint      *CredentialSetupHint `json:"setupHint,omitempty"`
	Reason         string               `json:"reason,omitempty"`

	NodeName       string   `json:"nodeName,omitempty"`
	ParameterNames []string `json:"parameterNames,omitempty"`
}

// MarshalJSON writes the fields of the item's kind, required ones even when
// zero.
func (p SetupItem) MarshalJSON() ([]byte, error) {
	switch p.Kind {
	case SetupItemCredential:
		return json.Marshal(struct {
			ID             string               `json:"id"`
			Kind           string               `json:"kind"`
			CredentialType string               `json:"credentialType"`
			AppDisplayName string               `json:"appDisplayName,omitempty"`
			NodeBindings   []NodeBinding        `json:"nodeBindings,omitempty"`
			SetupHint      *CredentialSetupHint `json:"setupHint,omitempty"`
			Reason         string               `json:"reason,omitempty"`
		}{p.ID, p.Kind, p.CredentialType, p.AppDisplayName, p.NodeBindings, p.SetupHint, p.Reason})
	case SetupItemParameters:
		return json.Marshal(struct {
			ID             string   `json:"id"`
			Kind           string   `json:"kind"`
			NodeName       string   `json:"nodeName"`
			ParameterNames []string `json:"parameterNames"`
		}{p.ID, p.Kind, p.NodeName, nonNil(p.ParameterNames)})
	}
	type plain SetupItem
	return json.Marshal(plain(p))
}

// SetupItems lists what a workflow still needs before it can run.
type SetupItems struct {
	WorkflowID string      `json:"workflowId"`
	Items      []SetupItem `json:"items"`
}

// MarshalJSON writes items as [] when unset.
func (p SetupItems) MarshalJSON() ([]byte, error) {
	type plain SetupItems
	p.Items = nonNil(p.Items)
	return json.Marshal(plain(p))
}

// Preference scopes.
const (
	PreferenceUser     = "user"
	PreferenceProject  = "project"
	PreferenceInstance = "instance"
)

// AppliedPreference is one AI preference a request carried.
type AppliedPreference struct {
	ID          string `json:"id"`
	Scope       string `json:"scope"`
	ProjectID   string `json:"projectId,omitempty"`
	ProjectName string `json:"projectName,omitempty"`
}

// PreferencesApplied reports the AI preferences applied to a run.
// CarriedFromRunID may be set only when InjectedThisTurn is false.
type PreferencesApplied struct {
	Preferences      []AppliedPreference `json:"preferences"`
	RenderedLength   int                 `json:"renderedLength"`
	InjectedThisTurn bool                `json:"injectedThisTurn"`
	CarriedFromRunID string              `json:"carriedFromRunId,omitempty"`
}

// MarshalJSON writes preferences as [] when unset.
func (p PreferencesApplied) MarshalJSON() ([]byte, error) {
	type plain PreferencesApplied
	p.Preferences = nonNil(p.Preferences)
	return json.Marshal(plain(p))
}
