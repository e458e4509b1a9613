#!/usr/bin/env node
// A person's hands on a running run in a real Chromium, as a person uses
// them from the run's page.
//
//   node tests/browser/hands.mjs PORT TOKEN RUN_ID CALL_PATH LEASE MESSAGE
//
// The run RUN_ID is the one
// `a_person_handles_a_running_run_from_its_page_in_a_real_browser`
// (cli/tests/dashboard_browser.rs) posts: the demo's flow on a tool server
// that never answers, so its tool call at CALL_PATH hangs under the lease
// LEASE. From the page: the call's row on the timeline offers "extend ·
// stop" while the lease is in flight; the lease is extended by 30 s (a
// RENEW by the person, in the verdicts and on the timeline); MESSAGE is
// sent, enqueued, and shows in the trace as text; a `reject` message is
// refused while the run is busy, the refusal shown as text; the run is
// paused (its calls left to finish) and the server says it waits for a
// person; an extension is refused while its clocks are stopped, shown as
// text; it is resumed with guidance; the lease is stopped by hand (an
// INTERVENE by the person), its row offering the lease of the call made
// again; last, a `rollback` message forks the run, and the link shown
// opens the fork, whose lineage names the run.
//
// Reads the run over the API (with TOKEN) as well as on the page. Prints
// one JSON line, {"fork", "next_lease", "refusals"}, for the test to check
// against the run's log, then "hands test passed" and exits 0; exits 1
// saying what failed, with what the page showed and a screenshot in the
// OS's temporary folder. LEASEHOLD_HANDS_SCREENSHOTS=DIR also keeps
// screenshots of a pass there: the run's controls, the lease panel, the
// paused run, the rollback.
import os from 'node:os';
import path from 'node:path';
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';
import { checkTimeline, readTimeline, waitForTicks } from './timeline_checks.mjs';

const [port, token, runId, callPath, leaseArg, message] = process.argv.slice(2);
if (!port || !token || !runId || !callPath || !leaseArg || !message) {
  console.error('usage: node tests/browser/hands.mjs PORT TOKEN RUN_ID CALL_PATH LEASE MESSAGE');
  process.exit(2);
}
const lease = Number(leaseArg);
const base = `http://127.0.0.1:${port}`;
const TOTAL_MS = 100_000;
const started = Date.now();
const left = () => Math.max(1_000, started + TOTAL_MS - Date.now());
const BY = 'a person on the dashboard';
const PAUSE_REASON = 'a look at the index first';
const GUIDANCE = 'The index is fine: go on.';
const STOP_REASON = 'still hung';
const ROLLBACK = 'Start over with the new index.';

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
const errors = [];
let step = 'opening the run';
let page = null;

/** Keeps a screenshot of the page as `name`.png, if asked to. */
async function keep(name) {
  const dir = process.env.LEASEHOLD_HANDS_SCREENSHOTS;
  if (!dir) return;
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot: ${file}`);
}

function log(text) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)} s] ${text}`);
}

async function fail(error) {
  console.error(`hands test FAILED while ${step}: ${error && error.message ? error.message : error}`);
  if (page) {
    try {
      const text = await page.evaluate(() => document.body.innerText);
      console.error(`--- what the page showed (${page.url()}) ---`);
      console.error(text.length > 8000 ? `${text.slice(0, 8000)}\n…` : text);
      const shot = path.join(os.tmpdir(), `leasehold-hands-${process.pid}-${Date.now()}.png`);
      await page.screenshot({ path: shot, fullPage: true, timeout: 10_000 });
      console.error(`--- screenshot: ${shot}`);
    } catch (e) {
      console.error(`(the page could not be read: ${e.message})`);
    }
  }
  if (errors.length) console.error(`--- browser errors:\n${errors.join('\n')}`);
  await browser.close().catch(() => {});
  process.exit(1);
}

const guard = setTimeout(() => fail(new Error(`no result within ${TOTAL_MS / 1000} s`)), TOTAL_MS + 5_000);

/** `GET path` of the API with the token, as JSON. */
async function apiGet(route) {
  const response = await fetch(`${base}${route}`, { headers: { Authorization: `Bearer ${token}` } });
  if (!response.ok) throw new Error(`GET ${route}: ${response.status} ${await response.text()}`);
  return response.json();
}

/** The run's logged events, as `GET /runs/{id}/events?live=false` sends them. */
async function loggedEvents() {
  const response = await fetch(`${base}/runs/${encodeURIComponent(runId)}/events?live=false`, {
    headers: { Authorization: `Bearer ${token}` },
  });
  if (!response.ok) throw new Error(`GET events: ${response.status}`);
  const text = await response.text();
  return text.split('\n')
    .filter((line) => line.startsWith('data:'))
    .map((line) => { try { return JSON.parse(line.slice(5)); } catch (_) { return null; } })
    .filter((event) => event && typeof event.seq === 'number');
}

/** Polls `check` (async, a value or null) until it gives a value, within the deadline. */
async function until(what, check) {
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > started + TOTAL_MS) throw new Error(`waited for ${what}`);
    await new Promise((resolve) => { setTimeout(resolve, 100); });
  }
}

/** Waits until the page shows the run `id` with `status`. */
async function statusShown(id, status) {
  await page.waitForFunction(
    ([want, wantStatus]) => document.querySelector('#run-id')?.textContent === want &&
      (document.querySelector('#run-status')?.textContent || '').trim() === wantStatus,
    [id, status],
    { timeout: left(), polling: 100 },
  );
}

/**
 * Waits for the answer `selector` shows (`#hands-answer` or
 * `#lease-message`) to be `outcome` (`done`, `refused`) and to hold
 * `words`; its text, checked to be text only.
 */
async function answered(selector, outcome, words) {
  await page.waitForFunction(
    ([sel, want, text]) => {
      const box = document.querySelector(sel);
      return box && !box.hidden && box.dataset.outcome === want && box.textContent.includes(text);
    },
    [selector, outcome, words],
    { timeout: left(), polling: 100 },
  ).catch(async (error) => {
    const shown = await page.evaluate((sel) => {
      const box = document.querySelector(sel);
      return box ? `${box.dataset.outcome}: ${box.textContent}` : 'nothing';
    }, selector);
    throw new Error(`${selector} did not say ${outcome} "${words}" (it says ${shown}): ${error.message}`);
  });
  const textNode = selector === '#hands-answer' ? '#hands-answer-text' : selector;
  const { text, elements } = await page.evaluate((sel) => ({
    text: document.querySelector(sel).textContent,
    elements: document.querySelectorAll(`${sel} *`).length,
  }), textNode);
  if (elements) throw new Error(`${textNode} made markup of the server's words: ${text}`);
  return text;
}

/** Waits for a verdict row decided by the person: `verdict` on `path`. */
async function personsVerdict(verdict, where) {
  await page.locator(`#verdicts-body tr.verdict-row[data-decided-by="person"][data-verdict="${verdict}"][data-path="${where}"]`)
    .first().waitFor({ state: 'attached', timeout: left() });
}

/** The lease button on the call's row (the lease `id`, or any when null). */
function leaseButton(id) {
  const row = `#timeline .tl-row[data-path="${callPath}"]`;
  return page.locator(id === null ? `${row} .tl-lease` : `${row} .tl-lease[data-lease="${id}"]`);
}

try {
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  await page.goto(`${base}/?token=${encodeURIComponent(token)}#/runs/${encodeURIComponent(runId)}`);
  await statusShown(runId, 'running');
  const refusals = {};

  step = 'extending the hung call\'s lease from the timeline';
  log(step);
  const button = leaseButton(lease);
  await button.waitFor({ state: 'visible', timeout: left() });
  const name = await button.getAttribute('aria-label');
  if (!name || !name.startsWith(`Extend or stop lease:${lease} (tool `)) throw new Error(`the button is named "${name}"`);
  await page.getByRole('button', { name }).click({ timeout: left() });
  await page.locator('#lease-panel').waitFor({ state: 'visible', timeout: left() });
  const panel = await page.evaluate(() => ({
    lease: document.querySelector('#lease-panel').dataset.lease,
    id: document.querySelector('#lease-id').textContent,
    of: document.querySelector('#lease-of').textContent,
  }));
  if (panel.lease !== String(lease) || panel.id !== `lease:${lease}` || !panel.of.includes(callPath)) {
    throw new Error(`the lease panel shows ${JSON.stringify(panel)}`);
  }
  await page.getByLabel(/^Extend it by/).fill('30s', { timeout: left() });
  await page.getByRole('button', { name: 'Extend lease' }).click({ timeout: left() });
  await answered('#lease-message', 'done', `lease:${lease} now ends 30s later`);
  await personsVerdict('RENEW', callPath);
  await keep('extended');
  await until('the extension in the run\'s log', async () => (await loggedEvents()).find((e) =>
    e.kind === 'verdict' && e.lease_id === lease && e.decided_by === 'person' && e.verdict === 'RENEW'));

  step = 'sending an enqueued message';
  log(step);
  await page.getByLabel(/^Message/).fill(message, { timeout: left() });
  if (await page.locator('#message-policy').inputValue() !== 'enqueue') throw new Error('enqueue is not the default policy');
  await page.getByRole('button', { name: 'Send message' }).click({ timeout: left() });
  await answered('#hands-answer', 'done', 'Message taken');
  await page.waitForFunction(
    (text) => [...document.querySelectorAll('#supervision-body tr.trace-row[data-kind="message_received"]')]
      .some((row) => row.textContent.includes(text)),
    message,
    { timeout: left(), polling: 100 },
  );

  step = 'sending a message the busy run refuses';
  log(step);
  await page.getByLabel(/^Message/).fill('Are you there?', { timeout: left() });
  await page.getByLabel('How it is delivered').selectOption('reject', { timeout: left() });
  await page.getByRole('button', { name: 'Send message' }).click({ timeout: left() });
  refusals.reject = await answered('#hands-answer', 'refused', 'is busy (running)');
  if (!refusals.reject.startsWith('Not done: ')) throw new Error(`the refusal reads "${refusals.reject}"`);
  await keep('refused');

  step = 'pausing the run, its calls left to finish';
  log(step);
  await page.getByLabel(/^Why/).fill(PAUSE_REASON, { timeout: left() });
  if (!(await page.getByLabel('let calls in flight finish').isChecked())) {
    throw new Error('"let calls in flight finish" is not the default');
  }
  await page.getByRole('button', { name: 'Pause', exact: true }).click({ timeout: left() });
  await answered('#hands-answer', 'done', 'Paused');
  await statusShown(runId, 'waiting_human');
  const paused = await apiGet(`/runs/${encodeURIComponent(runId)}`);
  if (paused.status !== 'waiting_human') throw new Error(`the server says the run is ${paused.status}`);
  await page.locator('#pause-panel').waitFor({ state: 'visible', timeout: left() });
  await page.waitForFunction(
    (want) => (document.querySelector('#pause-reason')?.textContent || '') === want,
    `${BY} paused the run: ${PAUSE_REASON}`,
    { timeout: left(), polling: 100 },
  );
  if (await page.locator('#run-controls').isVisible()) throw new Error('a paused run still offers Pause');

  step = 'extending the lease while the run is paused';
  log(step);
  if (!(await leaseButton(lease).isVisible())) throw new Error('the call left to finish lost its lease button');
  await page.getByRole('button', { name: 'Extend lease' }).click({ timeout: left() });
  refusals.extend = await answered('#lease-message', 'refused', 'its clocks are stopped');
  await keep('paused');

  step = 'resuming the run';
  log(step);
  await page.locator('#guidance').fill(GUIDANCE, { timeout: left() });
  await page.locator('#resume-button').click({ timeout: left() });
  await statusShown(runId, 'running');
  if (await page.locator('#hands-answer').isVisible()) {
    throw new Error(`the run's controls still say "${await page.locator('#hands-answer').textContent()}" after the resume`);
  }

  step = 'stopping the hung call by hand';
  log(step);
  await page.getByLabel(/^Or stop its operation/).fill(STOP_REASON, { timeout: left() });
  await page.getByRole('button', { name: 'Stop it (intervene)' }).click({ timeout: left() });
  await answered('#lease-message', 'done', `the operation of lease:${lease} was stopped`);
  await personsVerdict('INTERVENE', callPath);
  await page.waitForFunction(
    () => (document.querySelector('#lease-state')?.textContent || '').startsWith('Ended'),
    null,
    { timeout: left(), polling: 100 },
  );
  // The call is made again under a lease of its own: its row offers that one.
  await page.waitForFunction(
    ([where, old]) => {
      const found = document.querySelector(`#timeline .tl-row[data-path="${where}"] .tl-lease`);
      return found && found.dataset.lease !== String(old);
    },
    [callPath, lease],
    { timeout: left(), polling: 100 },
  );
  const nextLease = Number(await leaseButton(null).getAttribute('data-lease'));

  step = 'checking the timeline marks the person\'s verdicts';
  await waitForTicks(page, left());
  const seen = await readTimeline(page);
  checkTimeline(seen);
  const byPerson = seen.ticks.filter((t) => t.decidedBy === 'person' && t.path === callPath).map((t) => t.verdict);
  if (byPerson.join() !== 'RENEW,INTERVENE') throw new Error(`the call's row shows ${byPerson.join()} by the person`);
  if (!seen.legend.includes('by a person, by hand')) throw new Error(`the legend is ${seen.legend.join(', ')}`);

  step = 'rolling the run back into a fork';
  log(step);
  await page.getByLabel(/^Message/).fill(ROLLBACK, { timeout: left() });
  await page.getByLabel('How it is delivered').selectOption('rollback', { timeout: left() });
  await page.getByRole('button', { name: 'Send message' }).click({ timeout: left() });
  await answered('#hands-answer', 'done', 'Rolled back');
  const link = page.locator('#rollback-link');
  await link.waitFor({ state: 'visible', timeout: left() });
  const fork = (await link.textContent()) || '';
  if (!fork || fork === runId || (await link.getAttribute('href')) !== `#/runs/${encodeURIComponent(fork)}`) {
    throw new Error(`the link to the fork is "${fork}" (${await link.getAttribute('href')})`);
  }
  await statusShown(runId, 'cancelled');
  if (!(await link.isVisible())) throw new Error('the link to the fork went with the run\'s controls');
  await keep('rolled-back');
  await link.click({ timeout: left() });
  await page.waitForFunction(
    ([want, parent]) => document.querySelector('#run-id')?.textContent === want &&
      document.querySelector('#lineage-parent')?.textContent === parent &&
      document.querySelector('#lineage-guidance')?.textContent === 'Start over with the new index.',
    [fork, runId],
    { timeout: left(), polling: 100 },
  );

  step = 'checking that text from the run stayed text';
  const made = await page.evaluate(() => ({
    images: document.querySelectorAll('img').length,
    ran: window.__leaseholdHostile === true,
  }));
  if (made.images || made.ran) throw new Error(`run text became markup: ${JSON.stringify(made)}`);
  const thrown = errors.filter((e) => e.startsWith('page error'));
  if (thrown.length) throw new Error(`the page's script threw: ${thrown.join('; ')}`);

  console.log(JSON.stringify({ fork, next_lease: nextLease, refusals }));
  clearTimeout(guard);
  await browser.close();
  console.log('hands test passed');
  process.exit(0);
} catch (error) {
  clearTimeout(guard);
  await fail(error);
}
