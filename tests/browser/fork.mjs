#!/usr/bin/env node
// A fork made from a run's timeline in a real Chromium, as a person does it.
//
//   node tests/browser/fork.mjs PORT TOKEN PARENT_RUN_ID GUIDANCE
//
// The run PARENT_RUN_ID is the one
// `a_run_is_forked_from_its_timeline_and_compared_with_its_parent_in_a_real_browser`
// (cli/tests/dashboard_browser.rs) completes: step 1 charges (a tool call),
// step 2 answers. Opens its page, uses "Fork from here" on its step 2 with
// GUIDANCE, lands on the fork's page and checks its lineage (the parent's
// link, the loop and step, the guidance as text) and the charge marked
// replayed, not sent; waits for the fork to complete; opens "Compare with
// parent" and checks both columns, step by step and in total; then, back on
// the parent, asks for a fork at a loop the run never had and checks the
// server's refusal is shown as text, and that no page was left for it.
//
// Prints one JSON line, {"fork", "compare": {parent, fork}, "refused"}, for
// the test to check against the runs and the model's log, then "fork test
// passed" and exits 0; exits 1 saying what failed, with what the page
// showed and a screenshot in the OS's temporary folder.
// LEASEHOLD_FORK_SCREENSHOTS=DIR also keeps screenshots of a pass there:
// the fork's page, the comparison, the refusal.
import os from 'node:os';
import path from 'node:path';
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';

const [port, token, parent, guidance] = process.argv.slice(2);
if (!port || !token || !parent || !guidance) {
  console.error('usage: node tests/browser/fork.mjs PORT TOKEN PARENT_RUN_ID GUIDANCE');
  process.exit(2);
}
const TOTAL_MS = 90_000;
const started = Date.now();
const left = () => Math.max(1_000, started + TOTAL_MS - Date.now());
/** A fork point the parent never reached: a worker it never had. */
const NO_LOOP = 'run/worker:nobody:1:1';

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
const errors = [];
let step = 'opening the parent';
let page = null;

/** Keeps a screenshot of the page as `name`.png, if asked to. */
async function keep(name) {
  const dir = process.env.LEASEHOLD_FORK_SCREENSHOTS;
  if (!dir) return;
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot: ${file}`);
}

function log(message) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)} s] ${message}`);
}

async function fail(error) {
  console.error(`fork test FAILED while ${step}: ${error && error.message ? error.message : error}`);
  if (page) {
    try {
      const text = await page.evaluate(() => document.body.innerText);
      console.error(`--- what the page showed (${page.url()}) ---`);
      console.error(text.length > 8000 ? `${text.slice(0, 8000)}\n…` : text);
      const shot = path.join(os.tmpdir(), `leasehold-fork-${process.pid}-${Date.now()}.png`);
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

/** Waits until the run page shows run `id` with `status`. */
async function runShown(id, status) {
  await page.waitForFunction(
    ([want, wantStatus]) => document.querySelector('#run-id')?.textContent === want &&
      (document.querySelector('#run-status')?.textContent || '').trim() === wantStatus,
    [id, status],
    { timeout: left(), polling: 100 },
  );
}

/** Opens the fork form from the timeline's row of the root's step `n`. */
async function forkFromStep(n) {
  const button = page.getByRole('button', { name: `Fork from here: run step ${n}` });
  await button.waitFor({ state: 'visible', timeout: left() });
  await button.click({ timeout: left() });
  await page.locator('#fork-panel').waitFor({ state: 'visible', timeout: left() });
  const at = await page.locator('#fork-at').inputValue();
  if (at !== String(n)) throw new Error(`the form forks at "${at}", not "${n}"`);
}

try {
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') errors.push(`console: ${message.text()}`);
  });
  const parentPage = `#/runs/${encodeURIComponent(parent)}`;
  await page.goto(`http://127.0.0.1:${port}/?token=${encodeURIComponent(token)}${parentPage}`);
  await runShown(parent, 'completed');

  step = 'forking the parent from its step 2';
  log(step);
  await forkFromStep(2);
  await page.locator('#fork-guidance').fill(guidance, { timeout: left() });
  await page.locator('#fork-button').click({ timeout: left() });
  await page.waitForFunction(
    (from) => /^#\/runs\/[^/]+$/.test(window.location.hash) && window.location.hash !== from,
    parentPage,
    { timeout: left(), polling: 100 },
  );
  const fork = decodeURIComponent(new URL(page.url()).hash.slice('#/runs/'.length));
  log(`forked: ${fork}`);

  step = 'reading the fork\'s lineage';
  log(step);
  await page.locator('#lineage').waitFor({ state: 'visible', timeout: left() });
  await page.locator('#lineage-replayed .replayed-call').first().waitFor({ state: 'visible', timeout: left() });
  const lineage = await page.evaluate(() => ({
    parent: document.querySelector('#lineage-parent')?.textContent,
    href: document.querySelector('#lineage-parent')?.getAttribute('href'),
    loop: document.querySelector('#lineage-loop')?.textContent,
    step: document.querySelector('#lineage-step')?.textContent,
    guidance: document.querySelector('#lineage-guidance')?.textContent,
    replayed: [...document.querySelectorAll('#lineage-replayed .replayed-call')].map((li) => li.textContent),
    node: document.querySelector('li.node[data-path="run/tool_call:1.0"]')?.dataset.state,
    row: document.querySelector('#timeline .tl-row[data-path="run/tool_call:1.0"]')?.dataset.replayed,
    bar: document.querySelector('#timeline .tl-row[data-path="run/tool_call:1.0"] .tl-bar')?.dataset.outcome,
    started: [...document.querySelectorAll('#event-log li')].filter((li) => li.dataset.kind === 'tool_call_started').length,
  }));
  if (lineage.parent !== parent || lineage.href !== parentPage) {
    throw new Error(`the lineage names the parent "${lineage.parent}" (${lineage.href})`);
  }
  if (lineage.loop !== 'run' || lineage.step !== '2') {
    throw new Error(`the lineage says ${lineage.loop} step ${lineage.step}, not run step 2`);
  }
  if (lineage.guidance !== guidance) throw new Error(`the lineage's guidance is "${lineage.guidance}"`);
  if (lineage.replayed.length !== 1 || !lineage.replayed[0].includes('charge') ||
    !lineage.replayed[0].includes('replayed, not sent') || !lineage.replayed[0].includes(parent)) {
    throw new Error(`the inherited calls are ${JSON.stringify(lineage.replayed)}`);
  }
  if (lineage.node !== 'replayed' || lineage.row !== 'true' || lineage.bar !== 'replayed') {
    throw new Error(`the charge is not marked replayed in the tree and timeline: ${JSON.stringify(lineage)}`);
  }

  step = 'waiting for the fork to complete';
  log(step);
  await runShown(fork, 'completed');
  const sent = await page.locator('#event-log li[data-kind="tool_call_started"]').count();
  if (sent !== 0) throw new Error(`the fork's log shows ${sent} call(s) sent`);
  await keep('fork-page');

  step = 'comparing the fork with its parent';
  log(step);
  await page.getByRole('link', { name: 'Compare with parent' }).click({ timeout: left() });
  await page.locator('#compare-view').waitFor({ state: 'visible', timeout: left() });
  // Both streams read to their ends: each run's answer and final steps.
  await page.waitForFunction(
    () => ['parent', 'fork'].every((side) => {
      const cell = (key) => document.querySelector(`#compare-totals tr[data-total="${key}"] td[data-run="${side}"]`);
      return cell('status')?.textContent === 'completed' && cell('root_steps')?.textContent === '2' &&
        cell('answer')?.querySelector('.compare-answer');
    }),
    null,
    { timeout: left(), polling: 100 },
  );
  const compare = await page.evaluate(() => {
    const columns = {};
    for (const side of ['parent', 'fork']) {
      const column = {};
      for (const row of document.querySelectorAll('#compare-totals tbody tr')) {
        column[row.dataset.total] = row.querySelector(`td[data-run="${side}"]`).textContent;
      }
      column.heading = document.querySelector(`#compare-totals th[data-run="${side}"] a`)?.textContent;
      columns[side] = column;
    }
    const steps = [...document.querySelectorAll('#compare-steps tbody tr')].map((row) => {
      const cell = (side) => {
        const td = row.querySelector(`td[data-run="${side}"]`);
        return {
          models: [...td.querySelectorAll('.model')].map((m) => m.dataset.outcome),
          calls: [...td.querySelectorAll('.call')].map((c) => `${c.querySelector('strong').textContent}:${c.dataset.state}`),
          answer: td.querySelector('.note-answer')?.textContent || null,
          text: td.textContent,
        };
      };
      return { loop: row.dataset.loop, step: row.dataset.step, forkPoint: row.classList.contains('fork-point'), parent: cell('parent'), fork: cell('fork') };
    });
    return { columns, steps };
  });
  const { columns, steps } = compare;
  if (columns.parent.heading !== parent || columns.fork.heading !== fork) {
    throw new Error(`the columns are headed ${columns.parent.heading} and ${columns.fork.heading}`);
  }
  const places = steps.map((s) => `${s.loop}:${s.step}`).join(' ');
  if (places !== 'run:1 run:2') throw new Error(`the steps compared are ${places}`);
  const [one, two] = steps;
  if (one.parent.models.join() !== 'ok' || one.parent.calls.join() !== 'charge:sent') {
    throw new Error(`the parent's step 1 shows ${JSON.stringify(one.parent)}`);
  }
  if (one.fork.models.length || one.fork.calls.join() !== 'charge:replayed' || !one.fork.text.includes('inherited')) {
    throw new Error(`the fork's step 1 shows ${JSON.stringify(one.fork)}`);
  }
  if (!two.forkPoint) throw new Error('the fork point is not marked on step 2');
  for (const side of ['parent', 'fork']) {
    const cell = two[side];
    if (cell.models.join() !== 'ok' || cell.calls.length) {
      throw new Error(`the ${side}'s step 2 shows ${JSON.stringify(cell)}`);
    }
    if (cell.answer !== `answer: ${columns[side].answer}`) {
      throw new Error(`the ${side}'s step 2 answers "${cell.answer}", its total "${columns[side].answer}"`);
    }
  }
  if (columns.parent.answer === columns.fork.answer || !columns.fork.answer.endsWith(guidance)) {
    throw new Error(`the answers are "${columns.parent.answer}" and "${columns.fork.answer}"`);
  }
  for (const side of ['parent', 'fork']) {
    for (const key of ['input_tokens', 'output_tokens']) {
      if (!(Number(columns[side][key]) > 0)) throw new Error(`the ${side}'s ${key} are "${columns[side][key]}"`);
    }
  }
  log(`compared: ${JSON.stringify(columns)}`);
  await keep('compare');

  step = 'asking for a fork the server refuses';
  log(step);
  await page.locator('#compare-totals th[data-run="parent"] a').click({ timeout: left() });
  await runShown(parent, 'completed');
  await forkFromStep(2);
  await page.locator('#fork-at').fill(NO_LOOP, { timeout: left() });
  await page.locator('#fork-button').click({ timeout: left() });
  await page.locator('#fork-message').waitFor({ state: 'visible', timeout: left() });
  const refused = (await page.locator('#fork-message').textContent()) || '';
  if (!refused.includes('has no loop `run/worker:nobody:1`') || !refused.includes('`run` (steps 1 to 2)')) {
    throw new Error(`the refusal shown is "${refused}"`);
  }
  if (await page.locator('#fork-message *').count()) throw new Error('the refusal was made into markup');
  if (new URL(page.url()).hash !== parentPage) throw new Error(`a refused fork left the page for ${page.url()}`);
  await keep('refused');

  step = 'checking that text from the runs stayed text';
  const made = await page.evaluate(() => ({
    images: document.querySelectorAll('img').length,
    ran: window.__leaseholdHostile === true,
  }));
  if (made.images || made.ran) throw new Error(`run text became markup: ${JSON.stringify(made)}`);
  const thrown = errors.filter((e) => e.startsWith('page error'));
  if (thrown.length) throw new Error(`the page's script threw: ${thrown.join('; ')}`);

  console.log(JSON.stringify({ fork, compare: columns, refused }));
  clearTimeout(guard);
  await browser.close();
  console.log('fork test passed');
  process.exit(0);
} catch (error) {
  clearTimeout(guard);
  await fail(error);
}
