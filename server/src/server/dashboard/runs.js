// The list of runs, polled while it is shown, newest first, a page at a
// time: the person asks for more with "more", and may keep one status.
// Each poll reads this executor's load and its endpoints (`endpoints.js`)
// too.

import { api } from './api.js';
import { $, el, enc, setError, setText } from './dom.js';
import { pollEndpoints } from './endpoints.js';
import { POLL_MS, listShown } from './state.js';
import { clock } from './text.js';

/** Runs per page, as the server's default. */
const PAGE = 50;
/** The most the server sends in one answer. */
const MAX_PAGE = 500;

const runRows = new Map();
let listTimer = null;
// How many runs the person asked to see, and in which status ('' = all).
const wanted = { count: PAGE, status: '' };

/** Stops polling the list (a run is being shown). */
export function stopList() {
  clearTimeout(listTimer);
}

/** Wires the status filter and the "more" button. */
export function wireList() {
  $('runs-status').addEventListener('change', () => {
    wanted.status = $('runs-status').value;
    wanted.count = PAGE;
    pollList();
  });
  $('runs-more').addEventListener('click', () => {
    wanted.count += PAGE;
    pollList();
  });
}

/** The newest `wanted.count` runs of the status, and whether more follow. */
async function fetchWanted() {
  const runs = [];
  let after = null;
  do {
    const query = new URLSearchParams();
    query.set('limit', String(Math.min(MAX_PAGE, wanted.count - runs.length)));
    if (wanted.status) query.set('status', wanted.status);
    if (after) query.set('after', after);
    const data = await api('GET', `/runs?${query}`);
    runs.push(...((data && data.runs) || []));
    after = (data && data.next) || null;
  } while (after && runs.length < wanted.count);
  return { runs, more: after !== null };
}

/** One line on this executor: its live runs, admitted limit, lag and queue. */
export function executorLine(x) {
  const ms = (v) => (v === null || v === undefined ? 'off' : `${v} ms`);
  return `this executor: ${x.live_runs} live of an admitted limit of ${x.admitted_limit}`
    + ` (at most ${x.max_live_runs}) · lag ${ms(x.lag_ms)} (admission target ${ms(x.lag_target_ms)},`
    + ` lease load bound ${ms(x.load_bound_ms)}) · ${x.queued_runs} queued in the store`;
}

async function pollExecutor() {
  try {
    setText($('executor-load'), executorLine(await api('GET', '/executor')));
  } catch (_) {
    // The list says what is wrong with the server; this line only goes blank.
    setText($('executor-load'), '');
  }
}

export async function pollList() {
  clearTimeout(listTimer);
  if (!listShown()) return;
  pollExecutor();
  pollEndpoints();
  try {
    const asked = { ...wanted };
    const { runs, more } = await fetchWanted();
    // Dropped if the person changed the question meanwhile.
    if (!listShown() || asked.count !== wanted.count || asked.status !== wanted.status) return;
    renderRuns(runs);
    $('runs-more').hidden = !more;
    setError('list', null);
  } catch (error) {
    if (!listShown()) return;
    setError('list', `runs: ${error.message}`);
  }
  if (listShown()) listTimer = setTimeout(pollList, POLL_MS);
}

function renderRuns(runs) {
  const body = $('runs-body');
  const seen = new Set();
  for (const run of runs) {
    const id = String(run.run_id);
    seen.add(id);
    let row = runRows.get(id);
    if (!row) {
      const link = el('a', { class: 'run-link', 'data-run-id': id, href: `#/runs/${enc(id)}` }, id);
      row = {
        tr: el('tr', { 'data-run-id': id }),
        flow: el('td'),
        status: el('span', { class: 'status' }),
        task: el('td', { class: 'task' }),
        updated: el('td', { class: 'time' }),
      };
      row.tr.append(el('td', null, link), row.flow, el('td', null, row.status), row.task, row.updated);
      runRows.set(id, row);
    }
    setText(row.flow, run.flow_name);
    setText(row.status, run.status);
    row.status.dataset.status = run.status || '';
    row.status.className = `status status-${run.status}`;
    // A listing holds a task's first characters; the run's page has it whole.
    const cut = Array.isArray(run.truncated) && run.truncated.includes('task');
    const task = cut ? `${run.task}…` : run.task || '';
    setText(row.task, task);
    row.task.title = task;
    setText(row.updated, clock(run.updated_at_ms));
    body.append(row.tr); // appended in the server's order (newest first)
  }
  for (const [id, row] of runRows) {
    if (!seen.has(id)) {
      row.tr.remove();
      runRows.delete(id);
    }
  }
  $('runs-empty').hidden = runs.length > 0;
  $('runs-table').hidden = runs.length === 0;
}
