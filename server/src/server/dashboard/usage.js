// What a run spent, from its view's `usage`: a line in the run's facts,
// and a table by role (the loops' model calls, the watchdog's and the
// budget checkpoints' evaluator calls) and by loop.

import { $, el, setText } from './dom.js';
import { counted } from './text.js';

const ROLES = [
  ['total', 'in all'],
  ['model', 'loops\u2019 model calls'],
  ['watchdog', 'watchdog\u2019s evaluator calls'],
  ['budget', 'budget checkpoints\u2019 evaluator calls'],
];

const num = (n) => Number(n || 0).toLocaleString('en');

/** The cost of `u`, with the calls it leaves out; '—' when none had a price. */
export function costText(u) {
  if (!u || !u.calls) return '—';
  if (u.unpriced_calls >= u.calls) return 'no price configured';
  const cost = Number(u.spent || 0).toFixed(6);
  return u.unpriced_calls ? `${cost} (${counted(u.unpriced_calls, 'call', num)} without a price)` : cost;
}

/** One line: tokens, calls, cost. */
export function spentText(u) {
  if (!u || !u.calls) return 'nothing yet';
  const here = u.counted_calls ? `, ${num(u.counted_calls)} counted here` : '';
  return `${counted(u.input_tokens + u.output_tokens, 'token', num)} (${num(u.input_tokens)} in, `
    + `${num(u.output_tokens)} out) over ${counted(u.calls, 'call', num)}${here}; cost ${costText(u)}`;
}

function row(cells, attrs) {
  return el('tr', attrs, cells.map((c, i) => el(i ? 'td' : 'th', null, c)));
}

export function renderUsage(view) {
  const usage = view && view.usage;
  const section = $('usage');
  setText($('run-spent'), usage ? spentText(usage.total) : '—');
  section.hidden = !usage || !usage.total || !usage.total.calls;
  if (section.hidden) return;
  const head = ['', 'calls', 'input tokens', 'output tokens', 'cost'];
  $('usage-roles').replaceChildren(
    el('thead', null, row(head)),
    el('tbody', null, ROLES.map(([key, name]) => {
      const u = usage[key] || {};
      return row([name, num(u.calls), num(u.input_tokens), num(u.output_tokens), costText(u)],
        { 'data-role': key });
    })),
  );
  $('usage-loops').replaceChildren(
    el('thead', null, row(['loop', 'model calls', 'model tokens', 'evaluator tokens', 'cost'])),
    el('tbody', null, (usage.loops || []).map((l) => {
      const evaluator = (l.watchdog.input_tokens + l.watchdog.output_tokens)
        + (l.budget.input_tokens + l.budget.output_tokens);
      const total = {
        calls: l.model.calls + l.watchdog.calls + l.budget.calls,
        spent: l.model.spent + l.watchdog.spent + l.budget.spent,
        unpriced_calls: l.model.unpriced_calls + l.watchdog.unpriced_calls
          + l.budget.unpriced_calls,
      };
      return row([el('code', null, l.path), num(l.model.calls),
        num(l.model.input_tokens + l.model.output_tokens), num(evaluator), costText(total)],
        { 'data-loop': l.path });
    })),
  );
}
