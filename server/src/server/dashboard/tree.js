// The supervision tree: a node for each operation of the run (the run, its
// workers, model calls and tool calls, by their event paths), with its
// state, its lease's figures and the watchdog's wait banner.

import { $, el, setText } from './dom.js';
import { clock, counted, duration, phiText } from './text.js';

export const KIND_NAMES = { run: 'run', worker: 'worker', model_call: 'model call', tool_call: 'tool call' };

/** The kind and label of one segment of an event path (`worker:logs:1`). */
export function parseSegment(segment) {
  if (segment === 'run') return { kind: 'run', label: 'run' };
  let m = segment.match(/^worker:(.+?)(?::(\d+))?$/);
  if (m) return { kind: 'worker', label: m[2] ? `${m[1]} #${m[2]}` : m[1] };
  m = segment.match(/^model_call:(\d+)$/);
  if (m) return { kind: 'model_call', label: `step ${m[1]}`, step: Number(m[1]) };
  m = segment.match(/^tool_call:(\d+)\.(\d+)$/);
  if (m) return { kind: 'tool_call', label: `step ${m[1]}, call ${m[2]}`, step: Number(m[1]) };
  const colon = segment.indexOf(':');
  return colon > 0
    ? { kind: segment.slice(0, colon), label: segment.slice(colon + 1) }
    : { kind: segment, label: segment };
}

export function ensureNode(st, path) {
  let node = st.nodes.get(path);
  if (node) return node;
  const slash = path.lastIndexOf('/');
  const parent = slash > 0 ? ensureNode(st, path.slice(0, slash)) : null;
  const segment = slash > 0 ? path.slice(slash + 1) : path;
  const parsed = parseSegment(segment);
  node = {
    path,
    kind: parsed.kind,
    label: parsed.label,
    state: 'pending',
    attempt: null,
    step: null,
    limit: null,
    renewals: null,
    evidence: null,
    phi: undefined,
    lastVerdict: null,
    nudges: 0,
    note: '',
    banner: null,
    leaseId: null,
  };
  const li = el('li', { class: 'node', 'data-path': path, 'data-kind': parsed.kind, 'data-state': 'pending' });
  const head = el('div', { class: 'node-head' });
  const dom = {
    li,
    head,
    kind: el('span', { class: 'node-kind' }, KIND_NAMES[parsed.kind] || parsed.kind),
    label: el('span', { class: 'node-label', title: path }),
    state: el('span', { class: 'state' }),
    facts: el('span', { class: 'node-facts' }),
    note: el('div', { class: 'node-note' }),
    children: el('ul', { class: 'children' }),
  };
  head.append(dom.kind, dom.label, dom.state, dom.facts);
  li.append(head, dom.note, dom.children);
  node.dom = dom;
  if (parent) parent.dom.children.append(li);
  else {
    let root = $('tree').querySelector(':scope > ul.tree');
    if (!root) {
      root = el('ul', { class: 'tree' });
      $('tree').append(root);
    }
    root.append(li);
  }
  st.nodes.set(path, node);
  renderNode(node);
  return node;
}

export function renderNode(node) {
  const { dom } = node;
  dom.li.dataset.state = node.state;
  setText(dom.label, node.label);
  setText(dom.state, node.state);
  dom.state.className = `state state-${node.state}`;
  const facts = [];
  const fact = (name, text) => facts.push(el('span', { class: `fact fact-${name}` }, text));
  if (node.step !== null && node.kind !== 'model_call' && node.kind !== 'tool_call') {
    fact('step', node.limit ? `step ${node.step} of ${node.limit}` : `step ${node.step}`);
  }
  if (node.attempt !== null) fact('attempt', `attempt ${node.attempt}`);
  if (node.renewals !== null) fact('renewals', `renewals ${node.renewals}`);
  if (node.evidence !== null) fact('evidence', `evidence ${node.evidence}`);
  if (node.phi !== undefined) fact('phi', `phi ${phiText(node.phi)}`);
  if (node.lastVerdict) fact('verdict', node.lastVerdict);
  if (node.nudges) fact('nudges', `nudges ${node.nudges}`);
  dom.facts.replaceChildren(...facts);
  for (const [key, value] of [
    ['attempt', node.attempt], ['renewals', node.renewals], ['evidence', node.evidence],
  ]) {
    if (value === null) delete dom.li.dataset[key];
    else dom.li.dataset[key] = String(value);
  }
  if (node.phi === undefined) delete dom.li.dataset.phi;
  else dom.li.dataset.phi = node.phi === null ? 'none' : String(node.phi);
  setText(dom.note, node.note);
  dom.note.hidden = !node.note;
}

/** A new attempt has a new lease: its figures start again. */
export function freshLease(node) {
  node.renewals = null;
  node.evidence = null;
  node.phi = undefined;
  node.lastVerdict = null;
  node.leaseId = null;
}

export function setBanner(node, event) {
  clearBanner(node);
  const lease = event.lease_kind ? `${event.lease_kind.replace(/_/g, ' ')} lease` : 'lease';
  const banner = el('div', {
    class: 'wait-banner',
    role: 'status',
    'data-path': node.path,
    'data-lease-id': event.lease_id,
  },
  el('strong', null, 'waiting on the watchdog: '),
  `lease expired after ${counted(event.renewals, 'renewal')}`,
  el('span', { class: 'wait-detail' },
    ` · ${event.subject || ''} · ${lease} of ${duration(event.lease_ms)} · since ${clock(event.at)}`));
  node.banner = banner;
  node.dom.head.after(banner);
}

export function clearBanner(node) {
  if (!node || !node.banner) return;
  node.banner.remove();
  node.banner = null;
}

export function clearAllBanners(st) {
  for (const node of st.nodes.values()) clearBanner(node);
}

/** Clears the banner of the lease `leaseId` wherever it is shown. */
export function clearLeaseBanner(st, leaseId) {
  if (leaseId === undefined || leaseId === null) return;
  for (const node of st.nodes.values()) {
    if (node.banner && node.leaseId === leaseId) clearBanner(node);
  }
}
