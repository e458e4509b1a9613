#!/usr/bin/env node
// A run's timeline in a real Chromium, replayed from the stored log.
//
//   node tests/browser/timeline.mjs PORT RUN_ID HOSTILE
//
// The run is the one `the_timeline_draws_a_stored_run_in_a_real_browser`
// (cli/tests/dashboard_browser.rs) writes: a streamed model call renewed
// by the ladder and by evidence and nudged by the evaluator; a tool, named
// HOSTILE, intervened by its policy's rule, restarted, renewed by the
// breaker and escalated; a pause of 3 s; a model call stopped by the renewal
// cap and retried. Checks a bar per operation, every attempt after the one
// before, a tick of each verdict with its colour and decider's mark, the
// pause shaded from the escalation to the resume, and HOSTILE shown as
// text: no element made of it, no script run.
//
// Exit 0 and "timeline test passed" on success; exit 1 saying what failed.
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';
import { checkTimeline, readTimeline, row } from './timeline_checks.mjs';

const [port, runId, hostile] = process.argv.slice(2);
if (!port || !runId || !hostile) {
  console.error('usage: node tests/browser/timeline.mjs PORT RUN_ID HOSTILE');
  process.exit(2);
}
const TIMEOUT = 60_000;

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
const errors = [];
let step = 'opening the run';
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(`http://127.0.0.1:${port}/#/runs/${encodeURIComponent(runId)}`);

  step = 'waiting for the replayed run';
  await page.waitForFunction(
    () => (document.querySelector('#run-status')?.textContent || '').trim() === 'completed' &&
      document.querySelectorAll('#timeline .tl-tick').length === 7,
    null,
    { timeout: TIMEOUT, polling: 100 },
  );

  step = 'reading the timeline';
  const seen = await readTimeline(page);
  const ticks = checkTimeline(seen);
  const expected = { ESCALATE: 1, INTERVENE: 2, NUDGE: 1, RENEW: 3 };
  for (const [verdict, count] of Object.entries(expected)) {
    if (ticks[verdict] !== count) throw new Error(`${ticks[verdict] || 0} ${verdict} ticks, not ${count}`);
  }
  const deciders = seen.ticks.map((t) => t.decidedBy).sort().join(' ');
  if (deciders !== 'breaker cap evaluator evaluator evidence ladder policy') {
    throw new Error(`the ticks were decided by ${deciders}`);
  }
  const paths = seen.rows.map((r) => r.path).join(' ');
  if (paths !== 'run run#step:1 run/model_call:1 run/tool_call:1.0 run#step:2 run/model_call:2') {
    throw new Error(`the rows are ${paths}`);
  }

  step = 'checking the restarted operations';
  const tool = row(seen, 'run/tool_call:1.0');
  const attempts = tool.bars.map((b) => `${b.attempt}:${b.outcome}`).join(' ');
  if (attempts !== '1:intervened 2:escalated') throw new Error(`the tool's bars are ${attempts}`);
  const model = row(seen, 'run/model_call:2');
  const modelAttempts = model.bars.map((b) => `${b.attempt}:${b.outcome}`).join(' ');
  if (modelAttempts !== '1:capped 2:ok') throw new Error(`the capped model call's bars are ${modelAttempts}`);

  step = 'checking the pause';
  if (seen.pauses.length !== 1 || seen.pauses[0].open) {
    throw new Error(`pauses: ${JSON.stringify(seen.pauses)}`);
  }
  const [pause] = seen.pauses;
  const escalated = tool.bars[1];
  if (Math.abs(pause.x - escalated.right) > 1.5) {
    throw new Error(`the pause starts at x ${pause.x}, the escalated attempt ends at ${escalated.right}`);
  }
  // 3 s of the run's 5.9 s; its resumed step starts where the pause ends.
  const stepTwo = row(seen, 'run#step:2').bars[0];
  if (Math.abs(pause.right - stepTwo.x) > 2) {
    throw new Error(`the pause ends at x ${pause.right}, the resumed step starts at ${stepTwo.x}`);
  }

  step = 'checking that event text is shown as text';
  if (!tool.label.includes('<img') || !tool.title.includes(hostile)) {
    throw new Error(`the tool's row does not show its name as text: "${tool.label}" / "${tool.title}"`);
  }
  const tick = seen.ticks.find((t) => t.verdict === 'INTERVENE' && t.decidedBy === 'policy');
  if (!tick.title.includes(hostile)) throw new Error(`the tick's title is "${tick.title}"`);
  if (!pause.title.includes(hostile)) throw new Error(`the pause's title is "${pause.title}"`);
  const made = await page.evaluate(() => ({
    images: document.querySelectorAll('img, #timeline img, svg img, image').length,
    ran: window.__leaseholdHostile === true,
  }));
  if (made.images || made.ran) throw new Error(`event text became markup: ${JSON.stringify(made)}`);
  if (errors.length) throw new Error(`the page's script threw: ${errors.join('; ')}`);

  console.log(`timeline: ${seen.rows.length} rows, ticks ${JSON.stringify(ticks)}, pause ${pause.width.toFixed(0)} px`);
  console.log('timeline test passed');
  await browser.close();
  process.exit(0);
} catch (error) {
  console.error(`timeline test FAILED while ${step}: ${error.message}`);
  if (errors.length) console.error(`page errors: ${errors.join('; ')}`);
  await browser.close().catch(() => {});
  process.exit(1);
}
