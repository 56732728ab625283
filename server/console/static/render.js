// render.js draws a run's agent tree with DOM calls only: every string
// that comes from the server is set as text, never parsed as markup.

import { toAgentTree } from './fold.js';

// el builds an element: attributes (class, text, on<event>, the rest as
// attributes; false and null leave one out) and children (nodes or text).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

// json shows a value on one line when it is short, else indented.
export function json(v) {
  if (v === undefined) return '';
  const flat = JSON.stringify(v);
  return flat.length <= 80 ? flat : JSON.stringify(v, null, 2);
}

const STATUS_LABELS = { active: 'running…', completed: 'completed', cancelled: 'cancelled', error: 'failed' };

const badge = (status) => el('span', { class: `badge badge-${status}`, text: STATUS_LABELS[status] || status });

// renderRun draws one run: the user's message ({text, attachments}, as
// /messages returns it), the assistant's tree and the run's end. ctx keeps
// what must survive a redraw: the open <details> and the approval cards
// (with what the user typed into them).
export function renderRun(run, user, ctx) {
  const tree = toAgentTree(run.state);
  const status = run.state.status;
  let end = status === 'active' && ctx.suspended === run.id ? 'waiting for approval' : STATUS_LABELS[status] || status;
  if (tree.cancellationReason) end += ` (${tree.cancellationReason})`;
  return el('article', { class: 'run', 'data-testid': 'run', 'data-run-id': run.id, 'data-status': status },
    user !== undefined && el('div', { class: 'user', 'data-testid': 'user-message' },
      el('span', { class: 'who', text: 'You' }), user.text && el('div', { class: 'text', text: user.text }),
      user.attachments && user.attachments.length > 0 &&
        el('div', { class: 'attachments', 'data-testid': 'attachments' }, ...user.attachments.map(renderAttachment))),
    renderAgent(tree, 0, ctx),
    el('p', { class: `run-status status-${status}`, 'data-testid': 'run-status', text: end }));
}

// Inline images shown as thumbnails: the raster types a browser draws
// (SVG, which may carry script, is listed as a file instead).
const THUMB_TYPES = new Set(['image/png', 'image/jpeg', 'image/jpg', 'image/gif', 'image/webp']);

// thumbSource is the URL an image attachment is drawn from, or null: a
// data: URL of its inline bytes, or its own http(s) URL.
export function thumbSource(a) {
  const mime = String(a.mimeType || '').split(';')[0].trim().toLowerCase();
  const image = a.kind ? a.kind === 'image' : mime.startsWith('image/');
  if (!image) return null;
  if (a.url) {
    try {
      const u = new URL(a.url);
      return u.protocol === 'https:' || u.protocol === 'http:' ? u.href : null;
    } catch {
      return null;
    }
  }
  if (a.data && THUMB_TYPES.has(mime) && /^[A-Za-z0-9+/]+=*$/.test(a.data)) return `data:${mime};base64,${a.data}`;
  return null;
}

// renderAttachment draws an image as a thumbnail and any other file as its
// name and type.
function renderAttachment(a) {
  const name = a.fileName || a.url || a.fileId || 'attachment';
  const src = thumbSource(a);
  if (src) {
    return el('figure', { class: 'attachment image', 'data-testid': 'attachment' },
      el('img', { class: 'thumb', src, alt: name, loading: 'lazy', referrerpolicy: 'no-referrer' }),
      el('figcaption', { text: name }));
  }
  return el('div', { class: 'attachment file', 'data-testid': 'attachment' },
    el('span', { class: 'file-name', text: name }),
    a.mimeType && el('span', { class: 'muted', text: ` ${a.mimeType}` }));
}

// renderParts draws an AG-UI message's content parts: the text parts as
// text, the media parts as attachments (a thumbnail, or a file's name).
export function renderParts(parts) {
  const text = parts.filter((p) => p && p.type === 'text').map((p) => String(p.text)).join('');
  const media = parts.filter((p) => p && p.type !== 'text' && p.source).map((p) => ({
    kind: p.type, mimeType: p.source.mimeType,
    data: p.source.type === 'data' ? p.source.value : undefined,
    url: p.source.type === 'url' ? p.source.value : undefined,
    fileId: p.source.type === 'file' ? p.source.value : undefined,
    fileName: p.metadata && typeof p.metadata.filename === 'string' ? p.metadata.filename : undefined,
  }));
  return [text && el('div', { class: 'text', text }),
    media.length > 0 && el('div', { class: 'attachments', 'data-testid': 'attachments' }, ...media.map(renderAttachment))];
}

function renderAgent(node, depth, ctx) {
  const box = el('div', {
    class: depth ? 'agent child' : 'agent', 'data-testid': depth ? 'sub-agent' : 'agent',
    'data-agent-id': node.agentId, 'data-status': node.status,
  });
  if (depth) {
    box.append(el('div', { class: 'agent-head' },
      el('strong', { text: node.role || 'agent' }),
      node.title && el('span', { text: node.title }),
      node.subtitle && el('span', { class: 'muted', text: node.subtitle }),
      badge(node.status)));
  } else {
    box.append(el('span', { class: 'who', text: 'Assistant' }));
  }
  const tools = new Map(node.toolCalls.map((tc) => [tc.toolCallId, tc]));
  const children = new Map(node.children.map((c) => [c.agentId, c]));
  const timeline = el('div', { class: 'timeline' });
  node.timeline.forEach((entry, i) => {
    if (entry.type === 'text') timeline.append(el('div', { class: 'text', 'data-testid': 'text', text: entry.content }));
    else if (entry.type === 'reasoning') timeline.append(reasoning(`${node.agentId}#${i}`, entry.content, ctx));
    else if (entry.type === 'tool-call' && tools.has(entry.toolCallId)) timeline.append(renderToolCall(tools.get(entry.toolCallId), ctx));
    else if (entry.type === 'child' && children.has(entry.agentId)) timeline.append(renderAgent(children.get(entry.agentId), depth + 1, ctx));
  });
  box.append(timeline);
  if (node.tasks && Array.isArray(node.tasks.tasks)) box.append(renderTasks(node.tasks.tasks));
  if (node.statusMessage) box.append(el('p', { class: 'status-message', 'data-testid': 'status-message', text: node.statusMessage }));
  if (depth && node.result) box.append(el('div', { class: 'agent-result', 'data-testid': 'agent-result', text: node.result }));
  if (node.error) box.append(el('p', { class: 'error', text: node.error }));
  return box;
}

function reasoning(key, text, ctx) {
  const d = el('details', { class: 'reasoning', 'data-testid': 'reasoning', open: ctx.open.has(key) },
    el('summary', { text: 'Reasoning' }), el('div', { class: 'text', text }));
  d.addEventListener('toggle', () => (d.open ? ctx.open.add(key) : ctx.open.delete(key)));
  return d;
}

function renderToolCall(tc, ctx) {
  const state = tc.isLoading ? 'loading' : tc.error !== undefined ? 'error' : 'done';
  const label = { loading: 'running…', error: 'error', done: 'done' }[state];
  const box = el('div', { class: `tool-call tc-${state}`, 'data-testid': 'tool-call', 'data-tool-name': tc.toolName, 'data-state': state },
    el('div', { class: 'tool-head' }, el('code', { class: 'tool-name', text: tc.toolName }), el('span', { class: `badge badge-${state}`, text: label })),
    ...labelled('arguments', el('pre', { class: 'args', tabindex: 0, 'data-testid': 'tool-args', text: json(tc.args) })));
  if (tc.result !== undefined) box.append(...labelled('result', el('pre', { class: 'tool-result', tabindex: 0, 'data-testid': 'tool-result', text: json(tc.result) })));
  if (tc.error !== undefined) box.append(...labelled('error', el('pre', { class: 'tool-error', tabindex: 0, 'data-testid': 'tool-error', text: tc.error })));
  // A confirmation is pending while its call waits: the answer's result
  // (or the run's end) settles the call.
  if (tc.confirmation && tc.isLoading) box.append(ctx.approval(tc));
  return box;
}

let labels = 0;

// labelled returns a caption and the block it names (aria-labelledby).
function labelled(caption, block) {
  const id = `cap-${++labels}`;
  block.setAttribute('aria-labelledby', id);
  return [el('span', { class: 'caption', id, text: caption }), block];
}

const TASK_MARKS = { done: '✓', in_progress: '◐', failed: '✗', cancelled: '–' };

function renderTasks(tasks) {
  return el('ul', { class: 'tasks', 'data-testid': 'tasks', 'aria-label': 'Tasks' },
    ...tasks.map((t) => el('li', { class: `task task-${t.status}`, 'data-status': t.status },
      el('span', { class: 'mark', 'aria-hidden': 'true', text: TASK_MARKS[t.status] || '○' }),
      el('span', { text: t.description }),
      el('span', { class: 'sr-only', text: ` (${t.status})` }))));
}
