// The leasehold dashboard: the list of runs, and for one run its live tree,
// the watchdog's wait banners, the verdict trace and a person's controls.
//
// Plain JavaScript, no framework, no build step. Every string that comes from
// the server is put into the page as text (textContent, text nodes,
// attributes), never as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'leasehold.token';
  const POLL_MS = 2000;
  const RECONNECT_MS = 3000;
  const LOG_LIMIT = 500;
  const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
  const PAUSED = new Set(['waiting_human', 'reconciliation_required']);

  // ---------------------------------------------------------------- helpers

  const $ = (id) => document.getElementById(id);
  const enc = encodeURIComponent;

  /** An element; `attrs` are set as attributes (`class`, `text` are special). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') node.className = value;
      else if (key === 'text') node.textContent = String(value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function setText(node, value) {
    const text = value === undefined || value === null ? '' : String(value);
    if (node.textContent !== text) node.textContent = text;
  }

  const pad = (n, width = 2) => String(n).padStart(width, '0');

  function clock(ms) {
    if (!ms) return '';
    const d = new Date(ms);
    const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    const now = new Date();
    if (d.toDateString() === now.toDateString()) return time;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
  }

  function duration(ms) {
    if (ms === undefined || ms === null) return '';
    if (ms < 1000) return `${ms} ms`;
    return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  }

  const phiText = (phi) => (phi === undefined || phi === null ? 'none' : Number(phi).toFixed(2));

  // ------------------------------------------------------------------ token

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

  // -------------------------------------------------------------------- api

  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body) {
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

  // Errors by source, shown together in the bar under the header.
  const errors = new Map();
  function setError(source, message) {
    if (message) errors.set(source, message);
    else errors.delete(source);
    const bar = $('error-bar');
    setText(bar, [...errors.values()].join(' · '));
    bar.hidden = errors.size === 0;
  }

  function setStreamState(state, text) {
    const node = $('stream-state');
    node.dataset.state = state;
    setText(node, text === undefined ? state : text);
  }

  // ---------------------------------------------------------------- routing

  let current = null; // the run being shown, or null for the list
  let listTimer = null;

  function route() {
    const match = window.location.hash.match(/^#\/runs\/(.+)$/);
    if (match) {
      let id = match[1];
      try { id = decodeURIComponent(id); } catch (_) { /* keep it raw */ }
      showRun(id);
    } else {
      showList();
    }
  }

  // ------------------------------------------------------------- runs list

  const runRows = new Map();

  function showList() {
    stopRun();
    $('run-view').hidden = true;
    $('runs-view').hidden = false;
    document.title = 'leasehold: runs';
    setStreamState('idle', '');
    pollList();
  }

  async function pollList() {
    clearTimeout(listTimer);
    if (current) return;
    try {
      const data = await api('GET', '/runs');
      if (current) return;
      renderRuns((data && data.runs) || []);
      setError('list', null);
    } catch (error) {
      if (current) return;
      setError('list', `runs: ${error.message}`);
    }
    if (!current) listTimer = setTimeout(pollList, POLL_MS);
  }

  function renderRuns(runs) {
    const body = $('runs-body');
    const seen = new Set();
    for (const run of runs) {
      const id = String(run.run_id);
      seen.add(id);
      let row = runRows.get(id);
      if (!row) {
        const link = el('a', { class: 'run-link', 'data-run-id': id, href: `#/runs/${enc(id)}` }, id);
        row = {
          tr: el('tr', { 'data-run-id': id }),
          flow: el('td'),
          status: el('span', { class: 'status' }),
          task: el('td', { class: 'task' }),
          updated: el('td', { class: 'time' }),
        };
        row.tr.append(el('td', null, link), row.flow, el('td', null, row.status), row.task, row.updated);
        runRows.set(id, row);
      }
      setText(row.flow, run.flow_name);
      setText(row.status, run.status);
      row.status.dataset.status = run.status || '';
      row.status.className = `status status-${run.status}`;
      setText(row.task, run.task);
      row.task.title = run.task || '';
      setText(row.updated, clock(run.updated_at_ms));
      body.append(row.tr); // appended in the server's order (newest first)
    }
    for (const [id, row] of runRows) {
      if (!seen.has(id)) {
        row.tr.remove();
        runRows.delete(id);
      }
    }
    $('runs-empty').hidden = runs.length > 0;
    $('runs-table').hidden = runs.length === 0;
  }

  // ---------------------------------------------------------------- one run

  function newRunState(id) {
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
    };
  }

  function stopRun() {
    if (!current) return;
    const st = current;
    current = null;
    if (st.es) st.es.close();
    st.es = null;
    clearTimeout(st.retryTimer);
    clearTimeout(st.pollTimer);
    setError('run', null);
    setError('stream', null);
    setError('control', null);
  }

  function showRun(id) {
    stopRun();
    clearTimeout(listTimer);
    setError('list', null);
    const st = newRunState(id);
    current = st;
    $('runs-view').hidden = true;
    $('run-view').hidden = false;
    document.title = `leasehold: ${id}`;
    setText($('run-id'), id);
    for (const node of ['tree', 'verdicts-body', 'supervision-body', 'event-log']) $(node).replaceChildren();
    $('verdicts-empty').hidden = false;
    $('supervision-empty').hidden = false;
    $('verdicts').hidden = true;
    $('supervision').hidden = true;
    setText($('event-count'), '0');
    setText($('pause-message'), '');
    $('pause-message').hidden = true;
    $('guidance').value = '';
    renderRun(st);
    openStream(st);
    pollRun(st);
  }

  async function pollRun(st) {
    clearTimeout(st.pollTimer);
    const epoch = st.statusEpoch;
    try {
      const view = await api('GET', `/runs/${enc(st.id)}`);
      if (st !== current) return;
      applyView(st, view, epoch);
      setError('run', null);
    } catch (error) {
      if (st !== current) return;
      setError('run', error.status === 404 ? `run ${st.id} was not found` : `run: ${error.message}`);
    }
    if (st !== current) return;
    const final = st.view && TERMINAL.has(st.view.status);
    if (!final) st.pollTimer = setTimeout(() => pollRun(st), POLL_MS);
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
  function setStatus(st, status, source) {
    if (!status) return;
    if (TERMINAL.has(st.status) && !TERMINAL.has(status)) return;
    if (status !== st.status && source !== 'poll') st.statusEpoch += 1;
    st.status = status;
    if (!PAUSED.has(status)) st.pauseEvent = null;
    renderRun(st);
  }

  function renderRun(st) {
    if (st !== current) return;
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

    setText($('pause-title'), reconciling
      ? 'A tool call\u2019s outcome is unknown: a person must decide'
      : 'Waiting for a person');
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
    $('reconcile-controls').hidden = !reconciling;
    setText($('guidance-label'), reconciling
      ? 'If it took effect: its result, which the model will see'
      : 'Guidance for the run (the next model call sees it)');
  }

  function pauseMessage(text) {
    setText($('pause-message'), text || '');
    $('pause-message').hidden = !text;
  }

  // --------------------------------------------------------------- controls

  async function control(button, path, body, onDone) {
    const st = current;
    if (!st) return;
    button.disabled = true;
    pauseMessage('');
    try {
      const result = await api('POST', `/runs/${enc(st.id)}/${path}`, body);
      if (st !== current) return;
      onDone(st, result || {});
    } catch (error) {
      if (st !== current) return;
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
    const st = current;
    if (!st || !window.confirm(`Cancel run ${st.id}?`)) return;
    control(button, 'cancel', { reason: 'cancelled from the dashboard' }, (st2, result) => {
      setStatus(st2, result.status || 'cancelled', 'control');
    });
  }

  function reconcile(button) {
    const st = current;
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

  // ----------------------------------------------------------------- stream

  function openStream(st) {
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
        applyEvent(st, event);
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
      if (status) setStatus(st, status, 'stream');
      clearAllBanners(st);
      setStreamState('ended');
      pollRun(st);
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
          if (st === current && !st.ended) openStream(st);
        }, RECONNECT_MS);
      } else {
        setStreamState('reconnecting', 'reconnecting…');
      }
    };
  }

  // ------------------------------------------------------------------- tree

  const KIND_NAMES = { run: 'run', worker: 'worker', model_call: 'model call', tool_call: 'tool call' };

  function parseSegment(segment) {
    if (segment === 'run') return { kind: 'run', label: 'run' };
    let m = segment.match(/^worker:(.+?)(?::(\d+))?$/);
    if (m) return { kind: 'worker', label: m[2] ? `${m[1]} #${m[2]}` : m[1] };
    m = segment.match(/^model_call:(\d+)$/);
    if (m) return { kind: 'model_call', label: `step ${m[1]}`, step: Number(m[1]) };
    m = segment.match(/^tool_call:(\d+)\.(\d+)$/);
    if (m) return { kind: 'tool_call', label: `step ${m[1]}, call ${m[2]}`, step: Number(m[1]) };
    const colon = segment.indexOf(':');
    return colon > 0
      ? { kind: segment.slice(0, colon), label: segment.slice(colon + 1) }
      : { kind: segment, label: segment };
  }

  function ensureNode(st, path) {
    let node = st.nodes.get(path);
    if (node) return node;
    const slash = path.lastIndexOf('/');
    const parent = slash > 0 ? ensureNode(st, path.slice(0, slash)) : null;
    const segment = slash > 0 ? path.slice(slash + 1) : path;
    const parsed = parseSegment(segment);
    node = {
      path,
      kind: parsed.kind,
      label: parsed.label,
      state: 'pending',
      attempt: null,
      step: null,
      limit: null,
      renewals: null,
      evidence: null,
      phi: undefined,
      lastVerdict: null,
      nudges: 0,
      note: '',
      banner: null,
      leaseId: null,
    };
    const li = el('li', { class: 'node', 'data-path': path, 'data-kind': parsed.kind, 'data-state': 'pending' });
    const head = el('div', { class: 'node-head' });
    const dom = {
      li,
      head,
      kind: el('span', { class: 'node-kind' }, KIND_NAMES[parsed.kind] || parsed.kind),
      label: el('span', { class: 'node-label', title: path }),
      state: el('span', { class: 'state' }),
      facts: el('span', { class: 'node-facts' }),
      note: el('div', { class: 'node-note' }),
      children: el('ul', { class: 'children' }),
    };
    head.append(dom.kind, dom.label, dom.state, dom.facts);
    li.append(head, dom.note, dom.children);
    node.dom = dom;
    if (parent) parent.dom.children.append(li);
    else {
      let root = $('tree').querySelector(':scope > ul.tree');
      if (!root) {
        root = el('ul', { class: 'tree' });
        $('tree').append(root);
      }
      root.append(li);
    }
    st.nodes.set(path, node);
    renderNode(node);
    return node;
  }

  function renderNode(node) {
    const { dom } = node;
    dom.li.dataset.state = node.state;
    setText(dom.label, node.label);
    setText(dom.state, node.state);
    dom.state.className = `state state-${node.state}`;
    const facts = [];
    const fact = (name, text) => facts.push(el('span', { class: `fact fact-${name}` }, text));
    if (node.step !== null && node.kind !== 'model_call' && node.kind !== 'tool_call') {
      fact('step', node.limit ? `step ${node.step} of ${node.limit}` : `step ${node.step}`);
    }
    if (node.attempt !== null) fact('attempt', `attempt ${node.attempt}`);
    if (node.renewals !== null) fact('renewals', `renewals ${node.renewals}`);
    if (node.evidence !== null) fact('evidence', `evidence ${node.evidence}`);
    if (node.phi !== undefined) fact('phi', `phi ${phiText(node.phi)}`);
    if (node.lastVerdict) fact('verdict', node.lastVerdict);
    if (node.nudges) fact('nudges', `nudges ${node.nudges}`);
    dom.facts.replaceChildren(...facts);
    for (const [key, value] of [
      ['attempt', node.attempt], ['renewals', node.renewals], ['evidence', node.evidence],
    ]) {
      if (value === null) delete dom.li.dataset[key];
      else dom.li.dataset[key] = String(value);
    }
    if (node.phi === undefined) delete dom.li.dataset.phi;
    else dom.li.dataset.phi = node.phi === null ? 'none' : String(node.phi);
    setText(dom.note, node.note);
    dom.note.hidden = !node.note;
  }

  /** A new attempt has a new lease: its figures start again. */
  function freshLease(node) {
    node.renewals = null;
    node.evidence = null;
    node.phi = undefined;
    node.lastVerdict = null;
    node.leaseId = null;
  }

  function setBanner(node, event) {
    clearBanner(node);
    const lease = event.lease_kind ? `${event.lease_kind.replace(/_/g, ' ')} lease` : 'lease';
    const banner = el('div', {
      class: 'wait-banner',
      role: 'status',
      'data-path': node.path,
      'data-lease-id': event.lease_id,
    },
    el('strong', null, 'waiting on the watchdog: '),
    `lease expired after ${event.renewals} renewal${event.renewals === 1 ? '' : 's'}`,
    el('span', { class: 'wait-detail' },
      ` · ${event.subject || ''} · ${lease} of ${duration(event.lease_ms)} · since ${clock(event.at)}`));
    node.banner = banner;
    node.dom.head.after(banner);
  }

  function clearBanner(node) {
    if (!node || !node.banner) return;
    node.banner.remove();
    node.banner = null;
  }

  function clearAllBanners(st) {
    for (const node of st.nodes.values()) clearBanner(node);
  }

  /** Clears the banner of the lease `leaseId` wherever it is shown. */
  function clearLeaseBanner(st, leaseId) {
    if (leaseId === undefined || leaseId === null) return;
    for (const node of st.nodes.values()) {
      if (node.banner && node.leaseId === leaseId) clearBanner(node);
    }
  }

  // ------------------------------------------------------------------ trace

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

  function addVerdictRow(st, event) {
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

  function addTraceRow(st, event, what, detail) {
    const row = el('tr', { class: 'trace-row', 'data-kind': event.kind, 'data-path': event.path },
      timeCell(st, event.at),
      el('td', null, pathCode(event.path)),
      el('td', null, el('span', { class: `what what-${event.kind}` }, what)),
      el('td', { class: 'why' }, detail));
    $('supervision-body').append(row);
    $('supervision-empty').hidden = true;
    $('supervision').hidden = false;
  }

  function budgetText(r) {
    const base = `${r.steps_used} steps used of ${r.limit}`;
    const milestones = r.milestones_open && r.milestones_open.length
      ? `; open: ${r.milestones_open.join(', ')}` : '';
    return r.kind === 'budget_extended'
      ? `${base}: extended to ${r.new_limit} (${r.reason}, by ${r.decided_by})${milestones}`
      : `${base}: wrapping up (${r.reason}, by ${r.decided_by})${milestones}`;
  }

  /** One line about an event, for the log (as the runtime's own describe). */
  function describe(e) {
    switch (e.kind) {
      case 'wait': return `${e.subject}: lease expired after ${e.renewals} renewals`;
      case 'verdict': return `${e.verdict} by ${e.decided_by} (evidence ${(e.evidence || {}).count}, phi ${phiText((e.evidence || {}).phi)}): ${e.reason}`;
      case 'progress': return `${e.note || 'progress'} (${e.count} items)`;
      case 'nudge_queued': return `queued for the next step: ${e.nudge}`;
      case 'intervened': case 'escalated': return e.reason;
      case 'renewal_cap_reached': return `stopped after ${e.max_renewals} renewals`;
      case 'verdict_dropped': return `${e.verdict} dropped: ${e.reason}`;
      case 'lease_cancelled': return 'cancelled by its parent';
      case 'run_started': return `flow ${e.flow} (${e.max_steps} steps): ${e.task}`;
      case 'step_started': return `step ${e.step} ${e.limit ? `of ${e.limit}` : 'unlimited'}, ${e.nudges} nudges`;
      case 'model_call_started': return `step ${e.step}, ${e.stream ? 'streaming' : 'blocking'}, attempt ${e.attempt}`;
      case 'model_call_finished': {
        const usage = e.usage || {};
        return `${e.outcome}, ${e.tool_calls} tool calls, ${(usage.input_tokens || 0) + (usage.output_tokens || 0)} tokens`;
      }
      case 'tool_call_started': return `${e.tool} attempt ${e.attempt}`;
      case 'tool_call_finished': return `${e.tool} attempt ${e.attempt}: ${e.outcome}`;
      case 'tool_result_truncated': return `${e.tool}: result cut to ${e.kept_bytes} of ${e.original_bytes} bytes`;
      case 'worker_spawned': return `${e.worker}: ${e.task}`;
      case 'worker_finished': return `${e.worker} ${e.outcome}: ${e.result}`;
      case 'budget_extended': case 'budget_exhausted': return budgetText(e);
      case 'restarted': return `attempt ${e.attempt} in ${e.delay_ms} ms after: ${e.reason}`;
      case 'gave_up': return `given up after ${e.attempts} attempts, handed to ${e.handed_to}: ${e.reason}`;
      case 'paused': return `waiting for a person about ${e.subject}: ${e.reason}`;
      case 'run_resumed': return `claimed by ${e.owner_id} with fence ${e.fence}, resumed from its snapshots`;
      case 'reconciliation_required': return `${e.tool} (key ${e.idempotency_key}): ${e.reason}`;
      case 'resumed': return e.guidance ? `a person answered: ${e.guidance}` : 'a person said to go on';
      case 'run_completed': return `after ${e.steps} steps: ${e.answer}`;
      case 'run_failed': case 'run_cancelled': return e.reason;
      default: return '';
    }
  }

  function logEvent(st, event) {
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

  // ----------------------------------------------------------------- events

  const OUTCOME_STATE = {
    ok: 'ok', error: 'error', intervened: 'intervened', escalated: 'escalated',
    cancelled: 'cancelled', panicked: 'panicked', capped: 'capped', unknown: 'unknown',
  };

  /** The evidence of the ESCALATE verdict that led to the pause `e`, if any. */
  function escalationEvidence(st, e) {
    const last = st.lastEscalation;
    if (!last) return null;
    const within = last.path === e.path || last.path.startsWith(`${e.path}/`);
    return within || last.subject === e.subject ? last.evidence : null;
  }

  function applyEvent(st, e) {
    if (!st.startAt && e.kind === 'run_started') st.startAt = e.at;
    if (!st.startAt) st.startAt = e.at;
    const node = ensureNode(st, e.path || 'run');
    const runNode = ensureNode(st, 'run');

    switch (e.kind) {
      case 'wait':
        node.renewals = e.renewals;
        node.leaseId = e.lease_id;
        setBanner(node, e);
        break;
      case 'verdict': {
        const evidence = e.evidence || {};
        node.leaseId = e.lease_id;
        node.renewals = e.renewals + (e.verdict === 'RENEW' || e.verdict === 'NUDGE' ? 1 : 0);
        node.evidence = evidence.count ?? node.evidence;
        node.phi = evidence.phi ?? null;
        node.lastVerdict = `${e.verdict} by ${e.decided_by}`;
        if (e.verdict === 'INTERVENE') node.state = 'intervened';
        if (e.verdict === 'ESCALATE') {
          node.state = 'escalated';
          st.lastEscalation = { path: e.path, subject: e.subject, evidence: e.evidence || null };
        }
        clearBanner(node);
        clearLeaseBanner(st, e.lease_id);
        addVerdictRow(st, e);
        break;
      }
      case 'progress':
        node.evidence = e.count;
        if (e.lease_id !== undefined) node.leaseId = e.lease_id;
        clearBanner(node);
        clearLeaseBanner(st, e.lease_id);
        break;
      case 'nudge_queued':
        node.nudges += 1;
        addTraceRow(st, e, 'nudge queued', e.nudge);
        break;
      case 'intervened':
        node.state = 'intervened';
        node.note = e.reason;
        clearBanner(node);
        addTraceRow(st, e, 'intervened', e.reason);
        break;
      case 'escalated':
        node.state = 'escalated';
        node.note = e.reason;
        clearBanner(node);
        addTraceRow(st, e, 'escalated', e.reason);
        break;
      case 'renewal_cap_reached':
        node.state = 'capped';
        clearBanner(node);
        addTraceRow(st, e, 'renewal cap reached', `stopped after ${e.max_renewals} renewals`);
        break;
      case 'verdict_dropped':
        addTraceRow(st, e, 'verdict dropped', `${e.verdict}: ${e.reason}`);
        break;
      case 'lease_cancelled':
        clearBanner(node);
        if (node.state === 'running') node.state = 'cancelled';
        break;
      case 'run_started':
        st.runStarted = { flow: e.flow, task: e.task };
        node.state = 'running';
        node.label = e.flow ? `run · ${e.flow}` : 'run';
        node.note = e.task;
        if (e.max_steps) node.limit = e.max_steps;
        setStatus(st, 'running', 'stream');
        break;
      case 'step_started':
        node.step = e.step;
        node.limit = e.limit || null;
        if (node.state === 'pending' || node.state === 'paused') node.state = 'running';
        break;
      case 'model_call_started': {
        const call = ensureNode(st, `${node.path}/model_call:${e.step}`);
        if (call.attempt !== null && call.attempt !== e.attempt) freshLease(call);
        call.attempt = e.attempt;
        call.state = 'running';
        call.note = e.stream ? 'streaming' : 'blocking';
        clearBanner(call);
        renderNode(call);
        break;
      }
      case 'model_call_finished': {
        const call = ensureNode(st, `${node.path}/model_call:${e.step}`);
        const usage = e.usage || {};
        call.state = OUTCOME_STATE[e.outcome] || e.outcome;
        call.note = `${e.tool_calls} tool call${e.tool_calls === 1 ? '' : 's'}, ${(usage.input_tokens || 0) + (usage.output_tokens || 0)} tokens`;
        clearBanner(call);
        renderNode(call);
        break;
      }
      case 'tool_call_started':
        if (node.attempt !== null && node.attempt !== e.attempt) freshLease(node);
        node.label = e.tool;
        node.attempt = e.attempt;
        node.state = 'running';
        node.note = '';
        node.dom.label.title = `${e.path} · key ${e.idempotency_key}`;
        clearBanner(node);
        break;
      case 'tool_call_finished':
        node.label = e.tool || node.label;
        node.state = OUTCOME_STATE[e.outcome] || e.outcome;
        clearBanner(node);
        break;
      case 'worker_spawned':
        node.state = 'running';
        node.note = e.task;
        break;
      case 'worker_finished':
        node.state = OUTCOME_STATE[e.outcome] || e.outcome;
        node.note = e.result;
        clearBanner(node);
        break;
      case 'budget_extended':
        node.limit = e.new_limit;
        addTraceRow(st, e, 'budget extended', budgetText(e));
        break;
      case 'budget_exhausted':
        addTraceRow(st, e, 'budget exhausted', budgetText(e));
        break;
      case 'restarted':
        node.state = 'restarting';
        node.note = `attempt ${e.attempt} in ${duration(e.delay_ms)} after: ${e.reason}`;
        clearBanner(node);
        addTraceRow(st, e, 'restarted', `attempt ${e.attempt} in ${duration(e.delay_ms)} after: ${e.reason}`);
        break;
      case 'gave_up':
        addTraceRow(st, e, 'gave up', `after ${e.attempts} attempts, handed to ${e.handed_to}: ${e.reason}`);
        break;
      case 'paused':
        node.state = 'paused';
        runNode.state = 'paused';
        addTraceRow(st, e, 'paused', `waiting for a person about ${e.subject}: ${e.reason}`);
        setStatus(st, 'waiting_human', 'stream');
        st.pauseEvent = PAUSED.has(st.status)
          ? { reason: e.reason, subject: e.subject, path: e.path, evidence: e.evidence || escalationEvidence(st, e) }
          : null;
        break;
      case 'reconciliation_required': {
        node.state = 'unknown';
        runNode.state = 'paused';
        const pause = {
          reason: e.reason,
          subject: e.tool,
          path: e.path,
          call: { key: e.idempotency_key, tool: e.tool, arguments: e.arguments },
        };
        addTraceRow(st, e, 'reconciliation required', `${e.tool} (key ${e.idempotency_key}): ${e.reason}`);
        setStatus(st, 'reconciliation_required', 'stream');
        if (PAUSED.has(st.status)) st.pauseEvent = pause;
        break;
      }
      case 'resumed':
        for (const n of st.nodes.values()) {
          if (n.state === 'paused') {
            n.state = 'running';
            renderNode(n);
          }
        }
        runNode.state = 'running';
        addTraceRow(st, e, 'resumed', e.guidance ? `a person answered: ${e.guidance}` : 'a person said to go on');
        setStatus(st, 'running', 'stream');
        break;
      case 'run_resumed':
        addTraceRow(st, e, 'claimed', `by ${e.owner_id} with fence ${e.fence}, resumed from its snapshots`);
        break;
      case 'run_completed':
      case 'run_failed':
      case 'run_cancelled': {
        const status = e.kind.slice('run_'.length);
        node.state = status;
        if (status === 'completed') {
          node.note = e.answer;
          st.answer = e.answer;
        } else {
          node.note = e.reason;
          st.reason = e.reason;
        }
        clearAllBanners(st);
        setStatus(st, status, 'stream');
        break;
      }
      default:
        break;
    }
    renderNode(node);
    if (runNode !== node) renderNode(runNode);
    logEvent(st, e);
    renderRun(st);
  }

  // ------------------------------------------------------------------ start

  $('resume-button').addEventListener('click', resume);
  $('cancel-button').addEventListener('click', (event) => cancel(event.currentTarget));
  $('cancel-run-button').addEventListener('click', (event) => cancel(event.currentTarget));
  for (const button of document.querySelectorAll('.reconcile-button')) {
    button.addEventListener('click', () => reconcile(button));
  }
  window.addEventListener('hashchange', route);
  route();
})();
