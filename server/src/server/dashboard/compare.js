// A fork beside its parent, in two columns: for each loop step (by the
// loop's path and the step's number) what each run did there — the step,
// its model call and how it finished, its tool calls (sent, or replayed
// from the parent's record), the watchdog's verdicts, its answer — and the
// totals of each: status, answer, steps, calls, verdicts by verdict,
// tokens.
//
// Read from both runs' event streams (the stored log, then live until each
// run ends), as a run's page reads its own, and their views for what the
// events do not say (a run still running, an answer). Every string from
// the server is put into the page as text.

import { api, followEvents } from './api.js';
import { $, el, enc, setError, setText } from './dom.js';
import { session } from './state.js';
import { ENDPOINT_SUBJECT, resumedText } from './text.js';
import { parseSegment } from './tree.js';

const VERDICTS = ['RENEW', 'NUDGE', 'INTERVENE', 'ESCALATE'];
const SIDES = ['parent', 'fork'];

function newSide(id) {
  return {
    id,
    view: null,
    status: '',
    answer: null,
    reason: null,
    reader: null,
    // Cells by `loop \u0000 step`, and each loop's current step.
    cells: new Map(),
    current: new Map(),
    totals: { stepsRun: 0, rootSteps: null, sent: 0, replayed: 0, verdicts: {}, input: 0, output: 0 },
  };
}

/** The loop and step an event belongs to. */
function placeOf(side, e) {
  const path = e.path || 'run';
  const slash = path.lastIndexOf('/');
  const segment = parseSegment(path.slice(slash + 1));
  // A model or tool call names its step: `run/tool_call:2.0`.
  if (slash > 0 && (segment.kind === 'model_call' || segment.kind === 'tool_call')) {
    return { loop: path.slice(0, slash), step: segment.step };
  }
  // A worker's spawn is its parent loop's doing.
  if (slash > 0 && e.kind === 'worker_spawned') {
    const loop = path.slice(0, slash);
    return { loop, step: side.current.get(loop) || 0 };
  }
  if (typeof e.step === 'number') return { loop: path, step: e.step };
  return { loop: path, step: side.current.get(path) || 0 };
}

function cellAt(side, loop, step) {
  const key = `${loop}\u0000${step}`;
  let cell = side.cells.get(key);
  if (!cell) {
    cell = { loop, step, started: false, models: [], calls: new Map(), verdicts: {}, notes: [] };
    side.cells.set(key, cell);
  }
  return cell;
}

function callAt(cell, path, tool) {
  let call = cell.calls.get(path);
  if (!call) {
    call = { tool, sent: false, attempts: 0, outcome: null, replayed: null };
    cell.calls.set(path, call);
  }
  if (tool) call.tool = tool;
  return call;
}

/** Applies one event of a run to its column. */
function apply(side, e) {
  const { loop, step } = placeOf(side, e);
  const totals = side.totals;
  const cell = () => cellAt(side, loop, step);
  switch (e.kind) {
    case 'step_started':
      side.current.set(loop, step);
      cell().started = true;
      totals.stepsRun += 1;
      break;
    case 'model_call_finished': {
      const usage = e.usage || {};
      const input = Number(usage.input_tokens) || 0;
      const output = Number(usage.output_tokens) || 0;
      cell().models.push({ outcome: e.outcome, toolCalls: e.tool_calls, finish: e.finish_reason || null, input, output });
      totals.input += input;
      totals.output += output;
      break;
    }
    case 'tool_call_started': {
      const call = callAt(cell(), e.path, e.tool);
      if (!call.sent) totals.sent += 1;
      call.sent = true;
      call.attempts = Math.max(call.attempts, Number(e.attempt) || 1);
      call.outcome = null;
      break;
    }
    case 'tool_call_finished':
      callAt(cell(), e.path, e.tool).outcome = e.outcome;
      break;
    case 'tool_call_replayed':
      callAt(cell(), e.path, e.tool).replayed = { madeBy: e.made_by, byPerson: e.by_person };
      totals.replayed += 1;
      break;
    case 'verdict': {
      const verdicts = cell().verdicts;
      verdicts[e.verdict] = (verdicts[e.verdict] || 0) + 1;
      totals.verdicts[e.verdict] = (totals.verdicts[e.verdict] || 0) + 1;
      break;
    }
    case 'worker_spawned':
      cell().notes.push(['spawned', `spawned ${e.worker}: ${e.task}`]);
      break;
    case 'worker_finished':
      cell().notes.push(['worker', `worker ${e.outcome}: ${e.result}`]);
      break;
    case 'paused':
      cell().notes.push(['paused', e.subject === ENDPOINT_SUBJECT
        ? `waiting for its endpoint to answer again: ${e.reason}`
        : `paused for a person: ${e.reason}`]);
      break;
    case 'reconciliation_required':
      cell().notes.push(['paused', `${e.tool}: its outcome unknown, a person decides`]);
      break;
    case 'resumed':
      cell().notes.push(['resumed', resumedText(e)]);
      break;
    case 'run_completed':
      side.status = 'completed';
      side.answer = e.answer;
      totals.rootSteps = e.steps;
      cell().notes.push(['answer', `answer: ${e.answer}`]);
      break;
    case 'run_failed':
    case 'run_cancelled':
      side.status = e.kind.slice('run_'.length);
      side.reason = e.reason;
      cell().notes.push(['reason', `${side.status}: ${e.reason}`]);
      break;
    default:
      break;
  }
}

/** Shows the fork `id` beside its parent. */
export async function showCompare(id) {
  const cmp = { id, origin: null, parent: null, fork: newSide(id), frame: 0 };
  session.compare = cmp;
  setText($('compare-fork-id'), id);
  $('compare-back').setAttribute('href', `#/runs/${enc(id)}`);
  setText($('compare-lineage'), '');
  message('');
  $('compare-totals').replaceChildren();
  $('compare-steps').replaceChildren();
  let view;
  try {
    view = await api('GET', `/runs/${enc(id)}`);
  } catch (error) {
    if (session.compare === cmp) message(`run ${id}: ${error.message}`);
    return;
  }
  if (session.compare !== cmp) return;
  cmp.fork.view = view;
  if (!view.fork) {
    message(`Run ${id} is not a fork: it has no parent to compare it with.`);
    return;
  }
  cmp.origin = view.fork;
  cmp.parent = newSide(view.fork.parent);
  setText($('compare-lineage'),
    `forked from ${view.fork.parent} at ${view.fork.path} step ${view.fork.step}`
    + (view.fork.guidance ? `, with the guidance: ${view.fork.guidance}` : ''));
  for (const name of SIDES) follow(cmp, name);
  draw(cmp);
}

function follow(cmp, name) {
  const side = cmp[name];
  if (name === 'parent') refreshView(cmp, side, name);
  side.reader = followEvents(side.id, {
    event: (e) => {
      if (session.compare !== cmp) return;
      apply(side, e);
      schedule(cmp);
    },
    end: (status) => {
      if (session.compare !== cmp) return;
      if (status) side.status = status;
      setError(`compare-${name}`, null);
      refreshView(cmp, side, name);
    },
    error: (text) => {
      if (session.compare === cmp) setError(`compare-${name}`, text);
    },
  });
}

async function refreshView(cmp, side, name) {
  try {
    const view = await api('GET', `/runs/${enc(side.id)}`);
    if (session.compare !== cmp) return;
    side.view = view;
    setError(`compare-${name}`, null);
  } catch (error) {
    if (session.compare !== cmp) return;
    setError(`compare-${name}`, `run ${side.id}: ${error.message}`);
    // A run deleted (past its retention) has no events to wait for.
    if (error.status === 404 && side.reader) side.reader.close();
  }
  schedule(cmp);
}

/** Stops reading the runs compared (another page is being shown). */
export function stopCompare() {
  const cmp = session.compare;
  if (!cmp) return;
  session.compare = null;
  for (const name of SIDES) {
    if (cmp[name] && cmp[name].reader) cmp[name].reader.close();
    setError(`compare-${name}`, null);
  }
  if (cmp.frame) cancelAnimationFrame(cmp.frame);
}

function message(text) {
  setText($('compare-message'), text);
  $('compare-message').hidden = !text;
}

function schedule(cmp) {
  if (cmp.frame) return;
  cmp.frame = requestAnimationFrame(() => {
    cmp.frame = 0;
    if (session.compare === cmp) draw(cmp);
  });
}

const statusOf = (side) => side.status || (side.view && side.view.status) || 'unknown';
const answerOf = (side) => side.answer || (side.view && side.view.answer) || null;
const reasonOf = (side) => side.reason || (side.view && side.view.reason) || null;

/** The verdicts counted, in the ladder's order, then any other. */
const verdictsIn = (counts) => [...VERDICTS, ...Object.keys(counts).filter((v) => !VERDICTS.includes(v))]
  .filter((v) => counts[v]);

function verdictText(counts) {
  const parts = verdictsIn(counts).map((v) => `${v} ${counts[v]}`);
  return parts.length ? parts.join(' · ') : 'none';
}

function verdictList(counts) {
  const parts = verdictsIn(counts).map((v) => el('span', {
    class: `verdict verdict-${v}`, 'data-verdict': v, 'data-count': counts[v],
  }, `${v} ${counts[v]}`));
  return parts.length ? parts : [el('span', { class: 'muted' }, 'none')];
}

function head(cmp) {
  const column = (name) => {
    const side = cmp[name];
    return el('th', { 'data-run': name, scope: 'col' },
      `${name} `,
      el('a', { class: 'compare-run', href: `#/runs/${enc(side.id)}` }, el('code', null, side.id)));
  };
  return el('thead', null, el('tr', null, el('th', { scope: 'col' }, ''), column('parent'), column('fork')));
}

function drawTotals(cmp) {
  const row = (key, label, cell) => el('tr', { 'data-total': key },
    el('th', { scope: 'row' }, label),
    SIDES.map((name) => el('td', { 'data-run': name }, cell(cmp[name]))));
  const num = (n) => String(n);
  $('compare-totals').replaceChildren(
    head(cmp),
    el('tbody', null,
      row('status', 'status', (side) => el('span', { class: `status status-${statusOf(side)}` }, statusOf(side))),
      row('answer', 'answer', (side) => {
        const answer = answerOf(side);
        const reason = reasonOf(side);
        if (answer) return el('span', { class: 'compare-answer' }, answer);
        return el('span', { class: 'muted' }, reason ? `none: ${reason}` : 'none yet');
      }),
      row('steps', 'steps run (every loop)', (side) => num(side.totals.stepsRun)),
      row('root_steps', 'the run\u2019s steps at its end', (side) => (side.totals.rootSteps === null ? '\u2014' : num(side.totals.rootSteps))),
      row('calls_sent', 'tool calls sent', (side) => num(side.totals.sent)),
      row('calls_replayed', 'tool calls replayed, not sent', (side) => num(side.totals.replayed)),
      row('verdicts', 'verdicts', (side) => el('span', { 'data-text': verdictText(side.totals.verdicts) }, verdictList(side.totals.verdicts))),
      row('input_tokens', 'input tokens', (side) => num(side.totals.input)),
      row('output_tokens', 'output tokens', (side) => num(side.totals.output)),
    ),
  );
}

/** The loops in order: the run's first, then each by its path. */
function compareLoops(a, b) {
  if (a === b) return 0;
  if (a === 'run') return -1;
  if (b === 'run') return 1;
  return a.localeCompare(b, undefined, { numeric: true });
}

function callLine(call) {
  if (call.replayed) {
    return el('li', { class: 'call call-replayed', 'data-state': 'replayed' },
      el('strong', null, call.tool || 'a tool'), ' ',
      el('span', { class: 'state state-replayed' }, 'replayed'),
      ` not sent: ${call.replayed.byPerson ? 'the result a person gave' : 'its result'} was recorded in ${call.replayed.madeBy}`);
  }
  const outcome = call.outcome || 'running';
  return el('li', { class: 'call call-sent', 'data-state': 'sent' },
    el('strong', null, call.tool || 'a tool'), ' ',
    el('span', { class: 'state state-sent' }, 'sent'),
    ` ${outcome}${call.attempts > 1 ? ` after ${call.attempts} attempts` : ''}`);
}

function cellContent(name, cell, inherited) {
  if (!cell) {
    return [el('span', { class: 'muted' }, inherited ? 'inherited from the parent' : `not run by the ${name}`)];
  }
  const lines = [];
  if (!cell.started) {
    lines.push(el('div', { class: 'muted' }, inherited || cell.calls.size
      ? 'inherited from the parent: not run again'
      : `not started by the ${name}`));
  }
  for (const model of cell.models) {
    const calls = `${model.toolCalls} tool call${model.toolCalls === 1 ? '' : 's'}`;
    const finish = model.finish ? `, finished: ${model.finish}` : '';
    lines.push(el('div', { class: 'model', 'data-outcome': model.outcome },
      `model: ${model.outcome}, ${calls}${finish}, ${model.input} in / ${model.output} out tokens`));
  }
  if (cell.calls.size) lines.push(el('ul', { class: 'plain calls' }, [...cell.calls.values()].map(callLine)));
  if (Object.keys(cell.verdicts).length) {
    lines.push(el('div', { class: 'verdicts' }, 'verdicts: ', verdictList(cell.verdicts)));
  }
  for (const [kind, text] of cell.notes) lines.push(el('div', { class: `note note-${kind}` }, text));
  return lines;
}

function drawSteps(cmp) {
  const places = new Map();
  for (const name of SIDES) {
    for (const cell of cmp[name].cells.values()) places.set(`${cell.loop}\u0000${cell.step}`, { loop: cell.loop, step: cell.step });
  }
  const origin = cmp.origin || {};
  // The last step of each loop the fork started itself.
  const forkSteps = new Map();
  for (const cell of cmp.fork.cells.values()) {
    if (cell.started) forkSteps.set(cell.loop, Math.max(forkSteps.get(cell.loop) || 0, cell.step));
  }
  const ordered = [...places.values()].sort((a, b) => compareLoops(a.loop, b.loop) || a.step - b.step);
  const rows = ordered.map(({ loop, step }) => {
    const key = `${loop}\u0000${step}`;
    const forkPoint = loop === origin.path && step === origin.step;
    // The fork took the parent's state at the fork point: the forked
    // loop's steps before it, and any loop's steps before one the fork ran.
    const inherited = (loop === origin.path && step < origin.step) || step < (forkSteps.get(loop) || 0);
    return el('tr', { class: forkPoint ? 'fork-point' : null, 'data-loop': loop, 'data-step': step },
      el('th', { scope: 'row' }, el('code', null, loop), ` step ${step}`,
        forkPoint ? el('div', { class: 'muted' }, 'the fork starts here') : null),
      SIDES.map((name) => el('td', { 'data-run': name },
        cellContent(name, cmp[name].cells.get(key), name === 'fork' && inherited))));
  });
  $('compare-steps').replaceChildren(head(cmp), el('tbody', null, rows));
}

function draw(cmp) {
  if (!cmp.parent) return;
  drawTotals(cmp);
  drawSteps(cmp);
}
