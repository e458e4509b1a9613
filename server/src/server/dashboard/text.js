// The event texts: times, durations and one line about each event, as the
// runtime's own describe words them.

const pad = (n, width = 2) => String(n).padStart(width, '0');

/**
 * `n` and `noun`, plural unless `n` is one: `1 renewal`, `2 renewals` (a
 * noun whose plural is its `-s` form, as the runtime's `counted`); `show`
 * writes the number.
 */
export function counted(n, noun, show = String) {
  return `${show(n)} ${Number(n) === 1 ? noun : `${noun}s`}`;
}

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
  const base = `${counted(r.steps_used, 'step')} used of ${r.limit}`;
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
    return `${head}: ${counted(e.shortened, 'tool result')} shortened by ${counted(e.chars_cut, 'character')}, calling again`;
  }
  return `${head}: nothing more to shorten, waiting for a person`;
}

/** The subject of a pause for an endpoint that is down (`ENDPOINT_SUBJECT`). */
export const ENDPOINT_SUBJECT = 'endpoint';

/**
 * A `paused` event: a person's pause, a pause on an endpoint that is down
 * (which ends by itself when it answers), or one for a person to answer.
 */
export function pausedText(e) {
  if (e.by) return `paused by ${e.by}: ${e.reason}`;
  if (e.subject === ENDPOINT_SUBJECT) return `waiting for its endpoint to answer again: ${e.reason}`;
  return `waiting for a person about ${e.subject}: ${e.reason}`;
}

/** A `resumed` event: by its endpoint answering again, or by a person. */
export function resumedText(e) {
  if (e.by) return `resumed: ${e.by}`;
  return e.guidance ? `a person answered: ${e.guidance}` : 'a person said to go on';
}

/** One line about an event, for the log (as the runtime's own describe). */
export function describe(e) {
  switch (e.kind) {
    case 'wait': return `${e.subject}: lease expired after ${counted(e.renewals, 'renewal')}`;
    case 'verdict': return `${e.verdict} by ${e.decided_by} (evidence ${(e.evidence || {}).count}, phi ${phiText((e.evidence || {}).phi)}): ${e.reason}`;
    case 'progress': return `${e.note || 'progress'} (${counted(e.count, 'item')}${e.reports > 1 ? `, ${e.reports} reports in this one` : ''})`;
    case 'events_dropped': {
      const counts = Object.entries(e.dropped || {}).map(([kind, n]) => `${n} ${kind}`).join(', ');
      return `the run's log holds ${e.max_run_events} events: ${counts} not stored`;
    }
    case 'nudge_queued': return `queued for the next step: ${e.nudge}`;
    case 'intervened': case 'escalated': return e.reason;
    case 'renewal_cap_reached': return `stopped after ${counted(e.max_renewals, 'renewal')}`;
    case 'verdict_dropped': return `${e.verdict} dropped: ${e.reason}`;
    case 'lease_cancelled': return 'cancelled by its parent';
    case 'run_started': return `flow ${e.flow} (${counted(e.max_steps, 'step')}): ${e.task}`;
    case 'run_forked': {
      const parts = [`forked from ${e.parent} at ${e.loop_path} step ${e.step}`];
      if (e.guidance) parts.push(`guidance: ${e.guidance}`);
      if (e.changes && e.changes.length) parts.push(`flow changed: ${e.changes.join(', ')}`);
      if (e.person_answers && e.person_answers.length) {
        parts.push(`inheriting ${counted(e.person_answers.length, 'answer')} a person gave the parent`);
      }
      return parts.join(', ');
    }
    case 'tool_call_replayed':
      return `${e.tool} (key ${e.idempotency_key}) not sent again: the result ${e.by_person ? 'a person gave was' : 'was'} recorded in ${e.made_by}`;
    case 'step_started': return `step ${e.step} ${e.limit ? `of ${e.limit}` : 'unlimited'}, ${counted(e.nudges, 'nudge')}`;
    case 'model_call_started': return `step ${e.step}, ${e.stream ? 'streaming' : 'blocking'}, attempt ${e.attempt}`;
    case 'model_call_finished': {
      const usage = e.usage || {};
      return `${e.outcome}, ${counted(e.tool_calls, 'tool call')}, ${counted((usage.input_tokens || 0) + (usage.output_tokens || 0), 'token')}`;
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
    case 'gave_up': return `given up after ${counted(e.attempts, 'attempt')}, handed to ${e.handed_to}: ${e.reason}`;
    case 'paused': return pausedText(e);
    case 'run_resumed': return `claimed by ${e.owner_id} with fence ${e.fence}, resumed from its snapshots`;
    case 'reconciliation_required': return `${e.tool} (key ${e.idempotency_key}): ${e.reason}`;
    case 'resumed': return resumedText(e);
    case 'run_completed': return `after ${counted(e.steps, 'step')}: ${e.answer}`;
    case 'run_failed': case 'run_cancelled': return e.reason;
    case 'control_refused': return `a forwarded ${e.command} was refused: ${e.reason}`;
    case 'message_received': return `${e.by} said (${e.policy}): ${e.text}`;
    default: return '';
  }
}
