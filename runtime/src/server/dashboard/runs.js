// The list of runs, polled while it is shown, newest first.

import { api } from './api.js';
import { $, el, enc, setError, setText } from './dom.js';
import { POLL_MS, session } from './state.js';
import { clock } from './text.js';

const runRows = new Map();
let listTimer = null;

/** Stops polling the list (a run is being shown). */
export function stopList() {
  clearTimeout(listTimer);
}

export async function pollList() {
  clearTimeout(listTimer);
  if (session.current) return;
  try {
    const data = await api('GET', '/runs');
    if (session.current) return;
    renderRuns((data && data.runs) || []);
    setError('list', null);
  } catch (error) {
    if (session.current) return;
    setError('list', `runs: ${error.message}`);
  }
  if (!session.current) listTimer = setTimeout(pollList, POLL_MS);
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
    setText(row.task, run.task);
    row.task.title = run.task || '';
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
