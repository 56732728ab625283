// app.js is the console: threads, a thread's runs folded live from its
// event stream (fold.js), approvals, chat and cancel, and the AG-UI view.

import { Runs } from './fold.js';
import { el, renderRun } from './render.js';
import { AguiView } from './agui.js';

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;
const TOKEN_KEY = 'threadline.token';

const S = {
  token: localStorage.getItem(TOKEN_KEY) || '',
  threads: new Map(), // id → thread, as listed
  threadPage: 0,
  threadId: '',
  gen: 0, // bumped when another thread opens: late answers for the old one are dropped
  runs: new Runs(),
  users: new Map(), // runId → the user's message
  status: { hasActiveRun: false, backgroundTasks: [] },
  lastId: 0,
  es: null,
  retry: 0,
  open: new Set(), // <details> the user opened
  approvals: new Map(), // requestId → its card
  titleTimer: 0,
};

// ---- API ----

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (S.token) headers.Authorization = `Bearer ${S.token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch {
    throw new ApiError(0, 'unreachable', 'The server cannot be reached.');
  }
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(res.status, e.code || `http_${res.status}`, e.message || `HTTP ${res.status}`);
  }
  return data;
}

// streamURL is an EventSource URL: EventSource cannot send headers, so
// the token goes in the query (the server must run with --query-token).
function streamURL(path, params = {}) {
  const q = new URLSearchParams(params);
  if (S.token) q.set('access_token', S.token);
  const qs = q.toString();
  return qs ? `${path}?${qs}` : path;
}

// probe asks for a stream with fetch, which sees the status EventSource
// hides, and hangs up at the headers.
async function probe(url) {
  const ac = new AbortController();
  try {
    const res = await fetch(url, { headers: { Accept: 'text/event-stream' }, signal: ac.signal });
    const err = res.ok ? null : ((await res.json().catch(() => null)) || {}).error;
    return { status: res.status, message: err ? err.message : '' };
  } catch {
    return { status: 0, message: 'The server cannot be reached.' };
  } finally {
    ac.abort();
  }
}

function tokenHelp(stream) {
  if (!S.token) return 'The server needs a token: enter it in the Token field above and press "Use token".';
  if (stream) return 'The server refused the token on the event stream: a browser passes it as ?access_token=, which the server accepts only when it runs with --query-token.';
  return 'The server refused this token (401): enter a valid one in the Token field above.';
}

// notify shows an error (or clears the notice with null).
function notify(err, stream = false) {
  const n = $('notice');
  if (!err) {
    n.hidden = true;
    n.textContent = '';
    return;
  }
  n.textContent = err.status === 401 ? tokenHelp(stream) : err.message;
  n.hidden = false;
}

// ---- threads ----

function threadIdFromHash() {
  const m = /^#thread=(.+)$/.exec(location.hash);
  return m ? decodeURIComponent(m[1]) : '';
}

async function loadThreads(more = false) {
  const page = more ? S.threadPage + 1 : 1;
  const data = await api('GET', `/instance-ai/threads?limit=50&page=${page}`);
  S.threadPage = page;
  if (!more) {
    S.threads.clear();
    $('thread-list').replaceChildren();
  }
  for (const t of data.threads) {
    S.threads.set(t.id, t);
    $('thread-list').append(threadItem(t));
  }
  $('threads-more').hidden = !data.hasMore;
  $('threads-empty').hidden = S.threads.size > 0;
  markCurrent();
}

function threadItem(t) {
  return el('li', {},
    el('button', { type: 'button', class: 'thread-link', 'data-testid': 'thread-item', 'data-thread-id': t.id,
      onclick: () => { location.hash = `thread=${enc(t.id)}`; } },
    el('span', { class: 'title', text: t.title || '(untitled)' }), el('span', { class: 'muted id', text: t.id })));
}

function markCurrent() {
  for (const b of document.querySelectorAll('.thread-link')) {
    if (b.dataset.threadId === S.threadId) b.setAttribute('aria-current', 'true');
    else b.removeAttribute('aria-current');
  }
  const t = S.threads.get(S.threadId);
  if (t && document.activeElement !== $('thread-title')) $('thread-title').value = t.title || '';
}

async function createThread(ev) {
  ev.preventDefault();
  const body = {};
  const id = $('new-thread-id').value.trim();
  const title = $('new-thread-title').value.trim();
  if (id) body.id = id;
  if (title) body.title = title;
  try {
    const t = await api('POST', '/instance-ai/threads', body);
    notify(null);
    $('new-thread').reset();
    await loadThreads();
    location.hash = `thread=${enc(t.id)}`;
  } catch (e) {
    notify(e);
  }
}

async function renameThread(ev) {
  ev.preventDefault();
  try {
    await api('PATCH', `/instance-ai/threads/${enc(S.threadId)}`, { title: $('thread-title').value });
    notify(null);
    await loadThreads();
  } catch (e) {
    notify(e);
  }
}

async function deleteThread() {
  const t = S.threads.get(S.threadId);
  if (!confirm(`Delete the thread "${(t && t.title) || S.threadId}" with all its events and messages?`)) return;
  try {
    await api('DELETE', `/instance-ai/threads/${enc(S.threadId)}`);
    notify(null);
    location.hash = '';
    await loadThreads();
  } catch (e) {
    notify(e);
  }
}

// ---- one thread ----

function setConn(state) {
  const c = $('conn-state');
  c.textContent = state;
  c.className = `state-${state}`;
}

function closeStream() {
  if (S.es) S.es.close();
  S.es = null;
}

async function openThread(id) {
  closeStream();
  agui.close();
  S.gen++;
  Object.assign(S, { threadId: id, runs: new Runs(), users: new Map(), lastId: 0, retry: 0,
    status: { hasActiveRun: false, backgroundTasks: [] } });
  S.approvals.clear();
  S.open.clear();
  S.loaded = false;
  S.scrollRun = '';
  $('last-event-id').textContent = '–';
  $('thread').hidden = !id;
  markCurrent();
  render();
  if (!id) {
    setConn('offline');
    return;
  }
  $('thread-id').textContent = id;
  const gen = S.gen;
  setConn('connecting');
  try {
    const m = await loadMessages();
    if (gen !== S.gen) return;
    S.users = m.users;
    S.loaded = true;
    schedule();
    notify(null);
  } catch (e) {
    if (gen !== S.gen) return;
    setConn('offline');
    notify(e);
    return;
  }
  refreshStatus();
  follow(gen, null);
  if (!$('agui-view').hidden) agui.open(id);
}

// loadMessages reads every page of the thread's stored messages, newest
// first, each page continuing from the olderCursor of the one before (a
// page is bounded in bytes as well as count): the user messages by run,
// each run's folded tree, and the cursor they are folded up to.
async function loadMessages() {
  const base = `/instance-ai/threads/${enc(S.threadId)}/messages?limit=200`;
  const pages = [];
  let next = null;
  for (let query = base; query !== null; ) {
    const data = await api('GET', query);
    if (next === null) next = data.nextEventId;
    pages.push(data.messages);
    query = data.olderCursor === undefined ? null : `${base}&before=${data.olderCursor}`;
  }
  // Page 0 is the newest; each page is in chronological order.
  const users = new Map();
  const trees = new Map();
  for (const m of pages.reverse().flat()) {
    if (m.role === 'user') users.set(m.runId, { text: m.content, attachments: m.attachments || [] });
    else if (m.agentTree) trees.set(m.runId, m.agentTree);
  }
  return { users, trees: [...trees.entries()], next };
}

// follow reads the thread's event stream after cursor (null: from the
// start) and folds every event into its run.
function follow(gen, cursor) {
  const es = new EventSource(streamURL(`/instance-ai/events/${enc(S.threadId)}`, cursor === null ? {} : { lastEventId: cursor }));
  S.es = es;
  es.onopen = () => {
    S.retry = 0;
    setConn('live');
  };
  es.onmessage = (m) => {
    if (m.lastEventId) {
      S.lastId = Number(m.lastEventId);
      $('last-event-id').textContent = m.lastEventId;
    }
    const ev = JSON.parse(m.data);
    S.runs.apply(ev);
    onEvent(ev);
    schedule();
  };
  es.addEventListener('run-sync', (m) => {
    const f = JSON.parse(m.data);
    S.runs.replace(f.runId, f.agentTree);
    schedule();
  });
  es.addEventListener('reset', () => {
    // The events before this frame are gone: what follows is the thread.
    S.runs = new Runs();
    schedule();
  });
  es.onerror = () => {
    // EventSource would retry by itself after a dropped connection (not
    // after an error status), resuming after its last id. The console
    // reconnects itself either way, through the session restore: deltas
    // it saw live may never have been stored (a crash before their segment
    // closed), and only the log's fold says what the runs hold now.
    es.close();
    if (gen === S.gen && S.es === es) reconnect(gen);
  };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function reconnect(gen) {
  setConn('reconnecting');
  await sleep(Math.min(5000, 200 * 2 ** S.retry++));
  if (gen !== S.gen) return;
  const p = await probe(streamURL(`/instance-ai/events/${enc(S.threadId)}`, { lastEventId: S.lastId }));
  if (gen !== S.gen) return;
  if (p.status === 401 || p.status === 404) {
    setConn('offline');
    notify(new ApiError(p.status, '', p.status === 404 ? `This thread is gone: ${p.message}` : p.message), true);
    return;
  }
  if (p.status !== 200) return reconnect(gen);
  let m;
  try {
    m = await loadMessages();
  } catch (e) {
    if (gen !== S.gen) return;
    if (e.status === 401) {
      setConn('offline');
      notify(e);
      return;
    }
    return reconnect(gen);
  }
  if (gen !== S.gen) return;
  // The stored messages are the runs folded up to nextEventId-1; the stream
  // after that cursor brings every later event once, and a run-sync frame
  // for each run still live.
  const runs = new Runs();
  for (const [runId, tree] of m.trees) runs.replace(runId, tree);
  Object.assign(S, { runs, users: m.users, lastId: m.next - 1 });
  $('last-event-id').textContent = String(S.lastId);
  notify(null);
  schedule();
  refreshStatus();
  follow(gen, S.lastId);
}

function onEvent(ev) {
  switch (ev.type) {
    case 'run-start':
      // A new run is brought into view.
      S.scrollRun = ev.runId;
      if (!S.users.has(ev.runId)) refreshUsers();
      refreshStatus();
      // The AG-UI view follows the thread's latest run: a new one is
      // rejoined once the view's last run is over.
      if (!$('agui-view').hidden && !agui.following()) agui.open(S.threadId);
      break;
    case 'agent-spawned': case 'agent-completed': case 'run-finish': case 'confirmation-request':
      refreshStatus();
      break;
    case 'thread-title-updated':
      // Once for a burst (a replay of many renames): the list has the title.
      clearTimeout(S.titleTimer);
      S.titleTimer = setTimeout(() => loadThreads().catch(notify), 300);
      break;
    default:
  }
}

// refreshUsers picks up a user message sent from elsewhere (another tab,
// an API client), whose run the stream just started.
async function refreshUsers() {
  const gen = S.gen;
  try {
    const m = await loadMessages();
    if (gen !== S.gen) return;
    for (const [runId, user] of m.users) S.users.set(runId, user);
    schedule();
  } catch {
    // The next run-start tries again.
  }
}

async function refreshStatus() {
  const gen = S.gen;
  try {
    const st = await api('GET', `/instance-ai/threads/${enc(S.threadId)}/status`);
    if (gen !== S.gen) return;
    S.status = st;
    schedule();
  } catch (e) {
    if (gen === S.gen && e.status === 401) notify(e);
  }
}

// ---- chat, cancel, approvals ----

async function sendChat(ev) {
  ev.preventDefault();
  const message = $('message').value;
  if (!message.trim() || !S.threadId) return;
  try {
    const { runId } = await api('POST', `/instance-ai/chat/${enc(S.threadId)}`, { message });
    S.users.set(runId, { text: message, attachments: [] });
    S.scrollRun = runId;
    $('message').value = '';
    notify(null);
    schedule();
  } catch (e) {
    notify(e.status === 409 ? new ApiError(409, e.code, `A run is already active on this thread: wait for it or cancel it. (${e.message})`) : e);
  }
}

async function cancelRun() {
  try {
    await api('POST', `/instance-ai/chat/${enc(S.threadId)}/cancel`);
    notify(null);
  } catch (e) {
    notify(e);
  }
}

// approvalCard is the card of a pending confirmation, made once per
// request so that a redraw keeps what the user typed.
function approvalCard(tc) {
  const c = tc.confirmation;
  const known = S.approvals.get(c.requestId);
  if (known) return known;
  const inputId = `answer-${S.approvals.size}`;
  const input = c.inputType ? el('input', { id: inputId, 'data-testid': 'approval-input' }) : null;
  const outcome = el('p', { class: 'outcome', role: 'status', 'data-testid': 'approval-outcome' });
  const buttons = [];
  const answer = async (approved) => {
    for (const b of buttons) b.disabled = true;
    const body = { approved };
    if (input && input.value) body.userInput = input.value;
    try {
      await api('POST', `/instance-ai/confirm/${enc(c.requestId)}`, body);
      outcome.textContent = approved ? 'Approved: the tool runs.' : 'Denied.';
    } catch (e) {
      outcome.classList.add('error');
      if (e.status === 409) {
        outcome.textContent = e.code === 'already_answered' ? `Already answered. (${e.message})` : `Closed: this request can no longer be answered. (${e.message})`;
      } else {
        outcome.textContent = e.status === 401 ? tokenHelp(false) : e.message;
        for (const b of buttons) b.disabled = false;
      }
    }
  };
  buttons.push(
    el('button', { type: 'button', class: 'approve', 'data-testid': 'approve', onclick: () => answer(true) }, 'Approve'),
    el('button', { type: 'button', class: 'danger', 'data-testid': 'deny', onclick: () => answer(false) }, 'Deny'));
  const card = el('div', { class: `approval severity-${c.severity}`, role: 'group', 'aria-label': 'Approval request',
    'data-testid': 'approval-card', 'data-request-id': c.requestId },
  el('p', { class: 'approval-head' }, el('strong', { text: 'Approval needed' }), severityBadge(c.severity)),
  el('p', { text: c.message }),
  el('pre', { class: 'args', tabindex: 0, 'aria-label': 'Arguments', text: JSON.stringify(tc.args) }),
  input && el('label', { for: inputId, text: c.inputType === 'text' ? 'Your answer (optional)' : `Input (${c.inputType})` }),
  input,
  el('div', { class: 'actions' }, ...buttons),
  outcome);
  S.approvals.set(c.requestId, card);
  return card;
}

// severityBadge names the request's severity in words, not by color alone;
// a destructive one says so to a screen reader too.
function severityBadge(severity) {
  const s = severity || 'info';
  const attrs = { class: `badge severity severity-${s}`, 'data-testid': 'severity-badge', 'data-severity': s, text: s };
  if (s === 'destructive') {
    attrs.role = 'img';
    attrs['aria-label'] = 'Destructive: this action cannot be undone';
    attrs.text = '⚠ destructive';
  }
  return el('span', attrs);
}

// ---- drawing ----

let drawPending = false;
function schedule() {
  if (drawPending) return;
  drawPending = true;
  setTimeout(() => {
    drawPending = false;
    render();
  }, 30);
}

function render() {
  const ctx = { open: S.open, approval: approvalCard, suspended: S.status.isSuspended ? S.status.runId : '' };
  const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 60;
  const runs = S.runs.all();
  $('runs').replaceChildren(...runs.map((run) => renderRun(run, S.users.get(run.id), ctx)));
  $('runs-empty').hidden = !S.threadId || !S.loaded || runs.length > 0;
  const bg = S.status.backgroundTasks || [];
  $('background').hidden = bg.length === 0;
  $('background').replaceChildren(el('h3', { text: 'Background agents' }),
    el('ul', {}, ...bg.map((t) => el('li', { 'data-testid': 'background-task', 'data-status': t.status },
      el('strong', { text: t.role }), ` ${t.status} `, el('code', { class: 'muted', text: t.taskId })))));
  const active = S.status.hasActiveRun || bg.some((t) => t.status === 'running') || S.runs.all().some((r) => r.state.status === 'active');
  $('cancel-run').hidden = !active;
  const fresh = S.scrollRun && [...$('runs').children].find((r) => r.dataset.runId === S.scrollRun);
  if (fresh) {
    S.scrollRun = '';
    fresh.scrollIntoView({ block: 'start' });
  } else if (nearBottom) window.scrollTo(0, document.body.scrollHeight);
}

// ---- wiring ----

const agui = new AguiView({
  state: $('agui-state'), messages: $('agui-messages'), events: $('agui-events'),
  urlFor: (id) => streamURL(`/agui/threads/${enc(id)}/events`),
  probe, explain: (p) => (p.status === 401 ? tokenHelp(true) : p.status === 404 ? `No run to show (404): ${p.message}` : p.message || `HTTP ${p.status}`),
});

function showTab(name) {
  $('native-view').hidden = name !== 'native';
  $('agui-view').hidden = name !== 'agui';
  $('tab-native').setAttribute('aria-pressed', String(name === 'native'));
  $('tab-agui').setAttribute('aria-pressed', String(name === 'agui'));
  if (name === 'agui' && S.threadId) agui.open(S.threadId);
  else agui.close();
}

$('token').value = S.token;
$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  S.token = $('token').value.trim();
  if (S.token) localStorage.setItem(TOKEN_KEY, S.token);
  else localStorage.removeItem(TOKEN_KEY);
  notify(null);
  loadThreads().then(() => openThread(threadIdFromHash())).catch(notify);
});
$('new-thread').addEventListener('submit', createThread);
$('rename').addEventListener('submit', renameThread);
$('delete-thread').addEventListener('click', deleteThread);
$('threads-more').addEventListener('click', () => loadThreads(true).catch(notify));
$('chat').addEventListener('submit', sendChat);
$('cancel-run').addEventListener('click', cancelRun);
$('tab-native').addEventListener('click', () => showTab('native'));
$('tab-agui').addEventListener('click', () => showTab('agui'));
$('agui-rejoin').addEventListener('click', () => S.threadId && agui.open(S.threadId));
window.addEventListener('hashchange', () => openThread(threadIdFromHash()));

loadThreads().catch(notify);
openThread(threadIdFromHash());
