package validate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/threadline/threadline/workflow"
	"github.com/threadline/threadline/workflow/catalog"
)

// Node types the rules below name.
const (
	stickyNoteType = "n8n-nodes-base.stickyNote"
	agentType      = "@n8n/n8n-nodes-langchain.agent"
	langchain      = "@n8n/n8n-nodes-langchain"
)

// startingNodes are the triggers n8n does not accept as the reason to
// activate a workflow: they start manual runs only (STARTING_NODES,
// packages/cli/src/constants.ts).
var startingNodes = []string{
	"@n8n/n8n-nodes-langchain.manualChatTrigger",
	"n8n-nodes-base.start",
	"n8n-nodes-base.manualTrigger",
}

// triggers follows n8n's validateWorkflowHasTriggerLikeNode
// (packages/workflow/src/workflow-validation.ts), which
// WorkflowValidationService.validateForActivation and ActiveWorkflowManager
// call with STARTING_NODES as the types to ignore: disabled nodes are
// skipped, the starting nodes ignored, nodes of an unknown type skipped,
// and any other node whose type polls, triggers or receives a webhook
// makes the workflow activatable. n8n saves and runs by hand a workflow
// that fails the check and refuses only to activate it (a
// WorkflowActivationError at level "warning"), so here it is a warning.
func (v *validator) triggers() {
	manual := ""
	for _, n := range v.nodes {
		if n.disabled || n.typ == "" {
			continue
		}
		if slices.Contains(startingNodes, n.typ) {
			manual = n.name
			continue
		}
		if like, known := v.triggerLike(n); known && like {
			return
		}
	}
	const n8nMessage = "Workflow cannot be activated because it has no trigger node. At least one trigger, webhook, or polling node is required."
	if manual != "" {
		v.warn(issue{rule: RuleTriggerManualOnly, category: CategoryStructure,
			title:     "The workflow starts only by hand",
			message:   fmt.Sprintf("%q is a manual trigger: the workflow runs when started from the editor, but n8n will not activate it. %s", manual, n8nMessage),
			guidance:  "Keep it for testing; to run the workflow on its own, add a trigger that starts it (schedule, webhook, app event).",
			technical: "only STARTING_NODES among the enabled trigger-like nodes",
			fixes:     []string{"Add a Schedule Trigger to run it periodically", "Add a Webhook node to run it on an HTTP request"}})
		return
	}
	v.warn(issue{rule: RuleTriggerNone, category: CategoryStructure,
		title:     "The workflow has no trigger",
		message:   n8nMessage,
		guidance:  "Add a node that starts the workflow, and connect it to the first step.",
		technical: "no enabled node of a poll, trigger or webhook type",
		fixes:     []string{"Add a Manual Trigger to run it by hand", "Add a Schedule Trigger, a Webhook or an app trigger to run it on its own"}})
}

// triggerLike says whether n's type starts workflows, and whether that is
// known: from the catalog when the type is in it, otherwise from the type
// name (see triggerLikeByName); a type the catalog lacks is unknown, as
// n8n skips types it has not loaded.
func (v *validator) triggerLike(n *node) (like, known bool) {
	if v.opts.Catalog == nil {
		return triggerLikeByName(n.typ), true
	}
	d, ok := v.opts.Catalog.LookupVersion(n.typ, n.version)
	if !ok {
		if d, ok = v.opts.Catalog.Lookup(n.typ); !ok {
			return false, false
		}
	}
	return d.IsTriggerLike(), true
}

// webhookNodes are the node types without "Trigger" in their name that
// implement n8n's poll, trigger or webhook method (n8n-nodes-base and
// @n8n/n8n-nodes-langchain 2.41; the nodes with send-and-wait operations
// receive their replies by webhook). TestTriggerHeuristicMatchesCatalog
// holds the list to the catalog.
var webhookNodes = []string{
	"n8n-nodes-base.webhook", "n8n-nodes-base.cron", "n8n-nodes-base.interval", "n8n-nodes-base.emailReadImap",
	"n8n-nodes-base.wait", "n8n-nodes-base.form", "n8n-nodes-base.slack", "n8n-nodes-base.discord",
	"n8n-nodes-base.whatsApp", "n8n-nodes-base.gmail", "n8n-nodes-base.telegram", "n8n-nodes-base.github",
	"n8n-nodes-base.emailSend", "n8n-nodes-base.microsoftTeams", "n8n-nodes-base.microsoftOutlook",
	"n8n-nodes-base.googleChat", "@n8n/n8n-nodes-langchain.chat",
}

// triggerLikeByName tells trigger-like types without a catalog: n8n names
// its trigger and poller nodes "…Trigger", and webhookNodes lists the rest.
func triggerLikeByName(typ string) bool {
	return strings.HasSuffix(catalog.ShortName(typ), "Trigger") || slices.Contains(webhookNodes, typ)
}

// orphans warns about nodes with no connection at all: they never run.
// Sticky notes are canvas annotations and disabled nodes are parked on
// purpose, so neither is reported.
func (v *validator) orphans() {
	connected := map[string]bool{}
	for _, e := range v.edges {
		connected[e.from], connected[e.to] = true, true
	}
	for _, n := range v.nodes {
		if n.name == "" || n.disabled || n.typ == stickyNoteType || connected[n.name] || v.byName[n.name] != n {
			continue
		}
		v.warn(issue{rule: RuleNodeOrphan, category: CategoryStructure,
			title:     "A node is not connected",
			message:   fmt.Sprintf("The node %q (%s) has no incoming or outgoing connection, so it never runs.", n.name, n.typ),
			guidance:  "Connect it to the workflow, or delete it if it is left over.",
			technical: fmt.Sprintf("no edge from or to %q", n.name),
			fixes:     []string{fmt.Sprintf("Connect the node before %q to it", n.name), fmt.Sprintf("Delete %q", n.name)}})
	}
}

// agents checks that every enabled AI Agent has a chat model: n8n fails
// its run with "A Chat Model sub-node must be connected" otherwise.
func (v *validator) agents() {
	for _, n := range v.nodes {
		if n.typ != agentType || n.disabled || v.byName[n.name] != n {
			continue
		}
		hasModel := slices.ContainsFunc(v.edges, func(e edge) bool { return e.to == n.name && e.typ == workflow.AILanguageModel })
		if !hasModel {
			v.fail(issue{rule: RuleAgentModel, category: CategoryStructure,
				title:     "An AI Agent has no chat model",
				message:   fmt.Sprintf("The AI Agent %q has no %s connection: it needs a chat model sub-node to run.", n.name, workflow.AILanguageModel),
				guidance:  "Connect a chat model node (OpenAI, Anthropic, …) to the agent's Chat Model input.",
				technical: fmt.Sprintf("no edge of type %s into %q", workflow.AILanguageModel, n.name),
				fixes:     []string{fmt.Sprintf(`Add an "OpenAI Chat Model" (@n8n/n8n-nodes-langchain.lmChatOpenAi) and connect its %s output to %q`, workflow.AILanguageModel, n.name)}})
		}
	}
}

// subNodes checks that every sub-node (chat model, memory, tool, …) feeds
// its consumer by its own connection type: a chat model connected as
// "main" or "ai_tool" is never used.
func (v *validator) subNodes() {
	for _, e := range v.edges {
		from := v.byName[e.from]
		want := v.subNodeOutput(from)
		if want == "" || e.typ == want {
			continue
		}
		v.fail(issue{rule: RuleSubNodeType, category: CategoryStructure,
			title:     "A sub-node is connected with the wrong type",
			message:   fmt.Sprintf("%q (%s) is a sub-node with a %s output, but it is connected to %q as %s.", e.from, from.typ, want, e.to, e.typ),
			guidance:  fmt.Sprintf("Connect it through its %s output to the matching input of an AI node.", want),
			technical: fmt.Sprintf("edge %s; the node's output type is %s", e, want),
			fixes:     []string{fmt.Sprintf("Change the connection's type to %q (both under connections and in the target)", want)}})
	}
}

// subNodeOutput is the one connection type a sub-node outputs, or "" for
// nodes that are not sub-nodes or whose outputs depend on parameters.
func (v *validator) subNodeOutput(n *node) string {
	if v.opts.Catalog != nil {
		if d, ok := v.opts.Catalog.LookupVersion(n.typ, n.version); ok {
			if out := d.OutputTypes(); len(out) == 1 && out[0] != workflow.Main {
				return out[0]
			}
			return ""
		}
	}
	return subNodeOutputByName(n.typ)
}

// subNodePrefixes map the short names of @n8n/n8n-nodes-langchain's
// sub-nodes to their output type. TestSubNodeHeuristicMatchesCatalog holds
// the list to the catalog.
var subNodePrefixes = []struct{ prefix, output string }{
	{"lmChat", workflow.AILanguageModel}, {"lm", workflow.AILanguageModel}, {"modelSelector", workflow.AILanguageModel},
	{"memory", workflow.AIMemory}, {"tool", workflow.AITool}, {"embeddings", workflow.AIEmbedding},
	{"outputParser", workflow.AIOutputParser}, {"document", workflow.AIDocument}, {"reranker", workflow.AIReranker},
	{"retriever", workflow.AIRetriever}, {"textSplitter", workflow.AITextSplitter},
}

// langchainMainNodes are langchain nodes named like sub-nodes that are
// ordinary nodes with a main output.
var langchainMainNodes = []string{"memoryChatRetriever", "memoryManager", "toolExecutor"}

// subNodeOutputByName tells a sub-node's output type from its name: a
// "…Tool" of any package is an AI tool (n8n derives one from every node
// usable as a tool), and langchain's sub-nodes are named by kind.
func subNodeOutputByName(typ string) string {
	short := catalog.ShortName(typ)
	if strings.HasSuffix(short, "Tool") {
		return workflow.AITool
	}
	if !strings.HasPrefix(typ, langchain+".") || slices.Contains(langchainMainNodes, short) {
		return ""
	}
	for _, p := range subNodePrefixes {
		rest, ok := strings.CutPrefix(short, p.prefix)
		if ok && (rest == "" || rest[0] >= 'A' && rest[0] <= 'Z') {
			return p.output
		}
	}
	return ""
}
