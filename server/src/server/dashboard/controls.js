// A person's controls: resume with guidance, cancel, and the decision on a
// tool call whose outcome is unknown. A refusal is shown where it was asked.

import { api } from './api.js';
import { $, enc, setError } from './dom.js';
import { pauseMessage, pollRun, setStatus } from './run.js';
import { session } from './state.js';

async function control(button, path, body, onDone) {
  const st = session.current;
  if (!st) return;
  button.disabled = true;
  pauseMessage('');
  try {
    const result = await api('POST', `/runs/${enc(st.id)}/${path}`, body);
    if (st !== session.current) return;
    onDone(st, result || {});
  } catch (error) {
    if (st !== session.current) return;
    const text = error.status === 409 ? `Not done: ${error.message}` : error.message;
    pauseMessage(text);
    setError('control', null);
    if ($('pause-panel').hidden) setError('control', text);
    pollRun(st);
  } finally {
    button.disabled = false;
  }
}

function resume() {
  control($('resume-button'), 'resume', { guidance: $('guidance').value }, (st, result) => {
    $('guidance').value = '';
    st.pauseEvent = null;
    setStatus(st, result.status || 'running', 'control');
  });
}

function cancel(button) {
  const st = session.current;
  if (!st || !window.confirm(`Cancel run ${st.id}?`)) return;
  control(button, 'cancel', { reason: 'cancelled from the dashboard' }, (st2, result) => {
    setStatus(st2, result.status || 'cancelled', 'control');
  });
}

function reconcile(button) {
  const st = session.current;
  if (!st || !st.reconcileKey) {
    pauseMessage('The call to decide on is not known yet.');
    return;
  }
  const decision = button.dataset.decision;
  const body = { key: st.reconcileKey, decision };
  if (decision === 'mark_done') body.result = $('guidance').value;
  control(button, 'reconcile', body, (st2, result) => {
    $('guidance').value = '';
    setStatus(st2, result.status || 'running', 'control');
  });
}

/** Wires the buttons of the run's page to their controls. */
export function wireControls() {
  $('resume-button').addEventListener('click', resume);
  $('cancel-button').addEventListener('click', (event) => cancel(event.currentTarget));
  $('cancel-run-button').addEventListener('click', (event) => cancel(event.currentTarget));
  for (const button of document.querySelectorAll('.reconcile-button')) {
    button.addEventListener('click', () => reconcile(button));
  }
}
