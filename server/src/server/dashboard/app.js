// The leasehold dashboard: the list of runs, and for one run its live tree,
// the watchdog's wait banners, the verdict trace and a person's controls;
// for a fork, its lineage and the fork beside its parent.
//
// Plain JavaScript modules, no framework, no build step: this entry routes
// between the list, a run and a fork compared with its parent; each
// section is a module of its own (`api.js` the server, `runs.js` the list,
// `endpoints.js` the endpoints the runs call, marked down or up by hand,
// `run.js` one run's page, `controls.js` a person's controls, `lease.js` a
// lease extended or stopped by hand, `events.js` the events applied,
// `tree.js` the supervision tree, `timeline.js` the run's timeline,
// `trace.js` the decision trace, `fork.js` a fork's lineage and the fork
// form, `compare.js` a fork beside its parent, `text.js` the event texts,
// `dom.js` the page's helpers, `state.js` what is shown).
// Every string that comes from the server is put into the page as text
// (textContent, text nodes, attributes), never as HTML.

import { openStream } from './api.js';
import { showCompare, stopCompare } from './compare.js';
import { resetHands, wireControls } from './controls.js';
import { $, setError, setStreamState, setText } from './dom.js';
import { applyEvent } from './events.js';
import { resetFork, wireFork } from './fork.js';
import { resetLease, wireLease } from './lease.js';
import { pollRun, renderRun, setStatus, stopRun } from './run.js';
import { pollList, stopList, wireList } from './runs.js';
import { newRunState, session } from './state.js';
import { resetTimeline } from './timeline.js';
import { clearAllBanners } from './tree.js';

const decoded = (id) => {
  try { return decodeURIComponent(id); } catch (_) { return id; }
};

function route() {
  const hash = window.location.hash;
  // A run's id is encoded in the address, so `/compare` is no part of it.
  const compare = hash.match(/^#\/runs\/([^/]+)\/compare$/);
  const match = hash.match(/^#\/runs\/(.+)$/);
  if (compare) showComparison(decoded(compare[1]));
  else if (match) showRun(decoded(match[1]));
  else showList();
}

function showList() {
  stopRun();
  stopCompare();
  $('compare-view').hidden = true;
  $('run-view').hidden = true;
  $('runs-view').hidden = false;
  document.title = 'leasehold: runs';
  setStreamState('idle', '');
  pollList();
}

function showComparison(id) {
  stopRun();
  stopList();
  stopCompare();
  setError('list', null);
  $('runs-view').hidden = true;
  $('run-view').hidden = true;
  $('compare-view').hidden = false;
  document.title = `leasehold: ${id} beside its parent`;
  setStreamState('idle', '');
  showCompare(id);
}

function showRun(id) {
  stopRun();
  stopList();
  stopCompare();
  setError('list', null);
  const st = newRunState(id);
  session.current = st;
  $('runs-view').hidden = true;
  $('compare-view').hidden = true;
  $('run-view').hidden = false;
  document.title = `leasehold: ${id}`;
  setText($('run-id'), id);
  for (const node of ['tree', 'verdicts-body', 'supervision-body', 'event-log']) $(node).replaceChildren();
  $('verdicts-empty').hidden = false;
  $('supervision-empty').hidden = false;
  $('verdicts').hidden = true;
  $('supervision').hidden = true;
  setText($('event-count'), '0');
  resetTimeline();
  resetFork();
  resetLease();
  resetHands();
  setText($('pause-message'), '');
  $('pause-message').hidden = true;
  $('guidance').value = '';
  renderRun(st);
  openStream(st, {
    event: (event) => applyEvent(st, event),
    end: (status) => {
      if (status) setStatus(st, status, 'stream');
      clearAllBanners(st);
      pollRun(st);
    },
  });
  pollRun(st);
}

wireControls();
wireFork();
wireLease();
wireList();
window.addEventListener('hashchange', route);
route();
