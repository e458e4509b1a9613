// Forks: a fork's lineage, and the form that makes one.
//
// A fork's page says where it comes from — its parent (a link to its
// page), the loop and step, the guidance, the changes made to its flow and
// what people had answered the parent — and lists the calls it inherited:
// replayed from the parent's record, never sent again. Each step of the
// timeline offers "Fork from here", which opens the form: it posts
// `POST /runs/{id}/fork` and, once the fork is made, opens its page; a
// refusal is shown as the server worded it, as text.

import { api } from './api.js';
import { $, el, enc, setText } from './dom.js';
import { session } from './state.js';

/** Step `step` of the loop at `path` as the API names a fork point. */
export function forkPoint(path, step) {
  return path === 'run' ? String(step) : `${path}:${step}`;
}

/** The lineage of the run `st`: from its record, else its first event. */
function origin(st) {
  if (st.view && st.view.fork) return st.view.fork;
  const e = st.forkEvent;
  if (!e) return null;
  return {
    parent: e.parent,
    path: e.loop_path,
    step: e.step,
    guidance: e.guidance,
    changes: e.changes,
    person_answers: e.person_answers,
  };
}

const list = (items, className) => el('ul', { class: className }, items.map((item) => el('li', null, item)));

/** Draws the lineage panel of the run `st` if what it shows changed. */
export function renderLineage(st) {
  if (st !== session.current) return;
  const fork = origin(st);
  const drawn = JSON.stringify([fork, st.replayed.length]);
  if (drawn === st.lineageDrawn) return;
  st.lineageDrawn = drawn;
  const box = $('lineage');
  box.hidden = !fork;
  if (!fork) {
    box.replaceChildren();
    return;
  }
  const changes = Array.isArray(fork.changes) ? fork.changes : [];
  const answers = Array.isArray(fork.person_answers) ? fork.person_answers : [];
  const replayed = st.replayed.map((e) => el('li', { class: 'replayed-call', 'data-key': e.idempotency_key },
    el('strong', null, e.tool), ' ',
    el('span', { class: 'state state-replayed' }, 'replayed, not sent'), ' ',
    `its ${e.by_person ? 'result, given by a person,' : 'result'} was recorded in `,
    el('a', { href: `#/runs/${enc(e.made_by)}` }, e.made_by),
    el('span', { class: 'muted' }, ` · key ${e.idempotency_key}`)));
  box.replaceChildren(
    el('h2', null, 'A fork'),
    el('p', { class: 'lineage-from' },
      'Forked from ',
      el('a', { id: 'lineage-parent', href: `#/runs/${enc(fork.parent)}` }, el('code', null, fork.parent)),
      ' at ',
      el('code', { id: 'lineage-loop' }, fork.path),
      ' step ',
      el('span', { id: 'lineage-step' }, String(fork.step)),
      ': the state before that step began.'),
    el('dl', { class: 'facts' },
      el('dt', null, 'guidance'),
      el('dd', { id: 'lineage-guidance', class: fork.guidance ? 'lineage-text' : 'muted' }, fork.guidance || 'none'),
      el('dt', null, 'changes'),
      el('dd', { id: 'lineage-changes' },
        changes.length ? list(changes.map((c) => el('code', null, c)), 'plain') : el('span', { class: 'muted' }, 'none')),
      answers.length ? [
        el('dt', null, 'people had answered'),
        el('dd', { id: 'lineage-answers' }, list(answers, 'plain lineage-text')),
      ] : null,
      el('dt', null, 'inherited calls'),
      el('dd', { id: 'lineage-replayed' },
        replayed.length ? el('ul', { class: 'plain' }, replayed) : el('span', { class: 'muted' }, 'none'))),
    el('p', { class: 'controls' },
      el('a', { id: 'compare-link', class: 'button', href: `#/runs/${enc(st.id)}/compare` }, 'Compare with parent')),
  );
}

function forkMessage(text) {
  setText($('fork-message'), text || '');
  $('fork-message').hidden = !text;
}

/** Opens the fork form at step `step` of the loop at `path`. */
export function openForkForm(path, step) {
  if (!session.current) return;
  $('fork-panel').hidden = false;
  setText($('fork-from'), `${path} step ${step}`);
  $('fork-at').value = forkPoint(path, step);
  forkMessage('');
  $('fork-panel').scrollIntoView({ block: 'nearest' });
  $('fork-guidance').focus();
}

/** Closes the fork form and empties the lineage, for a run being opened. */
export function resetFork() {
  $('fork-panel').hidden = true;
  for (const field of ['fork-at', 'fork-guidance', 'fork-set']) $(field).value = '';
  forkMessage('');
  $('lineage').hidden = true;
  $('lineage').replaceChildren();
}

async function submitFork(event) {
  event.preventDefault();
  const st = session.current;
  if (!st) return;
  const body = { at: $('fork-at').value.trim() };
  const guidance = $('fork-guidance').value;
  if (guidance.trim()) body.guidance = guidance;
  const set = $('fork-set').value.split('\n').map((line) => line.trim()).filter(Boolean);
  if (set.length) body.set = set;
  const button = $('fork-button');
  button.disabled = true;
  forkMessage('');
  try {
    const created = await api('POST', `/runs/${enc(st.id)}/fork`, body);
    if (st !== session.current) return;
    window.location.hash = `#/runs/${enc(created.run_id)}`;
  } catch (error) {
    if (st !== session.current) return;
    forkMessage(`Not forked: ${error.message}`);
  } finally {
    button.disabled = false;
  }
}

/** Wires the fork form. */
export function wireFork() {
  $('fork-form').addEventListener('submit', submitFork);
  $('fork-close').addEventListener('click', () => {
    $('fork-panel').hidden = true;
    forkMessage('');
  });
}
