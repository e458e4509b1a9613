// The event texts: times, durations and one line about each event, as the
// runtime's own describe words them.

const pad = (n, width = 2) => String(n).padStart(width, '0');

export function clock(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  const now = new Date();
  if (d.toDateString() === now.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

export function duration(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return `${ms} ms`;
  return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

export const phiText = (phi) => (phi === undefined || phi === null ? 'none' : Number(phi).toFixed(2));

export function budgetText(r) {
  const base = `${r.steps_used} steps used of ${r.limit}`;
  const milestones = r.milestones_open && r.milestones_open.length
    ? `; open: ${r.milestones_open.join(', ')}` : '';
  return r.kind === 'budget_extended'
    ? `${base}: extended to ${r.new_limit} (${r.reason}, by ${r.decided_by})${milestones}`
    : `${base}: wrapping up (${r.reason}, by ${r.decided_by})${milestones}`;
}

/** A context-window overflow and what the loop did about it (as the runtime's describe). */
export function overflowText(e) {
  let sizes = '';
  if (e.requested_tokens != null && e.context_tokens != null) {
    sizes = ` (${e.requested_tokens} tokens against a window of ${e.context_tokens})`;
  } else if (e.requested_tokens != null) {
    sizes = ` (${e.requested_tokens} tokens)`;
  } else if (e.context_tokens != null) {
    sizes = ` (a window of ${e.context_tokens} tokens)`;
  }
  const head = `the request does not fit the model's context window${sizes}`;
  if (e.action === 'shortened') {
    const results = e.shortened === 1 ? '1 tool result' : `${e.shortened} tool results`;
    return `${head}: ${results} shortened by ${e.chars_cut} characters, calling again`;
  }
  return `${head}: nothing more to shorten, waiting for a person`;
}

/** One line about an event, for the log (as the runtime's own describe). */
export function describe(e) {
  switch (e.kind) {
    case 'wait': return `${e.subject}: lease expired after ${e.renewals} renewals`;
    case 'verdict': return `${e.verdict} by ${e.decided_by} (evidence ${(e.evidence || {}).count}, phi ${phiText((e.evidence || {}).phi)}): ${e.reason}`;
    case 'progress': return `${e.note || 'progress'} (${e.count} items${e.reports > 1 ? `, ${e.reports} reports in this one` : ''})`;
    case 'events_dropped': {
      const counts = Object.entries(e.dropped || {}).map(([kind, n]) => `${n} ${kind}`).join(', ');
      return `the run's log holds ${e.max_run_events} events: ${counts} not stored`;
    }
    case 'nudge_queued': return `queued for the next step: ${e.nudge}`;
    case 'intervened': case 'escalated': return e.reason;
    case 'renewal_cap_reached': return `stopped after ${e.max_renewals} renewals`;
    case 'verdict_dropped': return `${e.verdict} dropped: ${e.reason}`;
    case 'lease_cancelled': return 'cancelled by its parent';
    case 'run_started': return `flow ${e.flow} (${e.max_steps} steps): ${e.task}`;
    case 'run_forked': {
      const parts = [`forked from ${e.parent} at ${e.loop_path} step ${e.step}`];
      if (e.guidance) parts.push(`guidance: ${e.guidance}`);
      if (e.changes && e.changes.length) parts.push(`flow changed: ${e.changes.join(', ')}`);
      if (e.person_answers && e.person_answers.length) {
        parts.push(`inheriting ${e.person_answers.length} answer(s) a person gave the parent`);
      }
      return parts.join(', ');
    }
    case 'tool_call_replayed':
      return `${e.tool} (key ${e.idempotency_key}) not sent again: the result ${e.by_person ? 'a person gave was' : 'was'} recorded in ${e.made_by}`;
    case 'step_started': return `step ${e.step} ${e.limit ? `of ${e.limit}` : 'unlimited'}, ${e.nudges} nudges`;
    case 'model_call_started': return `step ${e.step}, ${e.stream ? 'streaming' : 'blocking'}, attempt ${e.attempt}`;
    case 'model_call_finished': {
      const usage = e.usage || {};
      return `${e.outcome}, ${e.tool_calls} tool calls, ${(usage.input_tokens || 0) + (usage.output_tokens || 0)} tokens`;
    }
    case 'tool_call_started': return `${e.tool} attempt ${e.attempt}`;
    case 'tool_call_finished': return `${e.tool} attempt ${e.attempt}: ${e.outcome}`;
    case 'tool_result_truncated': return `${e.tool}: result cut to ${e.kept_bytes} of ${e.original_bytes} bytes`;
    case 'context_overflow': return overflowText(e);
    case 'worker_spawned': return `${e.worker}: ${e.task}`;
    case 'spawn_refused': return `${e.worker}: not spawned, past ${e.limit} (${e.bound})`;
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
    case 'control_refused': return `a forwarded ${e.command} was refused: ${e.reason}`;
    default: return '';
  }
}
