// One run's page: its facts, its answer or reason, its lineage if it is a
// fork, the controls a running run offers (`controls.js`), and the pause
// panel a person answers (or, for a run waiting on an endpoint that is
// down, reads: it resumes by itself); its view polled from the server
// until it is final.

import { api } from './api.js';
import { $, el, enc, setError, setText } from './dom.js';
import { renderLineage } from './fork.js';
import { renderUsage } from './usage.js';
import { PAUSED, POLL_MS, TERMINAL, session } from './state.js';
import { ENDPOINT_SUBJECT, clock, duration, phiText } from './text.js';

export function stopRun() {
  if (!session.current) return;
  const st = session.current;
  session.current = null;
  if (st.es) st.es.close();
  st.es = null;
  clearTimeout(st.retryTimer);
  clearTimeout(st.pollTimer);
  setError('run', null);
  setError('stream', null);
  setError('control', null);
}

export async function pollRun(st) {
  clearTimeout(st.pollTimer);
  const epoch = st.statusEpoch;
  try {
    const view = await api('GET', `/runs/${enc(st.id)}`);
    if (st !== session.current) return;
    applyView(st, view, epoch);
    setError('run', null);
    if (waitsOnEndpoint(view)) await findEndpoint(st, view);
  } catch (error) {
    if (st !== session.current) return;
    // A 404 says why: no such run, or one deleted past its retention.
    setError('run', error.status === 404 ? error.message : `run: ${error.message}`);
  }
  if (st !== session.current) return;
  const final = st.view && TERMINAL.has(st.view.status);
  if (!final) st.pollTimer = setTimeout(() => pollRun(st), POLL_MS);
}

/** Whether the run of `view` is paused until an endpoint answers again. */
const waitsOnEndpoint = (view) => view.status === 'waiting_human'
  && Boolean(view.pause) && view.pause.subject === ENDPOINT_SUBJECT;

/**
 * Which endpoint the run waits on, as this executor's `GET /endpoints`
 * lists it (its runs waiting), else the one its pause's reason names;
 * asked at each poll until known. A run paused by another executor, or a
 * server that cannot say, leaves it unnamed.
 */
async function findEndpoint(st, view) {
  const reason = view.pause.reason || '';
  if (st.waitedOn && reason.includes(st.waitedOn)) return;
  let endpoints = [];
  try {
    endpoints = ((await api('GET', '/endpoints')) || {}).endpoints || [];
  } catch (_) {
    return;
  }
  if (st !== session.current) return;
  const nameOf = (e) => String(e.endpoint);
  const found = endpoints.find((e) => (e.runs_waiting || []).map(String).includes(st.id))
    || endpoints.filter((e) => reason.includes(nameOf(e)))
      .sort((a, b) => nameOf(b).length - nameOf(a).length)[0];
  st.waitedOn = found ? nameOf(found) : null;
  renderRun(st);
}

function applyView(st, view, epoch) {
  st.view = view;
  if (view.answer) st.answer = view.answer;
  if (view.reason) st.reason = view.reason;
  if (!st.startAt && view.created_at_ms) st.startAt = view.created_at_ms;
  if (epoch === st.statusEpoch) setStatus(st, view.status, 'poll');
  renderRun(st);
}

/** Sets the run's status; a terminal status is never undone. */
export function setStatus(st, status, source) {
  if (!status) return;
  if (TERMINAL.has(st.status) && !TERMINAL.has(status)) return;
  if (status !== st.status && source !== 'poll') st.statusEpoch += 1;
  st.status = status;
  if (!PAUSED.has(status)) st.pauseEvent = null;
  renderRun(st);
}

export function renderRun(st) {
  if (st !== session.current) return;
  const view = st.view || {};
  const status = $('run-status');
  setText(status, st.status || '…');
  status.dataset.status = st.status;
  status.className = `status status-${st.status || 'unknown'}`;
  setText($('run-flow'), view.flow_name || (st.runStarted && st.runStarted.flow) || '');
  setText($('run-task'), view.task || (st.runStarted && st.runStarted.task) || '');
  setText($('run-owner'), view.owner_id ? `${view.owner_id} (fence ${view.fence})` : '—');
  setText($('run-updated'), clock(view.updated_at_ms));

  const answer = st.status === 'completed' ? st.answer : null;
  $('run-answer').hidden = !answer;
  setText($('run-answer-text'), answer || '');
  const reason = ['failed', 'cancelled', 'orphaned'].includes(st.status) ? st.reason : null;
  $('run-reason').hidden = !reason;
  setText($('run-reason-text'), reason || '');
  $('run-controls').hidden = st.status !== 'running';
  // A run paused for a person takes a message too; one that waits for a
  // decision on a call takes that decision first.
  $('message-panel').hidden = st.status !== 'running' && st.status !== 'waiting_human';
  renderLineage(st);
  renderUsage(view);
  renderPause(st);
}

function renderPause(st) {
  const panel = $('pause-panel');
  const paused = PAUSED.has(st.status);
  panel.hidden = !paused;
  if (!paused) return;
  const reconciling = st.status === 'reconciliation_required';
  const fromView = (st.view && PAUSED.has(st.view.status) && st.view.pause) || {};
  const fromEvent = st.pauseEvent || {};
  const pause = { ...fromEvent, ...fromView };
  const evidence = fromEvent.evidence || null;
  const call = fromView.call || fromEvent.call || null;

  // A run waiting on an endpoint needs no one: it resumes by itself.
  const onEndpoint = !reconciling && pause.subject === ENDPOINT_SUBJECT;
  panel.dataset.waiting = onEndpoint ? 'endpoint' : 'person';
  let title = 'Waiting for a person';
  if (reconciling) title = 'A tool call\u2019s outcome is unknown: a person must decide';
  else if (onEndpoint) title = `Waiting for ${st.waitedOn || 'its endpoint'} to answer again \u2014 it resumes by itself`;
  setText($('pause-title'), title);
  $('pause-endpoint').hidden = !onEndpoint;
  setText($('pause-reason'), pause.reason || '');
  setText($('pause-subject'), pause.subject || '');
  setText($('pause-path'), pause.path || '');

  const list = $('pause-evidence-list');
  $('pause-evidence').hidden = !evidence;
  if (evidence) {
    list.replaceChildren(
      el('dt', null, 'items'), el('dd', null, String(evidence.count)),
      el('dt', null, 'last item'), el('dd', null,
        evidence.last_progress_age_ms === null || evidence.last_progress_age_ms === undefined
          ? 'never' : `${duration(evidence.last_progress_age_ms)} ago`),
      el('dt', null, 'phi'), el('dd', null, phiText(evidence.phi)),
      evidence.last_note ? [el('dt', null, 'last note'), el('dd', null, evidence.last_note)] : [],
    );
  }
  $('pause-call').hidden = !call;
  setText($('pause-call-text'), call ? JSON.stringify(call, null, 2) : '');
  st.reconcileKey = call ? call.key || call.idempotency_key : null;

  $('resume-button').hidden = reconciling;
  setText($('resume-button'), onEndpoint ? 'Resume now (its call is tried once more)' : 'Resume with guidance');
  $('reconcile-controls').hidden = !reconciling;
  setText($('guidance-label'), reconciling
    ? 'If it took effect: its result, which the model will see'
    : 'Guidance for the run (the next model call sees it)');
}

export function pauseMessage(text) {
  setText($('pause-message'), text || '');
  $('pause-message').hidden = !text;
}
