// fold.js folds Instance AI events into the agent tree the console shows:
// the same fold as the server's Go package instanceai/agenttree (a port of
// n8n's agent-run reducer), so the console and GET .../messages agree on
// every stream. server/console/fold_test.go runs this file under Node
// against the Go fold on the reducer fixtures and on generated streams.
//
// It follows the Go package line by line, oddities included: the ids the
// reference refuses as object keys, the Object.prototype names that look
// like known agents there, the REPLACE rule of blocks. Objects hold only the
// keys the Go tree marshals, so JSON.stringify of a tree equals the Go JSON.

const DEFAULT_ROOT_AGENT_ID = 'agent-001';

// Ids the reference refuses to use as keys of its plain-object maps.
const UNSAFE_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

// Names every plain JS object inherits: in the reference a lookup of one of
// them finds a function, truthy but no node (see the Go package's js.go).
const INHERITED_KEYS = new Set([
  '__defineGetter__', '__defineSetter__', '__lookupGetter__', '__lookupSetter__',
  'hasOwnProperty', 'isPrototypeOf', 'propertyIsEnumerable',
  'toString', 'toLocaleString', 'valueOf', '__proto__', 'constructor',
]);

const MAX_DATE_MS = 8_640_000_000_000_000;

const isSafeKey = (key) => !UNSAFE_KEYS.has(key);

// eventTimestamp renders the event's ts (now when it has none) as an ISO
// string, or null where the reference throws (ts out of the Date range).
function eventTimestamp(ev) {
  const ms = ev.ts ? ev.ts : Date.now();
  if (ms > MAX_DATE_MS || ms < -MAX_DATE_MS) return null;
  return new Date(ms).toISOString();
}

function renderHint(toolName) {
  switch (toolName) {
    case 'task-control': return 'tasks';
    case 'build-workflow': case 'build-workflow-with-agent': return 'builder';
    case 'research-with-agent': return 'researcher';
    case 'create-tasks': return 'planner';
    case 'eval-setup-with-agent': return 'eval-setup';
    case 'create_skills': case 'list_skills': case 'read_skill': case 'update_skill': case 'load_skill': return 'skill';
    default: return 'default';
  }
}

function categorizeCancellation(reason) {
  switch (reason) {
    case 'timeout': return 'timeout';
    case 'service_shutdown': return 'shutdown';
    case 'user_cancelled': return 'user';
    case 'crash_interrupted': return 'interrupted';
    default: return '';
  }
}

// Error events with a known code are shown in their own way, not as text.
const isKnownErrorCode = (code) => code === 'quota_exhausted';

function newNode(agentId, role) {
  return { agentId, role, status: 'active', textContent: '', reasoning: '', toolCalls: [], children: [], timeline: [] };
}

// setOptional sets an optional string key, or removes it when empty, as the
// Go tree omits empty optional strings.
function setOptional(obj, key, value) {
  if (value) obj[key] = value;
  else delete obj[key];
}

function nodeHasContent(n) {
  if (!n) return false;
  return n.textContent !== '' || n.reasoning !== '' || n.timeline.length > 0 || n.toolCalls.length > 0 ||
    n.children.length > 0 || (n.planItems !== undefined && n.planItems.length > 0) || !!n.statusMessage ||
    (n.result !== undefined && n.result !== '') || !!n.error || n.tasks !== undefined ||
    n.setupItemsByWorkflowId !== undefined;
}

const lastEntry = (timeline) => (timeline.length ? timeline[timeline.length - 1] : null);

function timelineEntry(type, fields, responseId) {
  const e = { type, ...fields };
  if (responseId) e.responseId = responseId;
  return e;
}

// appendTimeline extends the last entry of the same type and responseId
// (both absent counts as the same), else starts a new one.
function appendTimeline(node, type, text, responseId) {
  const last = lastEntry(node.timeline);
  if (last && last.type === type && (last.responseId || '') === (responseId || '')) {
    last.content += text;
    return;
  }
  node.timeline.push(timelineEntry(type, { content: text }, responseId));
}

// createState is the initial state; the first run-start replaces the root
// with the run's orchestrator.
export function createState(rootAgentId = DEFAULT_ROOT_AGENT_ID) {
  if (!isSafeKey(rootAgentId)) rootAgentId = DEFAULT_ROOT_AGENT_ID;
  return {
    rootAgentId,
    agents: new Map([[rootAgentId, newNode(rootAgentId, 'orchestrator')]]),
    parents: new Map(),
    toolCalls: new Map(),
    status: 'active',
  };
}

// lookupAgent returns [node, inherited]: inherited is true where the
// reference would find an Object.prototype member instead of nothing.
function lookupAgent(s, id) {
  if (!isSafeKey(id)) return [undefined, false];
  if (s.agents.has(id)) return [s.agents.get(id), false];
  return [undefined, INHERITED_KEYS.has(id)];
}

function lookupToolCall(s, id) {
  if (s.toolCalls.has(id)) return [s.toolCalls.get(id), false];
  return [undefined, INHERITED_KEYS.has(id)];
}

// toAgentTree returns the root of the tree: the state's own node, updated
// by later events.
export function toAgentTree(s) {
  return s.agents.get(s.rootAgentId) || newNode(s.rootAgentId, 'unknown');
}

// findAgent returns the node of an agent id, or undefined.
export function findAgent(s, agentId) {
  return isSafeKey(agentId) ? s.agents.get(agentId) : undefined;
}

// reduceEvent folds one event into the state. It returns false where the
// reference throws part-way through the event; the state then keeps the
// changes made before that point, as the reference's does.
export function reduceEvent(s, ev) {
  const p = ev.payload || {};
  switch (ev.type) {
    case 'run-start': return runStart(s, ev);
    case 'run-finish': runFinish(s, p); return true;
    case 'text-delta': return delta(s, ev.agentId, 'text', p.text || '', ev.responseId);
    case 'reasoning-delta': return delta(s, ev.agentId, 'reasoning', p.text || '', ev.responseId);
    case 'text-block': return block(s, ev.agentId, 'text', p.text || '', ev.responseId);
    case 'reasoning-block': return block(s, ev.agentId, 'reasoning', p.text || '', ev.responseId);
    case 'tool-input-start': return toolInputStart(s, ev, p);
    case 'tool-call': return toolCall(s, ev, p);
    case 'tool-result': return toolResult(s, ev, p);
    case 'tool-error': case 'tool-interrupted': return toolError(s, ev, p);
    case 'agent-spawned': return agentSpawned(s, ev, p);
    case 'agent-completed': return agentCompleted(s, ev, p);
    case 'confirmation-request': confirmationRequest(s, p); return true;
    case 'tasks-update': {
      const [agent] = lookupAgent(s, ev.agentId);
      if (agent) {
        agent.tasks = p.tasks;
        if (p.planItems) agent.planItems = p.planItems;
      }
      return true;
    }
    case 'setup-items': return setupItems(s, ev, p);
    case 'status': {
      const [agent] = lookupAgent(s, ev.agentId);
      if (agent) setOptional(agent, 'statusMessage', p.message);
      return true;
    }
    case 'error': return errorEvent(s, ev, p);
    default:
      // filesystem-request, thread-title-updated and unknown types leave
      // the tree alone.
      return true;
  }
}

function runStart(s, ev) {
  const rootId = ev.agentId;
  if (!isSafeKey(rootId)) return true;
  const root = s.agents.get(s.rootAgentId);
  if (s.agents.size > 1 || nodeHasContent(root)) {
    // A follow-up run joins the root, indexed under its orchestrator id too.
    s.status = 'active';
    if (root) {
      root.status = 'active';
      if (rootId !== s.rootAgentId) s.agents.set(rootId, root);
    }
    return true;
  }
  s.rootAgentId = rootId;
  s.agents = new Map([[rootId, newNode(rootId, 'orchestrator')]]);
  s.parents = new Map();
  s.toolCalls = new Map();
  s.status = 'active';
  return true;
}

function runFinish(s, p) {
  switch (p.status) {
    case 'completed': s.status = 'completed'; break;
    case 'cancelled': case 'interrupted': s.status = 'cancelled'; break;
    default: s.status = 'error';
  }
  const root = s.agents.get(s.rootAgentId);
  if (root) {
    root.status = s.status;
    if (s.status === 'cancelled') setOptional(root, 'cancellationReason', categorizeCancellation(p.reason));
  }
  if (s.status === 'cancelled' || s.status === 'error') {
    for (const tc of s.toolCalls.values()) tc.isLoading = false;
  }
}

function delta(s, agentId, type, text, responseId) {
  const [agent, inherited] = lookupAgent(s, agentId);
  if (inherited) return false;
  if (agent) {
    if (type === 'text') agent.textContent += text;
    else agent.reasoning += text;
    appendTimeline(agent, type, text, responseId);
  }
  return true;
}

// block folds a text-block or reasoning-block. It replaces the open segment
// it closes (the last entry, same type and non-empty responseId, which the
// block extends at either end), else appends like a delta.
function block(s, agentId, type, text, responseId) {
  const [agent, inherited] = lookupAgent(s, agentId);
  if (inherited) return false;
  if (!agent) return true;
  const key = type === 'reasoning' ? 'reasoning' : 'textContent';
  const last = lastEntry(agent.timeline);
  const open = last !== null && last.type === type && !!responseId && last.responseId === responseId &&
    (text.startsWith(last.content) || text.endsWith(last.content));
  if (open && agent[key].endsWith(last.content)) {
    agent[key] = agent[key].slice(0, agent[key].length - last.content.length) + text;
    last.content = text;
    return true;
  }
  agent[key] += text;
  appendTimeline(agent, type, text, responseId);
  return true;
}

function toolInputStart(s, ev, p) {
  if (!isSafeKey(p.toolCallId)) return true;
  const [tc, inherited] = lookupToolCall(s, p.toolCallId);
  if (tc || inherited) return true;
  return addToolCall(s, ev, p.toolCallId, p.toolName, undefined);
}

function toolCall(s, ev, p) {
  if (!isSafeKey(p.toolCallId)) return true;
  const [announced, inherited] = lookupToolCall(s, p.toolCallId);
  if (inherited) return true;
  if (announced) {
    announced.args = p.args === undefined ? {} : p.args;
    return true;
  }
  return addToolCall(s, ev, p.toolCallId, p.toolName, p.args);
}

function toolResult(s, ev, p) {
  if (!isSafeKey(p.toolCallId)) return true;
  const [tc, inherited] = lookupToolCall(s, p.toolCallId);
  if (inherited) return eventTimestamp(ev) !== null;
  if (!tc) return true;
  tc.result = p.result === undefined ? null : p.result;
  tc.isLoading = false;
  const at = eventTimestamp(ev);
  if (at === null) return false;
  tc.completedAt = at;
  return true;
}

function toolError(s, ev, p) {
  if (!isSafeKey(p.toolCallId)) return true;
  const [tc, inherited] = lookupToolCall(s, p.toolCallId);
  if (inherited) return eventTimestamp(ev) !== null;
  if (!tc) return true;
  tc.error = p.error || '';
  tc.isLoading = false;
  const at = eventTimestamp(ev);
  if (at === null) return false;
  tc.completedAt = at;
  return true;
}

function agentCompleted(s, ev, p) {
  const [agent, inherited] = lookupAgent(s, ev.agentId);
  if (inherited) return false;
  if (!agent) return true;
  agent.status = p.status || (p.error ? 'error' : 'completed');
  agent.result = p.result || '';
  setOptional(agent, 'error', p.error);
  for (const tc of agent.toolCalls) tc.isLoading = false;
  return true;
}

function confirmationRequest(s, p) {
  if (!isSafeKey(p.toolCallId)) return;
  const [tc] = lookupToolCall(s, p.toolCallId);
  if (!tc) return;
  const { toolCallId, toolName, args, ...confirmation } = p;
  tc.confirmation = confirmation;
}

function errorEvent(s, ev, p) {
  if (isKnownErrorCode(p.code)) return true;
  const text = `\n\n*Error: ${p.content || ''}*`;
  let [agent, inherited] = lookupAgent(s, ev.agentId);
  if (inherited) return false;
  // Unlike every other event, an error of an unknown agent goes to the root.
  if (!agent) agent = s.agents.get(s.rootAgentId);
  if (agent) {
    agent.textContent += text;
    appendTimeline(agent, 'text', text, ev.responseId);
  }
  return true;
}

function addToolCall(s, ev, id, name, args) {
  const [agent, inherited] = lookupAgent(s, ev.agentId);
  if (!agent && !inherited) return true;
  const startedAt = eventTimestamp(ev);
  if (startedAt === null) return false;
  const tc = { toolCallId: id, toolName: name, args: args === undefined ? {} : args, isLoading: true, renderHint: renderHint(name), startedAt };
  s.toolCalls.set(id, tc);
  if (inherited) return false;
  agent.toolCalls.push(tc);
  agent.timeline.push(timelineEntry('tool-call', { toolCallId: id }, ev.responseId));
  return true;
}

function agentSpawned(s, ev, p) {
  if (!isSafeKey(ev.agentId) || !isSafeKey(p.parentId)) return true;
  const [existing, inherited] = lookupAgent(s, ev.agentId);
  if (inherited) return true;
  if (existing) {
    // A repeated spawn only refreshes the target resource of the same id.
    const incoming = p.targetResource;
    const known = existing.targetResource;
    if (incoming && (incoming.id || '') === ((known && known.id) || '')) {
      const merged = { ...incoming };
      if (!merged.name && known && known.name) merged.name = known.name;
      existing.targetResource = merged;
    }
    return true;
  }
  const [parent, parentInherited] = lookupAgent(s, p.parentId);
  if (!parent && !parentInherited) return true;
  const child = newNode(ev.agentId, p.role || '');
  child.tools = p.tools || [];
  for (const key of ['taskId', 'kind', 'title', 'subtitle', 'goal']) setOptional(child, key, p[key]);
  if (p.targetResource) child.targetResource = { ...p.targetResource };
  s.agents.set(ev.agentId, child);
  s.parents.set(ev.agentId, p.parentId);
  if (parentInherited) return false;
  parent.children.push(child);
  let responseId = ev.responseId;
  if (!responseId) {
    const last = lastEntry(parent.timeline);
    if (last) responseId = last.responseId;
  }
  parent.timeline.push(timelineEntry('child', { agentId: ev.agentId }, responseId));
  return true;
}

function setupItems(s, ev, p) {
  // Setup items belong to the root, whichever agent announced them.
  const [root] = lookupAgent(s, s.rootAgentId);
  if (!root || !isSafeKey(p.workflowId)) return true;
  const [announcer] = lookupAgent(s, ev.agentId);
  const at = eventTimestamp(ev);
  if (at === null) return false;
  root.latestSetupAnnouncement = { workflowId: p.workflowId, agentId: announcer ? announcer.agentId : ev.agentId, timestamp: at };
  root.setupItemsByWorkflowId = { ...(root.setupItemsByWorkflowId || {}), [p.workflowId]: p.items || [] };
  return true;
}

// normalizeLegacyReasoningTimeline gives a node folded before reasoning had
// timeline entries its reasoning as a first entry.
function normalizeLegacyReasoningTimeline(n) {
  if (!n.reasoning || n.timeline.some((e) => e.type === 'reasoning')) return;
  n.timeline.unshift({ type: 'reasoning', content: n.reasoning });
}

// stateFromAgentTree rebuilds a state from a tree (a run-sync frame's, or
// the messages endpoint's) so that folding can go on from it. The state
// adopts the tree's nodes. It returns null when the root's id is unsafe.
export function stateFromAgentTree(tree) {
  if (!tree || !isSafeKey(tree.agentId)) return null;
  const s = { rootAgentId: tree.agentId, agents: new Map(), parents: new Map(), toolCalls: new Map(), status: tree.status };
  adopt(s, tree, '');
  return s;
}

function adopt(s, n, parentId) {
  if (!isSafeKey(n.agentId)) return;
  s.agents.set(n.agentId, n);
  if (parentId && isSafeKey(parentId)) s.parents.set(n.agentId, parentId);
  n.children = Array.isArray(n.children) ? n.children.filter((c) => c && isSafeKey(c.agentId)) : [];
  n.toolCalls = Array.isArray(n.toolCalls) ? n.toolCalls.filter((tc) => tc && isSafeKey(tc.toolCallId)) : [];
  n.timeline = Array.isArray(n.timeline) ? n.timeline.filter((e) => {
    if (e.type === 'child') return isSafeKey(e.agentId);
    if (e.type === 'tool-call') return isSafeKey(e.toolCallId);
    return true;
  }) : [];
  for (const tc of n.toolCalls) s.toolCalls.set(tc.toolCallId, tc);
  normalizeLegacyReasoningTimeline(n);
  for (const c of n.children) adopt(s, c, n.agentId);
}

// Runs folds a thread's events per run, as the messages endpoint folds one
// assistant message per run: a run begins at its run-start; an event of a
// run whose run-start has not come, or of no run, is left out.
export class Runs {
  constructor() {
    this.order = [];
    this.byId = new Map();
  }

  // apply folds one event, in log order, into its run's state.
  apply(ev) {
    let run = this.byId.get(ev.runId);
    if (!run) {
      if (ev.type !== 'run-start') return;
      run = { id: ev.runId, startedAt: ev.ts || 0, state: createState() };
      this.byId.set(ev.runId, run);
      this.order.push(run);
    }
    reduceEvent(run.state, ev);
  }

  // replace sets a run's state from a tree, as a run-sync frame gives it;
  // a run not seen yet is added at the end.
  replace(runId, tree) {
    const state = stateFromAgentTree(tree);
    if (!state) return;
    const run = this.byId.get(runId);
    if (run) {
      run.state = state;
      return;
    }
    const added = { id: runId, startedAt: 0, state };
    this.byId.set(runId, added);
    this.order.push(added);
  }

  get(runId) {
    return this.byId.get(runId);
  }

  all() {
    return this.order;
  }
}
