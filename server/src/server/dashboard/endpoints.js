// The endpoints this executor's runs call, on the list of runs: each up or
// down, who marked it down and for how long, what it last said, its probes
// and the runs paused until it answers. A person marks one down or up from
// here (`POST /endpoints/down`, `/endpoints/up`); the server's answer or
// refusal is shown as text. Read each time the list is (`runs.js`), never
// more often.

import { api } from './api.js';
import { BY } from './controls.js';
import { $, el, enc, setText } from './dom.js';
import { listShown } from './state.js';
import { counted, duration } from './text.js';

/** The runs waiting on an endpoint linked by name; past that, counted. */
const LINKED = 10;

const rows = new Map();
// Bumped by each mark, so that a read begun before it does not undo what
// its answer showed.
let epoch = 0;

/** How long, in the largest unit that reads well: `41.0 s`, `3 min 5 s`. */
function span(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 60_000) return duration(ms);
  const s = Math.floor(ms / 1000);
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Who or what marked the endpoint `e` down. */
function downByText(e) {
  const by = e.down_by || {};
  if (by.by === 'person') return by.name;
  if (by.by === 'failures') return `its calls: ${counted(e.failures_in_a_row, 'failure')} in a row`;
  return String(by.by || '');
}

/** The probes of a down endpoint: how many failed, and when the next goes. */
function probesText(e) {
  if (e.up) return '—';
  const next = e.next_probe_in_ms;
  if (next === undefined || next === null) return 'none while marked down by hand';
  return `${counted(e.probes, 'failed probe')}; ${next > 0 ? `the next in ${span(next)}` : 'one under way'}`;
}

function say(text, refused = true) {
  const box = $('endpoints-message');
  setText(box, text || '');
  box.dataset.outcome = refused ? 'refused' : 'done';
  box.hidden = !text;
}

/** Reads the endpoints and shows them, if the list is still the page shown. */
export async function pollEndpoints() {
  const asked = epoch;
  try {
    const data = await api('GET', '/endpoints');
    if (!listShown() || asked !== epoch) return;
    renderEndpoints((data && data.endpoints) || []);
    setText($('endpoints-error'), '');
  } catch (error) {
    if (!listShown()) return;
    // The list says what is wrong with the server; this says what is
    // wrong with the endpoints' route (an older server lacks it).
    setText($('endpoints-error'), `The endpoints could not be read: ${error.message}`);
  }
}

function renderEndpoints(endpoints) {
  const seen = new Set();
  for (const e of endpoints) {
    seen.add(String(e.endpoint));
    renderRow(e);
  }
  for (const [name, row] of rows) {
    if (!seen.has(name)) {
      row.tr.remove();
      rows.delete(name);
    }
  }
  $('endpoints-empty').hidden = endpoints.length > 0;
  $('endpoints-table').hidden = endpoints.length === 0;
}

function renderRow(e) {
  const name = String(e.endpoint);
  let row = rows.get(name);
  if (!row) {
    row = {
      tr: el('tr', { class: 'endpoint-row', 'data-endpoint': name }),
      state: el('span', { class: 'status' }),
      downBy: el('td', { class: 'endpoint-down-by' }),
      downFor: el('td', { class: 'time endpoint-down-for' }),
      lastError: el('td', { class: 'why endpoint-last-error' }),
      probes: el('td', { class: 'endpoint-probes' }),
      waiting: el('td', { class: 'endpoint-waiting' }),
      button: el('button', { type: 'button', class: 'endpoint-mark' }),
      linked: null,
    };
    row.button.addEventListener('click', () => mark(row, name));
    row.tr.append(
      el('td', null, el('code', { class: 'endpoint-name' }, name)),
      el('td', null, row.state),
      row.downBy, row.downFor, row.lastError, row.probes, row.waiting,
      el('td', null, row.button),
    );
    rows.set(name, row);
  }
  $('endpoints-body').append(row.tr); // in the server's order
  const up = e.up === true;
  row.up = up;
  row.tr.dataset.up = String(up);
  setText(row.state, up ? 'up' : 'down');
  row.state.className = `status endpoint-${up ? 'up' : 'down'}`;
  setText(row.downBy, up ? '—' : downByText(e));
  setText(row.downFor, up ? '' : span(e.down_for_ms));
  setText(row.lastError, e.last_error || '');
  setText(row.probes, probesText(e));
  renderWaiting(row, Array.isArray(e.runs_waiting) ? e.runs_waiting.map(String) : []);
  if (!row.button.disabled) setText(row.button, up ? 'Mark down' : 'Mark up');
  row.button.className = `endpoint-mark ${up ? 'danger' : 'primary'}`;
}

/** The runs paused on the endpoint: how many, and a link to each. */
function renderWaiting(row, ids) {
  const drawn = ids.join('\n');
  if (row.linked === drawn) return;
  row.linked = drawn;
  row.waiting.dataset.count = String(ids.length);
  if (!ids.length) {
    row.waiting.replaceChildren('none');
    return;
  }
  const links = ids.slice(0, LINKED).map((id) => el('li', null,
    el('a', { class: 'run-link', 'data-run-id': id, href: `#/runs/${enc(id)}` }, id)));
  const more = ids.length > LINKED ? el('li', { class: 'muted' }, `and ${ids.length - LINKED} more`) : null;
  row.waiting.replaceChildren(
    el('span', { class: 'endpoint-waiting-count' }, counted(ids.length, 'run')),
    el('ul', { class: 'plain' }, links, more),
  );
}

/** What marking an endpoint up did to the `n` runs waiting on it. */
function resumingText(n) {
  if (n === 0) return 'No run waited on it.';
  if (n === 1) return 'The run waiting on it resumes.';
  return `The ${n} runs waiting on it resume, a wave at a time as it answers.`;
}

/** Marks the endpoint `name` down if its row shows it up, else up. */
async function mark(row, name) {
  const down = row.up;
  epoch += 1;
  row.button.disabled = true;
  say('');
  try {
    const body = down ? { endpoint: name, by: BY } : { endpoint: name };
    const result = (await api('POST', down ? '/endpoints/down' : '/endpoints/up', body)) || {};
    if (result.endpoint) renderRow(result.endpoint);
    say(down
      ? `Marked down: ${name}. Its runs\u2019 next calls to it wait, paused, until it is marked up; nothing probes it.`
      : `Marked up: ${name}. ${resumingText(result.runs_resuming || 0)}`, false);
  } catch (error) {
    say(`Not done: ${error.message}`);
  } finally {
    row.button.disabled = false;
    setText(row.button, row.up ? 'Mark down' : 'Mark up');
  }
  epoch += 1;
  if (listShown()) pollEndpoints();
}
