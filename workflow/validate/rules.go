package validate

// Rule ids, one per check. Each ErrorDetail carries the id of the rule
// that produced it in Rule; its TechnicalDetails start with it too.
const (
	RuleJSONSyntax = "json.syntax" // the document is not JSON (line and column given)
	RuleJSONShape  = "json.shape"  // the document is JSON but not an object

	RuleWorkflowName        = "workflow.name"        // name missing, not a string or empty
	RuleWorkflowNodes       = "workflow.nodes"       // nodes missing or not an array
	RuleWorkflowConnections = "workflow.connections" // connections missing or not an object

	RuleNodeShape         = "node.shape"          // a nodes entry is not an object
	RuleNodeName          = "node.name"           // node name missing, not a string or empty
	RuleNodeNameDuplicate = "node.name_duplicate" // two nodes share a name
	RuleNodeType          = "node.type"           // type missing or not package.nodeName
	RuleNodeTypeVersion   = "node.type_version"   // typeVersion missing, not a number or not positive
	RuleNodePosition      = "node.position"       // position not [x, y] numbers
	RuleNodeParameters    = "node.parameters"     // parameters missing or not an object
	RuleNodeOrphan        = "node.orphan"         // warning: a node with no connection at all

	RuleConnectionShape    = "connection.shape"         // connections entry of the wrong JSON shape
	RuleConnectionSource   = "connection.source"        // connections from a node that does not exist
	RuleConnectionTarget   = "connection.target"        // a connection into a node that does not exist
	RuleConnectionType     = "connection.type"          // a connection type n8n does not know
	RuleConnectionMismatch = "connection.type_mismatch" // target type differs from the output's type
	RuleConnectionIndex    = "connection.index"         // target index negative or not an integer

	RuleTriggerNone       = "trigger.none"        // warning: no trigger, poller or webhook node
	RuleTriggerManualOnly = "trigger.manual_only" // warning: only manual triggers

	RuleAgentModel        = "ai.agent_model"   // an AI Agent without an ai_languageModel connection
	RuleSubNodeType       = "ai.subnode_type"  // a sub-node connected by another type than its own
	RuleUnknownType       = "catalog.type"     // the node type is not in the catalog
	RuleVersion           = "catalog.version"  // the typeVersion does not exist for the type
	RuleRequiredParameter = "catalog.required" // a required parameter has no value
)
