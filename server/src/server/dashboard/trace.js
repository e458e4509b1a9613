// The decision trace: the watchdog's verdicts, the supervision rows
// (budgets, restarts, pauses) and the event log, timed from the run's start.

import { $, el, setText } from './dom.js';
import { clock, describe, duration, phiText } from './text.js';

const LOG_LIMIT = 500;

function relTime(st, at) {
  if (!at) return '';
  if (!st.startAt) return clock(at);
  const s = (at - st.startAt) / 1000;
  return `+${s.toFixed(2)} s`;
}

/** A path as code that may wrap after each `/`. */
function pathCode(path) {
  const parts = String(path).split('/');
  return el('code', { class: 'path' }, parts.flatMap((part, i) => (i ? ['/', el('wbr'), part] : [part])));
}

function timeCell(st, at) {
  return el('td', { class: 'time', title: at ? new Date(at).toISOString() : '' }, relTime(st, at));
}

export function addVerdictRow(st, event) {
  const evidence = event.evidence || {};
  const reason = [event.reason];
  if (event.nudge) reason.push(el('div', { class: 'muted' }, `nudge: ${event.nudge}`));
  if (event.evaluator) {
    reason.push(el('div', { class: 'muted' }, `evaluator: ${duration(event.evaluator.latency_ms)}`));
  }
  const row = el('tr', {
    class: 'verdict-row',
    'data-verdict': event.verdict,
    'data-path': event.path,
    'data-decided-by': event.decided_by,
  },
  timeCell(st, event.at),
  el('td', null, pathCode(event.path)),
  el('td', null, event.subject),
  el('td', null, el('span', { class: `verdict verdict-${event.verdict}` }, event.verdict)),
  el('td', null, event.decided_by),
  el('td', { class: 'num' }, String(event.renewals)),
  el('td', { class: 'num' }, String(evidence.count ?? '')),
  el('td', { class: 'num' }, phiText(evidence.phi)),
  el('td', { class: 'why' }, reason));
  $('verdicts-body').append(row);
  $('verdicts-empty').hidden = true;
  $('verdicts').hidden = false;
}

export function addTraceRow(st, event, what, detail) {
  const row = el('tr', { class: 'trace-row', 'data-kind': event.kind, 'data-path': event.path },
    timeCell(st, event.at),
    el('td', null, pathCode(event.path)),
    el('td', null, el('span', { class: `what what-${event.kind}` }, what)),
    el('td', { class: 'why' }, detail));
  $('supervision-body').append(row);
  $('supervision-empty').hidden = true;
  $('supervision').hidden = false;
}

export function logEvent(st, event) {
  st.eventCount += 1;
  setText($('event-count'), String(st.eventCount));
  const log = $('event-log');
  log.append(el('li', { 'data-kind': event.kind, 'data-seq': event.seq },
    el('span', { class: 'time' }, relTime(st, event.at)), ' ',
    el('code', null, event.path), ' ',
    el('span', { class: 'log-kind' }, event.kind), ' ',
    describe(event)));
  while (log.childElementCount > LOG_LIMIT) log.firstElementChild.remove();
}
