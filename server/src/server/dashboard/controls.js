// A person's controls: pause a running run, send it a message, resume it
// with guidance, cancel it, and decide on a tool call whose outcome is
// unknown. Each posts to the run's route (`api.js` adds the token) and
// shows the server's answer or refusal where it was asked, as text; the
// rules are the server's, none is checked here.

import { api } from './api.js';
import { $, enc, setError, setText } from './dom.js';
import { pauseMessage, pollRun, setStatus } from './run.js';
import { session } from './state.js';

/** Who asked, as the run's trace will say it, for a control sent from here. */
export const BY = 'a person on the dashboard';

/** How a message of each policy was delivered, once taken. */
const DELIVERED = {
  enqueue: 'Message taken: the root loop\u2019s next model call sees it.',
  interrupt: 'Message taken: the root loop\u2019s call in flight is stopped, and its next model call sees it.',
  reject: 'Message taken: the run was not busy, and its next model call sees it.',
};

/** A refusal as it is shown: a 409 says the control was not done. */
function refusalText(error) {
  return error.status === 409 ? `Not done: ${error.message}` : error.message;
}

/** What an answer says when another executor runs the run (202). */
function forwardedText(result) {
  return `Sent to the executor that runs it (${result.forwarded_to}): the run\u2019s events say whether it applied.`;
}

/**
 * Posts `body` to the route `path` of the run shown, `button` disabled
 * meanwhile. The answer goes to `done(st, result)`; a refusal to
 * `say(text)`, and the run's view is read again; `say('')` first clears
 * what was said before. Nothing is done for a run no longer shown.
 */
export async function sendControl(button, path, body, { done, say }) {
  const st = session.current;
  if (!st) return;
  button.disabled = true;
  say('');
  try {
    const result = await api('POST', `/runs/${enc(st.id)}/${path}`, body);
    if (st !== session.current) return;
    done(st, result || {});
  } catch (error) {
    if (st !== session.current) return;
    say(refusalText(error));
    pollRun(st);
  } finally {
    button.disabled = false;
  }
}

/** Says `text` in the pause panel, or in the error bar when it is hidden. */
function sayInPause(text) {
  pauseMessage(text);
  setError('control', null);
  if (text && $('pause-panel').hidden) setError('control', text);
}

/** Says `text` under the run's controls: an answer, or (`refused`) a refusal. */
function sayInHands(text, refused = true) {
  const box = $('hands-answer');
  setText($('hands-answer-text'), text || '');
  box.dataset.outcome = refused ? 'refused' : 'done';
  box.hidden = !text;
  $('rollback-fork').hidden = true;
}

/** Empties what the run's controls said, for a run being opened. */
export function resetHands() {
  sayInHands('');
  $('pause-why').value = '';
  $('message-text').value = '';
  $('message-policy').value = 'enqueue';
  const finish = document.querySelector('#pause-form input[name="in_flight"][value="finish"]');
  if (finish) finish.checked = true;
}

/**
 * A control of the pause panel (or "Cancel run"): its refusal is said
 * there; once done, what the run's controls last said no longer holds.
 */
function control(button, path, body, done) {
  sendControl(button, path, body, {
    say: sayInPause,
    done: (st, result) => {
      sayInHands('');
      done(st, result);
    },
  });
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

function pause(event) {
  event.preventDefault();
  const checked = document.querySelector('#pause-form input[name="in_flight"]:checked');
  const inFlight = checked ? checked.value : 'finish';
  const body = { in_flight: inFlight, by: BY };
  const reason = $('pause-why').value.trim();
  if (reason) body.reason = reason;
  sendControl($('pause-button'), 'pause', body, {
    say: sayInHands,
    done: (st, result) => {
      $('pause-why').value = '';
      if (result.forwarded_to) {
        sayInHands(forwardedText(result), false);
        pollRun(st);
        return;
      }
      sayInHands(inFlight === 'cancel'
        ? 'Paused: its calls in flight were stopped; it waits for a person.'
        : 'Paused: its calls in flight finish; it waits for a person.', false);
      setStatus(st, result.status || 'waiting_human', 'control');
    },
  });
}

/** Shows the fork a rollback made, with a link to its page. */
function sayRolledBack(result) {
  const back = result.rolled_back || {};
  sayInHands(`Rolled back: this run was forked from before its step ${back.step} with the message as the fork\u2019s guidance, and cancelled.`, false);
  $('rollback-link').setAttribute('href', `#/runs/${enc(result.run_id)}`);
  setText($('rollback-id'), result.run_id);
  $('rollback-fork').hidden = false;
}

function message(event) {
  event.preventDefault();
  const policy = $('message-policy').value;
  const body = { text: $('message-text').value, policy, by: BY };
  sendControl($('message-button'), 'messages', body, {
    say: sayInHands,
    done: (st, result) => {
      $('message-text').value = '';
      if (result.rolled_back) sayRolledBack(result);
      else sayInHands(result.forwarded_to ? forwardedText(result) : DELIVERED[policy] || 'Message taken.', false);
      pollRun(st);
    },
  });
}

/** Wires the buttons and forms of the run's page to their controls. */
export function wireControls() {
  $('resume-button').addEventListener('click', resume);
  $('cancel-button').addEventListener('click', (event) => cancel(event.currentTarget));
  $('cancel-run-button').addEventListener('click', (event) => cancel(event.currentTarget));
  for (const button of document.querySelectorAll('.reconcile-button')) {
    button.addEventListener('click', () => reconcile(button));
  }
  $('pause-form').addEventListener('submit', pause);
  $('message-form').addEventListener('submit', message);
}
