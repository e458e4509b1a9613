// The server: its JSON API (with the token, if the page was given one) and
// a run's live event stream, which reconnects after the last event seen.
// `followEvents` reads another run's events the same way, for a page that
// shows more than the current run (a fork beside its parent).

import { enc, setError, setStreamState } from './dom.js';
import { session } from './state.js';

const TOKEN_KEY = 'leasehold.token';
const RECONNECT_MS = 3000;

// Taken once from the page's own URL, kept for the session, and removed
// from the address bar so it is not left in the history or a screenshot.
const token = (() => {
  const url = new URL(window.location.href);
  const given = url.searchParams.get('token');
  if (given !== null) {
    try { sessionStorage.setItem(TOKEN_KEY, given); } catch (_) { /* storage off */ }
    url.searchParams.delete('token');
    history.replaceState(null, '', url.pathname + url.search + url.hash);
    return given;
  }
  try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (_) { return ''; }
})();

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: 'no-store',
    });
  } catch (error) {
    throw new ApiError(0, 'unreachable', `the server cannot be reached (${error.message})`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch (_) { data = null; }
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    let message = error.message || `${response.status} ${response.statusText}`;
    if (response.status === 401) {
      message += token ? ' (the token was refused)' : ' (open the dashboard with ?token=YOUR_TOKEN)';
    }
    throw new ApiError(response.status, error.code || `http_${response.status}`, message);
  }
  return data;
}

/**
 * Opens the event stream of the run `st`, after its last seq. Each new
 * event goes to `on.event(event)`; the stream's end, with the run's final
 * status if it said one, to `on.end(status)`.
 */
export function openStream(st, on) {
  if (st.es) st.es.close();
  const query = new URLSearchParams();
  if (token) query.set('token', token);
  if (st.lastSeq) query.set('after', String(st.lastSeq));
  const qs = query.toString();
  const es = new EventSource(`/runs/${enc(st.id)}/events${qs ? `?${qs}` : ''}`);
  st.es = es;
  setStreamState('connecting', 'connecting…');
  es.onopen = () => {
    if (st.es !== es) return;
    setStreamState('live');
    setError('stream', null);
  };
  es.onmessage = (message) => {
    if (st.es !== es) return;
    let event;
    try { event = JSON.parse(message.data); } catch (_) { return; }
    if (!event || typeof event.seq !== 'number' || event.seq <= st.lastSeq) return;
    st.lastSeq = event.seq;
    try {
      on.event(event);
    } catch (error) {
      setError('stream', `event ${event.seq} could not be shown: ${error.message}`);
    }
  };
  es.addEventListener('end', (message) => {
    if (st.es !== es) return;
    es.close();
    st.es = null;
    st.ended = true;
    let status = null;
    try { status = JSON.parse(message.data).status; } catch (_) { status = null; }
    setStreamState('ended');
    on.end(status);
  });
  es.addEventListener('shutdown', () => {
    // The server is stopping; the browser reconnects with the last seq
    // once it is back.
    if (st.es !== es) return;
    setStreamState('reconnecting', 'server shutting down; reconnecting…');
  });
  es.onerror = () => {
    if (st.es !== es) return;
    if (es.readyState === EventSource.CLOSED) {
      // Refused (401, 404, …) or cut: try again later, after the last seq.
      st.es = null;
      setStreamState('reconnecting', 'reconnecting…');
      setError('stream', 'the event stream was closed; reconnecting');
      clearTimeout(st.retryTimer);
      st.retryTimer = setTimeout(() => {
        if (st === session.current && !st.ended) openStream(st, on);
      }, RECONNECT_MS);
    } else {
      setStreamState('reconnecting', 'reconnecting…');
    }
  };
}

/**
 * Reads the events of the run `id` from its stream: its stored log, then
 * live until it ends. Each event goes to `on.event(event)`, in order and
 * once; the end, with the run's final status if the server said one, to
 * `on.end(status)`; a cut stream (or an event that could not be shown) to
 * `on.error(message)`; a cut stream reconnects after the last event seen.
 * `close()` stops it.
 */
export function followEvents(id, on) {
  const reader = { es: null, lastSeq: 0, closed: false, timer: 0 };
  const open = () => {
    if (reader.closed) return;
    const query = new URLSearchParams();
    if (token) query.set('token', token);
    if (reader.lastSeq) query.set('after', String(reader.lastSeq));
    const qs = query.toString();
    const es = new EventSource(`/runs/${enc(id)}/events${qs ? `?${qs}` : ''}`);
    reader.es = es;
    es.onmessage = (message) => {
      if (reader.es !== es) return;
      let event;
      try { event = JSON.parse(message.data); } catch (_) { return; }
      if (!event || typeof event.seq !== 'number' || event.seq <= reader.lastSeq) return;
      reader.lastSeq = event.seq;
      try {
        on.event(event);
      } catch (error) {
        if (on.error) on.error(`event ${event.seq} of run ${id} could not be shown: ${error.message}`);
      }
    };
    es.addEventListener('end', (message) => {
      if (reader.es !== es) return;
      es.close();
      reader.es = null;
      reader.closed = true;
      let status = null;
      try { status = JSON.parse(message.data).status; } catch (_) { status = null; }
      on.end(status);
    });
    es.onerror = () => {
      if (reader.es !== es || es.readyState !== EventSource.CLOSED) return;
      reader.es = null;
      if (on.error) on.error(`the event stream of run ${id} was closed; reconnecting`);
      clearTimeout(reader.timer);
      reader.timer = setTimeout(open, RECONNECT_MS);
    };
  };
  open();
  return {
    close() {
      reader.closed = true;
      clearTimeout(reader.timer);
      if (reader.es) reader.es.close();
      reader.es = null;
    },
  };
}
