// agui.js follows a thread's latest run as AG-UI events (the rejoin
// extension, GET /agui/threads/{id}/events) and shows the events and the
// messages they build, as an AG-UI client would hold them.

import { el, renderParts } from './render.js';

// Fields worth showing beside an event's type.
const KEY_FIELDS = ['runId', 'messageId', 'role', 'toolCallId', 'toolCallName', 'parentMessageId', 'stepName', 'name', 'code', 'message'];

const short = (s, n = 80) => (s.length > n ? `${s.slice(0, n)}…` : s);

export class AguiView {
  constructor(opts) {
    this.o = opts;
    this.es = null;
    this.messages = [];
    this.lastRow = null;
    this.pending = false;
  }

  open(threadId) {
    this.close();
    this.messages = [];
    this.lastRow = null;
    this.o.events.replaceChildren();
    this.o.messages.replaceChildren();
    this.setState('connecting');
    const url = this.o.urlFor(threadId);
    const es = new EventSource(url);
    this.es = es;
    es.onopen = () => this.setState('live');
    es.onmessage = (m) => {
      const ev = JSON.parse(m.data);
      this.fold(ev);
      this.list(ev);
      this.schedule();
      if (ev.type === 'RUN_FINISHED' || ev.type === 'RUN_ERROR') {
        // The run is over: the stream has nothing more to say.
        this.close();
        this.setState(ev.type === 'RUN_ERROR' ? `run error: ${ev.message || ev.code || ''}` : 'run finished');
      }
    };
    es.onerror = async () => {
      if (this.es !== es) return;
      this.close();
      const p = await this.o.probe(url);
      if (this.es === null) this.setState(`closed: ${this.o.explain(p)}`);
    };
  }

  following() {
    return this.es !== null;
  }

  close() {
    if (this.es) this.es.close();
    this.es = null;
  }

  setState(s) {
    this.o.state.textContent = s;
  }

  // fold builds the messages from the events, as @ag-ui/client does.
  fold(ev) {
    const find = (id) => this.messages.find((m) => m.id === id);
    const findCall = (id) => {
      for (const m of this.messages) for (const tc of m.toolCalls || []) if (tc.id === id) return tc;
      return undefined;
    };
    switch (ev.type) {
      case 'MESSAGES_SNAPSHOT':
        this.messages = (ev.messages || []).map((m) => ({ ...m, toolCalls: (m.toolCalls || []).map((tc) => ({ ...tc, function: { ...tc.function } })) }));
        break;
      case 'TEXT_MESSAGE_START':
        if (!find(ev.messageId)) this.messages.push({ id: ev.messageId, role: ev.role || 'assistant', content: '' });
        break;
      case 'TEXT_MESSAGE_CONTENT': {
        const m = find(ev.messageId);
        if (m) m.content = (m.content || '') + ev.delta;
        break;
      }
      case 'TOOL_CALL_START': {
        let m = ev.parentMessageId && find(ev.parentMessageId);
        if (!m) {
          m = { id: ev.parentMessageId || ev.toolCallId, role: 'assistant', content: '', toolCalls: [] };
          this.messages.push(m);
        }
        m.toolCalls = m.toolCalls || [];
        m.toolCalls.push({ id: ev.toolCallId, type: 'function', function: { name: ev.toolCallName, arguments: '' } });
        break;
      }
      case 'TOOL_CALL_ARGS': {
        const tc = findCall(ev.toolCallId);
        if (tc) tc.function.arguments += ev.delta;
        break;
      }
      case 'TOOL_CALL_RESULT':
        this.messages.push({ id: ev.messageId, role: 'tool', toolCallId: ev.toolCallId, content: ev.content });
        break;
      default:
    }
  }

  // list adds the event to the event list; a stream of content deltas of
  // one message is one row with a count.
  list(ev) {
    const delta = ev.type.endsWith('_CONTENT') || ev.type === 'TOOL_CALL_ARGS';
    const key = delta ? `${ev.type}/${ev.messageId || ev.toolCallId}` : null;
    if (key && this.lastRow && this.lastRow.key === key) {
      this.lastRow.n++;
      this.lastRow.text += ev.delta || '';
      this.lastRow.detail.textContent = `×${this.lastRow.n} ${JSON.stringify(short(this.lastRow.text))}`;
      return;
    }
    const fields = KEY_FIELDS.filter((k) => typeof ev[k] === 'string').map((k) => `${k}=${short(ev[k], 48)}`);
    if (ev.type === 'RUN_FINISHED' && ev.outcome) fields.push(`outcome=${ev.outcome.type}`);
    if (ev.type === 'MESSAGES_SNAPSHOT') fields.push(`${(ev.messages || []).length} messages`);
    if (delta) fields.push(JSON.stringify(short(ev.delta || '')));
    const detail = el('span', { class: 'muted', text: fields.join(' ') });
    this.o.events.append(el('li', { 'data-testid': 'agui-event', 'data-type': ev.type }, el('code', { text: ev.type }), ' ', detail));
    this.lastRow = key ? { key, n: 1, text: ev.delta || '', detail } : null;
  }

  schedule() {
    if (this.pending) return;
    this.pending = true;
    setTimeout(() => {
      this.pending = false;
      this.renderMessages();
    }, 30);
  }

  renderMessages() {
    this.o.messages.replaceChildren(...this.messages.map((m) => el('div', { class: `agui-msg role-${m.role}`, 'data-testid': 'agui-message', 'data-role': m.role },
      el('span', { class: 'who', text: m.role === 'tool' ? `tool result (${m.toolCallId})` : m.role }),
      ...(Array.isArray(m.content) ? renderParts(m.content)
        : [m.content && el('div', { class: 'text', text: typeof m.content === 'string' ? m.content : JSON.stringify(m.content) })]),
      ...(m.toolCalls || []).map((tc) => el('pre', { class: 'args', tabindex: 0, 'data-testid': 'agui-tool-call', text: `${tc.function.name}(${tc.function.arguments})` })))));
  }
}
