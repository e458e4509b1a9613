// A lease handled by hand. The timeline's row of an operation whose lease
// is in flight (its start event named the lease, its end has not come)
// offers "extend · stop", which opens this panel: it extends the lease by
// a duration (`POST /runs/{id}/leases/{lease}/extend`, a `RENEW` decided by
// the person) or stops the operation as an `INTERVENE` stops it
// (`…/intervene`). The server's answer or refusal is shown in the panel,
// as text; whether the lease may be extended (not while the run is paused,
// not past its ceiling) is the server's to say.

import { BY, sendControl } from './controls.js';
import { $, enc, setText } from './dom.js';
import { session } from './state.js';

/** The lease the panel shows, or null. */
let shown = null;

function say(text, refused = true) {
  const box = $('lease-message');
  setText(box, text || '');
  box.dataset.outcome = refused ? 'refused' : 'done';
  box.hidden = !text;
}

const leaseName = (id) => `lease:${id}`;

/**
 * Opens the panel on the lease `id` of the operation at `path`, named
 * `label` (`tool search_logs`), in flight.
 */
export function openLeasePanel(id, path, label) {
  if (!session.current) return;
  shown = { id, path };
  const panel = $('lease-panel');
  panel.hidden = false;
  panel.dataset.lease = String(id);
  panel.dataset.path = path;
  setText($('lease-id'), leaseName(id));
  setText($('lease-of'), `${label} (${path})`);
  setText($('lease-state'), 'In flight: its operation has started and not ended.');
  say('');
  panel.scrollIntoView({ block: 'nearest' });
  $('lease-duration').focus();
}

/** Says in the panel that the lease `id` is no longer in flight, if shown. */
export function leaseEnded(id) {
  if (!shown || shown.id !== id) return;
  setText($('lease-state'), 'Ended: its operation is no longer in flight.');
}

/** Closes the panel, for a run being opened. */
export function resetLease() {
  shown = null;
  $('lease-panel').hidden = true;
  $('lease-duration').value = '30s';
  $('lease-reason').value = '';
  say('');
}

function act(button, verb, body, done) {
  if (!shown) return;
  const { id } = shown;
  sendControl(button, `leases/${enc(String(id))}/${verb}`, body, {
    say,
    done: (_st, result) => {
      if (result.forwarded_to) {
        say(`Sent to the executor that runs it (${result.forwarded_to}): the run\u2019s events say whether it applied.`, false);
      } else {
        say(done(id), false);
      }
    },
  });
}

function extend(event) {
  event.preventDefault();
  const duration = $('lease-duration').value.trim();
  act($('lease-extend'), 'extend', { duration, by: BY },
    (id) => `Extended: ${leaseName(id)} now ends ${duration} later, a RENEW decided by you.`);
}

function intervene(event) {
  event.preventDefault();
  const body = { by: BY };
  const reason = $('lease-reason').value.trim();
  if (reason) body.reason = reason;
  act($('lease-intervene'), 'intervene', body,
    (id) => `Stopped: the operation of ${leaseName(id)} was stopped as an INTERVENE stops it; its loop decides what follows.`);
}

/** Wires the lease panel. */
export function wireLease() {
  $('lease-extend-form').addEventListener('submit', extend);
  $('lease-intervene-form').addEventListener('submit', intervene);
  $('lease-close').addEventListener('click', () => {
    shown = null;
    $('lease-panel').hidden = true;
    say('');
  });
}
