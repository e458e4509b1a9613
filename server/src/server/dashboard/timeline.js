// The run's timeline: where the time went. Each operation (the run, a
// worker, a loop's step, a model call, a tool call) is a bar on one time
// axis, from its start event to its end event (or to now while it runs,
// to the start of the pause while the run waits for a person),
// nested by its path; a restarted operation gets a new bar for each attempt,
// after the killed one and its backoff. Each lease expiry is a tick on its
// operation's bar, coloured by the verdict and shaped by who decided; a
// pause for a person is shaded across every row. A call a fork inherited
// from its parent is marked replayed where the fork began: it was not sent.
// Each step's row offers "Fork from here" (`fork.js`); the row of an
// operation whose lease is in flight — from its start event, which names
// the lease, to its end — offers "extend · stop" (`lease.js`).
//
// Drawn from the same events as the rest of the page (live, or replayed
// from the stored log), as SVG built with DOM calls: event text goes into
// text nodes and attributes only. The model is updated per event and drawn
// at most once a frame, updating the elements it made rather than making
// them again, so a run of hundreds of operations stays cheap; the rows
// scroll under a fixed axis, which rescales as the run goes on.

import { $, svgEl } from './dom.js';
import { forkPoint, openForkForm } from './fork.js';
import { leaseEnded, openLeasePanel } from './lease.js';
import { session } from './state.js';
import { ENDPOINT_SUBJECT, counted, duration, pausedText } from './text.js';
import { KIND_NAMES, parseSegment } from './tree.js';

const ROW = 18;
const BAR = 10;
const LABEL_WIDTH = 230;
const AXIS_HEIGHT = 22;
const RIGHT_MARGIN = 12;
/** How often a live timeline is redrawn when no event comes. */
const LIVE_MS = 1000;
/** Longest label shown; the whole path is in the row's tooltip. */
const LABEL_CHARS = 30;
/** How wide a replayed call's mark is: it took no time in the fork. */
const REPLAYED_WIDTH = 8;
/** Longest label beside "extend · stop", which takes the label's end. */
const LABEL_CHARS_BESIDE_BUTTON = 20;
/** Where a row's button begins, and how wide it is. */
const BUTTON_X = LABEL_WIDTH - 92;
const BUTTON_WIDTH = 86;

const VERDICTS = ['RENEW', 'NUDGE', 'INTERVENE', 'ESCALATE'];
/** Who decided, as `DecidedBy` names it, and how the legend says it. */
const DECIDERS = [
  ['ladder', 'free renewal (ladder)'],
  ['evidence', 'evidence'],
  ['evaluator', 'evaluator'],
  ['breaker', 'breaker (evaluator failed)'],
  ['policy', 'rule of the policy'],
  ['load', 'load (the executor was late; not counted)'],
  ['cap', 'renewal cap'],
  ['person', 'a person, by hand'],
];
/** One mark per decider, centred on (0, 0), within ±5 px. */
const MARKS = {
  ladder: 'M-4,-4H4V4H-4Z',
  evidence: 'M0,-5A5,5 0 1 1 0,5A5,5 0 1 1 0,-5Z',
  evaluator: 'M0,-6L6,0L0,6L-6,0Z',
  breaker: 'M-5,-1.5H5V1.5H-5Z',
  policy: 'M0,-6L5.5,4.5H-5.5Z',
  load: 'M-5,-5H5L-5,5H5Z',
  cap: 'M-5,-3.5L-3.5,-5L0,-1.5L3.5,-5L5,-3.5L1.5,0L5,3.5L3.5,5L0,1.5L-3.5,5L-5,3.5L-1.5,0Z',
  person: 'M0,-5A2.2,2.2 0 1 1 0,-0.6A2.2,2.2 0 1 1 0,-5ZM-4.5,5A4.5,4.5 0 0 1 4.5,5Z',
};

const TERMINAL_KINDS = new Set(['run_completed', 'run_failed', 'run_cancelled']);

function timeline(st) {
  if (!st.timeline) {
    st.timeline = {
      ops: new Map(),
      roots: [],
      rowsDirty: true,
      rows: [],
      pauses: [],
      t0: 0,
      tLast: 0,
      ended: false,
      frame: 0,
      liveTimer: 0,
      dom: null,
    };
  }
  return st.timeline;
}

/** The operation at `key`, made (with its parents) if new. */
function operation(T, key, kind, label) {
  let op = T.ops.get(key);
  if (op) return op;
  const hash = key.indexOf('#');
  const slash = key.lastIndexOf('/');
  let parentKey = null;
  if (hash > 0) parentKey = key.slice(0, hash);
  else if (slash > 0) parentKey = key.slice(0, slash);
  const parent = parentKey ? pathOperation(T, parentKey) : null;
  op = {
    key,
    kind,
    label,
    parent,
    depth: parent ? parent.depth + 1 : 0,
    children: [],
    bars: [],
    ticks: [],
    backoffs: [],
    step: null,
    // A step's loop and number, for "Fork from here"; a replayed call's
    // maker.
    forkAt: null,
    replayed: null,
    // The lease in flight on it, by its id, or null.
    lease: null,
    dom: null,
  };
  if (parent) parent.children.push(op);
  else T.roots.push(op);
  T.ops.set(key, op);
  T.rowsDirty = true;
  return op;
}

/** The operation of an event path, named after its last segment. */
function pathOperation(T, path) {
  const segment = path.slice(path.lastIndexOf('/') + 1);
  const parsed = parseSegment(segment);
  const kind = KIND_NAMES[parsed.kind] || parsed.kind;
  return operation(T, path, parsed.kind, parsed.kind === 'run' ? 'run' : `${kind} ${parsed.label}`);
}

/** Starts a bar on `op` at `at`; an open bar of an older attempt ends there. */
function begin(op, at, attempt) {
  const last = op.bars[op.bars.length - 1];
  if (last && last.end === null) {
    if (last.attempt === attempt) return;
    last.end = at;
  }
  op.bars.push({ start: at, end: null, attempt, outcome: null, dom: null });
}

/** Ends the open bar of `op` at `at`, with how it ended. */
function finish(op, at, outcome) {
  const last = op.bars[op.bars.length - 1];
  if (!last) {
    op.bars.push({ start: at, end: at, attempt: null, outcome, dom: null });
  } else if (last.end === null) {
    last.end = at;
    last.outcome = outcome;
  }
}

/** The lease `id` watches `op` from now, if its start event named one. */
function holdLease(op, id) {
  if (op.lease !== null && op.lease !== id) leaseEnded(op.lease);
  op.lease = id === undefined ? null : id;
}

/** The lease on `op`, if any, is no longer in flight. */
function endLease(op) {
  if (op.lease === null) return;
  leaseEnded(op.lease);
  op.lease = null;
}

/** Ends a loop (the run or a worker) and the step it was in. */
function finishLoop(op, at, outcome) {
  if (op.step) finish(op.step, at, outcome);
  finish(op, at, outcome);
}

/** The row a verdict's tick goes on: a worker-step lease's on its step. */
function tickTarget(T, e) {
  const op = pathOperation(T, e.path || 'run');
  return e.lease_kind === 'worker_step' && op.step ? op.step : op;
}

/** Applies one event of the run `st` to its timeline and schedules a draw. */
export function timelineEvent(st, e) {
  const T = timeline(st);
  const at = Number(e.at) || 0;
  if (at && (!T.t0 || at < T.t0)) T.t0 = at;
  if (at > T.tLast) T.tLast = at;
  const path = e.path || 'run';
  switch (e.kind) {
    case 'run_started':
    case 'run_forked':
      begin(pathOperation(T, path), at, null);
      break;
    case 'worker_spawned': {
      const op = pathOperation(T, path);
      begin(op, at, null);
      holdLease(op, e.lease_id);
      break;
    }
    case 'step_started': {
      const loop = pathOperation(T, path);
      // A loop a fork inherited began in its parent: its bar starts here.
      if (!loop.bars.length) begin(loop, at, null);
      if (loop.step) finish(loop.step, at, 'ok');
      loop.step = operation(T, `${path}#step:${e.step}`, 'step', `step ${e.step}`);
      loop.step.forkAt = { path, step: e.step };
      begin(loop.step, at, null);
      break;
    }
    case 'tool_call_replayed': {
      const op = pathOperation(T, path);
      op.label = `tool ${e.tool} (replayed)`;
      op.replayed = { madeBy: e.made_by, byPerson: e.by_person };
      op.bars.push({ start: at, end: at, attempt: null, outcome: 'replayed', dom: null });
      break;
    }
    case 'model_call_started': {
      const op = pathOperation(T, `${path}/model_call:${e.step}`);
      begin(op, at, e.attempt);
      holdLease(op, e.lease_id);
      break;
    }
    case 'model_call_finished': {
      const op = pathOperation(T, `${path}/model_call:${e.step}`);
      finish(op, at, e.outcome);
      endLease(op);
      break;
    }
    case 'tool_call_started': {
      const op = pathOperation(T, path);
      op.label = `tool ${e.tool}`;
      begin(op, at, e.attempt);
      holdLease(op, e.lease_id);
      break;
    }
    case 'tool_call_finished': {
      const op = pathOperation(T, path);
      finish(op, at, e.outcome);
      endLease(op);
      break;
    }
    case 'worker_finished': {
      const op = pathOperation(T, path);
      finishLoop(op, at, e.outcome);
      endLease(op);
      break;
    }
    case 'restarted': {
      const op = pathOperation(T, path);
      op.backoffs.push({ start: at, end: at + (Number(e.delay_ms) || 0), dom: null });
      break;
    }
    case 'verdict':
      tickTarget(T, e).ticks.push({
        at,
        verdict: e.verdict,
        decidedBy: e.decided_by,
        text: `${e.subject}: ${e.verdict} by ${e.decided_by} after ${counted(e.renewals, 'renewal')}: ${e.reason}`,
        dom: null,
      });
      break;
    case 'paused':
    case 'reconciliation_required': {
      const open = T.pauses[T.pauses.length - 1];
      if (!open || open.end !== null) {
        T.pauses.push({
          start: at,
          end: null,
          text: e.subject === ENDPOINT_SUBJECT
            ? pausedText(e) : `waiting for a person about ${e.subject || e.tool}: ${e.reason}`,
          dom: null,
        });
      }
      break;
    }
    case 'resumed': {
      const open = T.pauses[T.pauses.length - 1];
      if (open && open.end === null) open.end = at;
      break;
    }
    default:
      if (TERMINAL_KINDS.has(e.kind)) {
        const status = e.kind.slice('run_'.length);
        for (const op of T.ops.values()) {
          endLease(op);
          for (const bar of op.bars) {
            if (bar.end === null) {
              bar.end = at;
              bar.outcome = op.key === 'run' ? status : 'cancelled';
            }
          }
        }
        const open = T.pauses[T.pauses.length - 1];
        if (open && open.end === null) open.end = at;
        T.ended = true;
      }
      break;
  }
  schedule(st);
}

/** Empties the timeline's section, for a run being opened. */
export function resetTimeline() {
  $('timeline').replaceChildren();
  $('timeline-empty').hidden = false;
  drawLegend();
}

function schedule(st) {
  const T = timeline(st);
  if (T.frame) return;
  T.frame = requestAnimationFrame(() => {
    T.frame = 0;
    if (st !== session.current) return;
    draw(st);
    clearTimeout(T.liveTimer);
    if (!T.ended) T.liveTimer = setTimeout(() => schedule(st), LIVE_MS);
  });
}

/** The rows in tree order: each operation after its parent. */
function flatten(T) {
  const rows = [];
  const walk = (op) => {
    rows.push(op);
    for (const child of op.children) walk(child);
  };
  for (const root of T.roots) walk(root);
  return rows;
}

/** A round span, at least `ms`, so the axis does not move every frame. */
function niceSpan(ms) {
  const floor = Math.max(ms, 1000);
  const magnitude = 10 ** Math.floor(Math.log10(floor));
  for (const factor of [1, 1.5, 2, 3, 4, 5, 6, 8, 10]) {
    if (factor * magnitude >= floor) return factor * magnitude;
  }
  return 10 * magnitude;
}

/** An axis step of 1, 2 or 5 × 10^n ms giving about `count` ticks. */
function axisStep(span, count) {
  const raw = span / Math.max(count, 1);
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 5, 10]) {
    if (factor * magnitude >= raw) return factor * magnitude;
  }
  return 10 * magnitude;
}

function build() {
  const axis = svgEl('svg', { class: 'tl-axis', height: AXIS_HEIGHT, 'aria-hidden': 'true' });
  const pauses = svgEl('g', { class: 'tl-pauses' });
  const rows = svgEl('g', { class: 'tl-rows' });
  const grid = svgEl('g', { class: 'tl-grid' });
  const body = svgEl('svg', { class: 'tl-body', role: 'img', 'aria-label': 'timeline of the run' },
    grid, pauses, rows);
  const scroll = document.createElement('div');
  scroll.className = 'tl-scroll';
  scroll.append(body);
  $('timeline').replaceChildren(axis, scroll);
  $('timeline-empty').hidden = true;
  return { axis, body, scroll, pauses, rows, grid };
}

function draw(st) {
  const T = timeline(st);
  if (!T.t0) return;
  if (!T.dom || !T.dom.scroll.isConnected) T.dom = build();
  const { axis, body, scroll, pauses, rows, grid } = T.dom;
  if (T.rowsDirty) {
    T.rows = flatten(T);
    T.rowsDirty = false;
  }
  const width = Math.max(scroll.clientWidth || 0, 480);
  const plot = width - LABEL_WIDTH - RIGHT_MARGIN;
  const now = T.ended ? T.tLast : Math.max(T.tLast, Date.now());
  // While the run waits for a person nothing of it runs and its clocks
  // stand still: what is open ends where the pause began, under its shade.
  const open = T.pauses[T.pauses.length - 1];
  const until = open && open.end === null ? Math.min(open.start, now) : now;
  const span = niceSpan(now - T.t0);
  const x = (t) => LABEL_WIDTH + ((Math.max(t, T.t0) - T.t0) / span) * plot;
  const height = T.rows.length * ROW;
  axis.setAttribute('width', width);
  body.setAttribute('width', width);
  body.setAttribute('height', height);

  drawAxis(axis, grid, T.t0, span, plot, x, height);

  T.rows.forEach((op, index) => {
    if (!op.dom) op.dom = newRow(op);
    const row = op.dom;
    row.g.setAttribute('transform', `translate(0,${index * ROW})`);
    if (rows.children[index] !== row.g) rows.insertBefore(row.g, rows.children[index] || null);
    drawLeaseButton(row, op);
    const chars = op.lease !== null ? LABEL_CHARS_BESIDE_BUTTON : LABEL_CHARS;
    const label = op.label.length > chars ? `${op.label.slice(0, chars - 1)}…` : op.label;
    if (row.label.textContent !== label) row.label.textContent = label;
    if (row.title.textContent !== `${op.key}: ${op.label}`) row.title.textContent = `${op.key}: ${op.label}`;
    for (const gap of op.backoffs) {
      if (!gap.dom) {
        gap.dom = svgEl('line', { class: 'tl-backoff', y1: ROW / 2, y2: ROW / 2 });
        row.bars.prepend(gap.dom);
      }
      gap.dom.setAttribute('x1', x(gap.start));
      gap.dom.setAttribute('x2', x(Math.min(gap.end, until)));
    }
    for (const bar of op.bars) drawBar(row, op, bar, x, until);
    for (const tick of op.ticks) drawTick(row, tick, x);
  });

  for (const pause of T.pauses) {
    if (!pause.dom) {
      pause.dom = svgEl('rect', { class: 'tl-pause', y: 0 }, svgEl('title', { text: pause.text }));
      pauses.append(pause.dom);
    }
    const start = x(pause.start);
    pause.dom.setAttribute('x', start);
    pause.dom.setAttribute('width', Math.max(x(pause.end === null ? now : pause.end) - start, 1));
    pause.dom.setAttribute('height', height);
    pause.dom.dataset.open = String(pause.end === null);
  }
}

function newRow(op) {
  const title = svgEl('title');
  const label = svgEl('text', { class: 'tl-label', x: 4 + op.depth * 12, y: ROW / 2 + 4 });
  const bars = svgEl('g', { class: 'tl-bars' });
  const ticks = svgEl('g', { class: 'tl-ticks' });
  const g = svgEl('g', { class: 'tl-row', 'data-path': op.key, 'data-kind': op.kind },
    svgEl('rect', { class: 'tl-row-bg', x: 0, y: 0, width: '100%', height: ROW }),
    title, label, bars, ticks, op.forkAt ? forkButton(op.forkAt) : null);
  if (op.replayed) g.dataset.replayed = 'true';
  return { g, title, label, bars, ticks, lease: null };
}

/** A row's button, as `name` for a screen reader, saying `text`. */
function rowButton(attrs, name, about, text, open) {
  const button = svgEl('g', { ...attrs, role: 'button', tabindex: 0, 'aria-label': name },
    svgEl('title', { text: about }),
    svgEl('rect', { class: 'tl-button-bg', x: BUTTON_X, y: 2, width: BUTTON_WIDTH, height: ROW - 4, rx: 3 }),
    svgEl('text', { class: 'tl-button-text', x: LABEL_WIDTH - 10, y: ROW / 2 + 3.5, text }));
  const press = (event) => {
    event.preventDefault();
    open();
  };
  button.addEventListener('click', press);
  button.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') press(event);
  });
  return button;
}

/** "extend · stop" on the row of `op` while a lease is in flight on it. */
function drawLeaseButton(row, op) {
  const shown = row.lease;
  if (shown && shown.id === op.lease) return;
  if (shown) shown.g.remove();
  row.lease = null;
  if (op.lease === null) return;
  const id = op.lease;
  const name = `Extend or stop lease:${id} (${op.label})`;
  const g = rowButton(
    { class: 'tl-lease', 'data-lease': id },
    name,
    `${name}: its lease extended, or its operation stopped, by hand`,
    'extend \u00b7 stop',
    () => openLeasePanel(id, op.key, op.label),
  );
  row.g.append(g);
  row.lease = { id, g };
}

/** "Fork from here" at the right of a step's label: opens the fork form. */
function forkButton({ path, step }) {
  const name = `Fork from here: ${path} step ${step}`;
  return rowButton(
    { class: 'tl-fork', 'data-at': forkPoint(path, step) },
    name,
    `${name} (a new run from the state before this step began)`,
    'fork from here',
    () => openForkForm(path, step),
  );
}

/** Draws `bar`; one still running ends at `until` (now, or an open pause's start). */
function drawBar(row, op, bar, x, until) {
  if (!bar.dom) {
    bar.dom = svgEl('rect', { y: (ROW - BAR) / 2, height: BAR, rx: 2 }, svgEl('title'));
    row.bars.append(bar.dom);
  }
  const running = bar.end === null;
  const outcome = running ? 'running' : bar.outcome || 'ok';
  const start = x(bar.start);
  const end = x(running ? until : bar.end);
  const replayed = outcome === 'replayed' && op.replayed;
  bar.dom.setAttribute('class', `tl-bar tl-bar-${op.kind} outcome-${outcome}`);
  bar.dom.setAttribute('x', start);
  bar.dom.setAttribute('width', Math.max(end - start, replayed ? REPLAYED_WIDTH : 2));
  if (bar.attempt !== null) bar.dom.dataset.attempt = String(bar.attempt);
  bar.dom.dataset.outcome = outcome;
  const about = replayed
    ? `${op.label} · not sent: ${op.replayed.byPerson ? 'the result a person gave' : 'its result'} was recorded in ${op.replayed.madeBy}`
    : [
      op.label,
      bar.attempt !== null ? `attempt ${bar.attempt}` : '',
      `${duration(Math.max((running ? until : bar.end) - bar.start, 0))}`,
      outcome,
    ].filter(Boolean).join(' · ');
  if (bar.dom.firstChild.textContent !== about) bar.dom.firstChild.textContent = about;
}

function drawTick(row, tick, x) {
  if (!tick.dom) {
    tick.dom = svgEl('g', {
      class: `tl-tick verdict-${tick.verdict}`,
      'data-verdict': tick.verdict,
      'data-decided-by': tick.decidedBy,
    },
    svgEl('line', { class: 'tl-tick-line', x1: 0, x2: 0, y1: -ROW / 2, y2: ROW / 2 }),
    svgEl('path', { class: `tl-mark tl-mark-${tick.decidedBy}`, d: MARKS[tick.decidedBy] || MARKS.evaluator }),
    svgEl('title', { text: tick.text }));
    row.ticks.append(tick.dom);
  }
  tick.dom.setAttribute('transform', `translate(${x(tick.at)},${ROW / 2})`);
}

function drawAxis(axis, grid, t0, span, plot, x, height) {
  const step = axisStep(span, Math.floor(plot / 90));
  const parts = [];
  const lines = [];
  for (let t = 0; t <= span + 1e-6; t += step) {
    const at = x(t0 + t);
    parts.push(
      svgEl('line', { class: 'tl-axis-tick', x1: at, x2: at, y1: AXIS_HEIGHT - 6, y2: AXIS_HEIGHT }),
      svgEl('text', { class: 'tl-axis-label', x: at, y: AXIS_HEIGHT - 9, text: `+${duration(t)}` }),
    );
    lines.push(svgEl('line', { class: 'tl-grid-line', x1: at, x2: at, y1: 0, y2: height }));
  }
  axis.replaceChildren(...parts);
  grid.replaceChildren(...lines);
}

function drawLegend() {
  const box = $('timeline-legend');
  if (box.childElementCount) return;
  const item = (swatch, text) => {
    const span = document.createElement('span');
    span.className = 'tl-legend-item';
    span.append(swatch, text);
    return span;
  };
  const icon = (...children) => svgEl('svg', { width: 16, height: 14, viewBox: '-8 -7 16 14', 'aria-hidden': 'true' }, ...children);
  const items = [
    item(icon(svgEl('rect', { class: 'tl-bar outcome-ok', x: -7, y: -4, width: 14, height: 8 })), 'operation'),
    item(icon(svgEl('rect', { class: 'tl-bar outcome-running', x: -7, y: -4, width: 14, height: 8 })), 'running'),
    item(icon(svgEl('rect', { class: 'tl-bar outcome-intervened', x: -7, y: -4, width: 14, height: 8 })), 'killed, restarted after its backoff'),
    item(icon(svgEl('rect', { class: 'tl-pause', x: -7, y: -7, width: 14, height: 14 })), 'paused for a person'),
    item(icon(svgEl('rect', { class: 'tl-bar outcome-replayed', x: -4, y: -4, width: 8, height: 8 })), 'replayed from the parent, not sent'),
    ...VERDICTS.map((verdict) => item(
      icon(svgEl('g', { class: `tl-tick verdict-${verdict}` }, svgEl('line', { class: 'tl-tick-line', x1: 0, x2: 0, y1: -7, y2: 7 }))),
      verdict,
    )),
    ...DECIDERS.map(([name, text]) => item(
      icon(svgEl('path', { class: `tl-mark tl-mark-${name} tl-legend-mark`, d: MARKS[name] })),
      `by ${text}`,
    )),
  ];
  box.replaceChildren(...items);
}
