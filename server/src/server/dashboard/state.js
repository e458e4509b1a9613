// The dashboard's state: which run is shown (if any), and what is known
// of it. Every section reads `session.current`; only the router changes it.

/** How often the list and a run's view are polled. */
export const POLL_MS = 2000;

export const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
export const PAUSED = new Set(['waiting_human', 'reconciliation_required']);

/**
 * The run being shown (`current`), or null; the fork shown beside its
 * parent (`compare`, `compare.js`), or null. Both null: the list.
 */
export const session = { current: null, compare: null };

/** Whether the list of runs is the page shown. */
export const listShown = () => !session.current && !session.compare;

export function newRunState(id) {
  return {
    id,
    es: null,
    retryTimer: null,
    pollTimer: null,
    lastSeq: 0,
    ended: false,
    status: '',
    // Bumped whenever the stream or a control changes the status, so a
    // poll answered with an older state does not undo it.
    statusEpoch: 0,
    view: null,
    pauseEvent: null,
    answer: null,
    reason: null,
    startAt: 0,
    nodes: new Map(),
    eventCount: 0,
    runStarted: null,
    lastEscalation: null,
    reconcileKey: null,
    // The endpoint a pause on one waits for, once known (`run.js`).
    waitedOn: null,
    // The timeline's model and elements (`timeline.js`), made by its first event.
    timeline: null,
    // For a fork: its `run_forked` event, and the calls it inherited from
    // its parent (`tool_call_replayed` events), never sent again.
    forkEvent: null,
    replayed: [],
    // What the lineage panel last drew (`fork.js`), to draw it on change only.
    lineageDrawn: '',
  };
}
