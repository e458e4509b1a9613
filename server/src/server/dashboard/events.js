// The run's events applied to the page: each event updates its node in the
// tree, adds its row to the trace and its line to the log, and may change
// the run's status or pause it. A fork's first event says where it comes
// from, and each call it inherited is marked replayed, not sent.

import { PAUSED } from './state.js';
import { renderRun, setStatus } from './run.js';
import {
  budgetText, counted, duration, overflowText, pausedText, resumedText,
} from './text.js';
import { timelineEvent } from './timeline.js';
import { addTraceRow, addVerdictRow, logEvent } from './trace.js';
import {
  clearAllBanners, clearBanner, clearLeaseBanner, ensureNode, freshLease, renderNode, setBanner,
} from './tree.js';

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

export function applyEvent(st, e) {
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
    case 'escalated':
      node.state = e.kind;
      node.note = e.reason;
      clearBanner(node);
      addTraceRow(st, e, e.kind, e.reason);
      break;
    case 'renewal_cap_reached':
      node.state = 'capped';
      clearBanner(node);
      addTraceRow(st, e, 'renewal cap reached', `stopped after ${counted(e.max_renewals, 'renewal')}`);
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
    case 'run_forked':
      st.forkEvent = e;
      st.runStarted = { flow: e.flow, task: '' };
      node.state = 'running';
      node.label = e.flow ? `run · ${e.flow}` : 'run';
      node.note = `forked from ${e.parent} at ${e.loop_path} step ${e.step}`;
      addTraceRow(st, e, 'forked', `from ${e.parent} at ${e.loop_path} step ${e.step}`);
      setStatus(st, 'running', 'stream');
      break;
    case 'tool_call_replayed':
      node.label = e.tool;
      node.state = 'replayed';
      node.note = `not sent: ${e.by_person ? 'the result a person gave' : 'its result'} was recorded in ${e.made_by} (key ${e.idempotency_key})`;
      node.dom.label.title = `${e.path} · key ${e.idempotency_key}`;
      st.replayed.push(e);
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
      call.note = `${counted(e.tool_calls, 'tool call')}, ${counted((usage.input_tokens || 0) + (usage.output_tokens || 0), 'token')}`;
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
    case 'context_overflow':
      addTraceRow(st, e, e.action === 'shortened' ? 'context shortened' : 'context overflow', overflowText(e));
      break;
    case 'gave_up':
      addTraceRow(st, e, 'gave up', `after ${counted(e.attempts, 'attempt')}, handed to ${e.handed_to}: ${e.reason}`);
      break;
    case 'paused':
      node.state = 'paused';
      runNode.state = 'paused';
      addTraceRow(st, e, 'paused', pausedText(e));
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
      addTraceRow(st, e, 'resumed', resumedText(e));
      setStatus(st, 'running', 'stream');
      break;
    case 'run_resumed':
      addTraceRow(st, e, 'claimed', `by ${e.owner_id} with fence ${e.fence}, resumed from its snapshots`);
      break;
    case 'message_received':
      addTraceRow(st, e, 'message', `${e.by} said (${e.policy}): ${e.text}`);
      break;
    case 'control_refused':
      addTraceRow(st, e, 'refused', `a forwarded ${e.command} was refused: ${e.reason}`);
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
  timelineEvent(st, e);
  renderRun(st);
}
