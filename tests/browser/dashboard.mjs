#!/usr/bin/env node
// The dashboard in a real Chromium, as a person uses it.
//
//   node tests/browser/dashboard.mjs BASE_URL [RUN_ID]
//
// Opens BASE_URL, opens the run RUN_ID from the list (the first run when none
// is given), and checks that a wait banner appears on a node and is cleared
// by the evidence that follows; that the paused run shows its pause panel,
// and that no bar of its timeline grows under the open pause's shade;
// that guidance typed there and sent with the resume button reaches the run;
// and that the run then completes and shows its answer; then that its
// timeline shows the demo's operations as bars, the retried tool's second
// attempt after the killed one, a tick per verdict and the pause shaded.
//
// playwright-core is found in LEASEHOLD_PEER_PLAYWRIGHT (a node_modules
// folder, as scripts/peers.sh prints it), else through NODE_PATH or a local
// install. Chromium is LEASEHOLD_CHROMIUM (default /usr/bin/chromium).
//
// Exit 0 and "dashboard test passed" on success; on failure, exit 1 after
// printing what the page showed and the path of a screenshot (in the OS's
// temporary folder). All of it within 60 s (LEASEHOLD_DASHBOARD_TIMEOUT_MS);
// LEASEHOLD_DASHBOARD_SCREENSHOT=FILE also keeps a screenshot of a pass.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';
import {
  checkBarsStopAtOpenPause, checkTimeline, readTimeline, row, waitForTicks,
} from './timeline_checks.mjs';

const TOTAL_MS = Number(process.env.LEASEHOLD_DASHBOARD_TIMEOUT_MS || 60_000);
const GUIDANCE = 'Do not roll back: the fix is already deploying. Report the deploy status.';

const base = process.argv[2];
const wantedRun = process.argv[3] || null;
if (!base) {
  console.error('usage: node tests/browser/dashboard.mjs BASE_URL [RUN_ID]');
  process.exit(2);
}

const { chromium, executablePath } = chromiumPeer();

const started = Date.now();
const deadline = started + TOTAL_MS;
const left = () => Math.max(1_000, deadline - Date.now());
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'leasehold-chromium-'));
const seen = []; // console errors and page errors, for the failure report
let step = 'launching Chromium';
let context = null;
let page = null;

function log(message) {
  const s = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`[${s.padStart(5)} s] ${message}`);
}

async function cleanUp() {
  if (context) await context.close().catch(() => {});
  context = null;
  fs.rmSync(userDataDir, { recursive: true, force: true });
}

async function fail(error) {
  console.error(`dashboard test FAILED while ${step}: ${error && error.message ? error.message : error}`);
  if (page) {
    try {
      const text = await page.evaluate(() => document.body.innerText);
      console.error(`--- what the page showed (${page.url()}) ---`);
      console.error(text.length > 8000 ? `${text.slice(0, 8000)}\n…` : text);
      const banners = await page.evaluate(() => window.__leaseholdBanners || []);
      console.error(`--- wait banners seen: ${JSON.stringify(banners.slice(-40))}`);
    } catch (e) {
      console.error(`(the page's text could not be read: ${e.message})`);
    }
    try {
      const shot = path.join(os.tmpdir(), `leasehold-dashboard-${process.pid}-${Date.now()}.png`);
      await page.screenshot({ path: shot, fullPage: true, timeout: 10_000 });
      console.error(`--- screenshot: ${shot}`);
    } catch (e) {
      console.error(`(no screenshot: ${e.message})`);
    }
  }
  if (seen.length) console.error(`--- browser errors:\n${seen.slice(-30).join('\n')}`);
  await cleanUp();
  process.exit(1);
}

// A hard stop, whatever hangs.
const guard = setTimeout(() => fail(new Error(`no result within ${TOTAL_MS / 1000} s`)), TOTAL_MS + 5_000);

// Runs in the page before its own script: records every wait banner added to
// or removed from the document, so one that lives a few milliseconds between
// two events is still seen.
function recordBanners() {
  const banners = [];
  window.__leaseholdBanners = banners;
  const note = (node, what) => {
    if (node.nodeType !== 1) return;
    const found = node.matches('.wait-banner') ? [node] : [];
    found.push(...node.querySelectorAll('.wait-banner'));
    for (const banner of found) {
      banners.push({ what, path: banner.dataset.path || '', t: performance.now() });
    }
  };
  new MutationObserver((records) => {
    for (const record of records) {
      for (const node of record.addedNodes) note(node, 'shown');
      for (const node of record.removedNodes) note(node, 'cleared');
    }
  }).observe(document, { childList: true, subtree: true });
  // A path whose banner was shown and then cleared, or null.
  window.__leaseholdBannerCleared = () => {
    const shown = new Map();
    for (const b of banners) {
      if (b.what === 'shown') shown.set(b.path, b.t);
      else if (shown.has(b.path)) return { path: b.path, shownMs: b.t - shown.get(b.path) };
    }
    return null;
  };
}

const statusIs = (status) =>
  (document.querySelector('#run-status')?.textContent || '').trim() === status;

try {
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
    timeout: left(),
  });
  page = context.pages()[0] || (await context.newPage());
  page.on('pageerror', (error) => seen.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') seen.push(`console: ${message.text()}`);
  });
  await page.addInitScript(recordBanners);

  step = `opening ${base}`;
  log(step);
  await page.goto(base, { waitUntil: 'domcontentloaded', timeout: left() });

  step = wantedRun ? `finding run ${wantedRun} in the list` : 'finding a run in the list';
  log(step);
  const link = wantedRun
    ? page.locator(`a.run-link[data-run-id="${wantedRun.replace(/["\\]/g, '\\$&')}"]`)
    : page.locator('a.run-link').first();
  await link.waitFor({ state: 'visible', timeout: left() });
  const runId = await link.getAttribute('data-run-id');

  step = `opening run ${runId}`;
  log(step);
  await link.click({ timeout: left() });
  await page.waitForFunction(
    (id) => document.querySelector('#run-id')?.textContent === id &&
      (document.querySelector('#run-status')?.textContent || '').trim() !== '…',
    runId,
    { timeout: left() },
  );
  await page.locator('li.node[data-path="run"]').waitFor({ state: 'attached', timeout: left() });

  step = 'waiting for a wait banner that evidence then clears, or for the pause';
  log(step);
  await page.waitForFunction(
    () => {
      const panel = document.querySelector('#pause-panel');
      return window.__leaseholdBannerCleared() || (panel && !panel.hidden);
    },
    null,
    { timeout: left(), polling: 100 },
  );

  step = 'waiting for the pause panel';
  log(step);
  await page.locator('#pause-panel').waitFor({ state: 'visible', timeout: left() });
  const reason = (await page.locator('#pause-reason').textContent()) || '';
  const subject = (await page.locator('#pause-subject').textContent()) || '';
  if (!reason.trim() || !subject.trim()) {
    throw new Error(`the pause panel shows no reason or subject (reason "${reason}", subject "${subject}")`);
  }
  log(`paused: ${subject}: ${reason}`);

  step = 'checking that no bar grows under the open pause';
  log(step);
  await page.waitForFunction(
    () => {
      const shade = document.querySelector('#timeline .tl-pause[data-open="true"]');
      return shade && shade.getBoundingClientRect().width >= 20;
    },
    null,
    { timeout: left(), polling: 100 },
  );
  const stopped = checkBarsStopAtOpenPause(await readTimeline(page));
  log(`${stopped} running bars end where the pause began`);

  step = 'resuming with guidance';
  log(step);
  await page.locator('#guidance').fill(GUIDANCE, { timeout: left() });
  await page.locator('#resume-button').click({ timeout: left() });
  await page.locator('#pause-panel').waitFor({ state: 'hidden', timeout: left() });

  step = 'waiting for the run to complete';
  log(step);
  await page.waitForFunction(statusIs, 'completed', { timeout: left(), polling: 100 });

  step = 'checking the completed run';
  const answer = (await page.locator('#run-answer-text').textContent({ timeout: left() })) || '';
  if (!answer.trim()) throw new Error('the completed run shows no answer');
  await page
    .locator('tr.trace-row[data-kind="resumed"]', { hasText: GUIDANCE })
    .first()
    .waitFor({ state: 'attached', timeout: left() });
  const verdicts = await page.locator('tr.verdict-row').count();
  if (verdicts === 0) throw new Error('the verdict trace is empty');
  const cleared = await page.evaluate(() => window.__leaseholdBannerCleared());
  if (!cleared) throw new Error('no wait banner was shown and then cleared on any node');
  const leftOver = await page.locator('.wait-banner').count();
  if (leftOver !== 0) throw new Error(`${leftOver} wait banner(s) still shown on a completed run`);
  if (seen.some((s) => s.startsWith('page error'))) {
    throw new Error(`the page's script threw: ${seen.filter((s) => s.startsWith('page error')).join('; ')}`);
  }
  log(`banner on ${cleared.path} cleared after ${cleared.shownMs.toFixed(1)} ms; ` +
    `${verdicts} verdicts; answer: ${answer.trim()}`);

  step = 'checking what the run spent';
  log(step);
  const view = await page.evaluate(async (id) => {
    const { api } = await import('/assets/api.js');
    return api('GET', `/runs/${encodeURIComponent(id)}`);
  }, runId);
  const usage = view.usage;
  if (!usage || !usage.total.calls) throw new Error(`the API gives no usage: ${JSON.stringify(view)}`);
  const cost = Number(usage.total.spent).toFixed(6);
  const tokens = (usage.total.input_tokens + usage.total.output_tokens).toLocaleString('en');
  await page.waitForFunction(([c, t]) => {
    const text = document.getElementById('run-spent').textContent;
    return text.includes(`cost ${c}`) && text.includes(`${t} tokens`);
  }, [cost, tokens], { timeout: left(), polling: 100 }).catch(async () => {
    const shown = await page.locator('#run-spent').textContent();
    throw new Error(`the page says it spent "${shown}", the API ${tokens} tokens and ${cost}`);
  });
  const watchdogCalls = await page.locator('#usage-roles tr[data-role="watchdog"] td').first().textContent();
  if (Number(watchdogCalls.replace(/,/g, '')) !== usage.watchdog.calls) {
    throw new Error(`the watchdog's calls shown ${watchdogCalls}, the API ${usage.watchdog.calls}`);
  }
  const workerRows = await page.locator('#usage-loops tr[data-loop^="run/worker:"]').count();
  if (workerRows < 3) throw new Error(`${workerRows} worker loops in the usage table, 3 expected`);
  log(`spent: ${await page.locator('#run-spent').textContent()}`);

  step = 'checking the timeline';
  log(step);
  await waitForTicks(page, left());
  const timeline = await readTimeline(page);
  const ticks = checkTimeline(timeline);
  for (const verdict of ['RENEW', 'INTERVENE', 'ESCALATE']) {
    if (!ticks[verdict]) throw new Error(`the timeline has no ${verdict} tick: ${JSON.stringify(ticks)}`);
  }
  for (const path of ['run', 'run/worker:logs:1', 'run/worker:metrics:2', 'run/worker:deploys:3']) {
    if (!row(timeline, path).bars.length) throw new Error(`the timeline's ${path} has no bar`);
  }
  const retried = row(timeline, 'run/worker:metrics:2/tool_call:1.0');
  const attempts = retried.bars.map((b) => `${b.attempt}:${b.outcome}`).join(' ');
  if (attempts !== '1:intervened 2:ok') {
    throw new Error(`the retried tool's bars are "${attempts}", not its killed attempt then its second`);
  }
  const running = timeline.rows.filter((r) => r.bars.some((b) => b.outcome === 'running'));
  if (running.length) throw new Error(`bars still running on a completed run: ${running.map((r) => r.path).join(', ')}`);
  if (timeline.pauses.length !== 1 || timeline.pauses[0].open || timeline.pauses[0].width < 1) {
    throw new Error(`the pause is not shaded once, closed: ${JSON.stringify(timeline.pauses)}`);
  }
  // The band starts at the `paused` event, which a live run writes a few
  // milliseconds after the ESCALATE verdict (more on a loaded machine): at
  // the escalation's tick or after it, and before any later verdict of
  // the escalated operation (the other operations' leases may still tick
  // in between).
  const escalate = timeline.ticks.find((t) => t.verdict === 'ESCALATE');
  const later = timeline.ticks
    .filter((t) => t.path === escalate.path && t.x > escalate.x + 0.5)
    .map((t) => t.x);
  const pauseX = timeline.pauses[0].x;
  if (pauseX < escalate.x - 1 || pauseX > Math.min(...later)) {
    throw new Error(`the pause starts at x ${pauseX}, the escalation at ${escalate.x}, the next verdict at ${Math.min(...later)}`);
  }
  log(`timeline: ${timeline.rows.length} rows, ticks ${JSON.stringify(ticks)}, pause ${timeline.pauses[0].width.toFixed(0)} px`);

  const keep = process.env.LEASEHOLD_DASHBOARD_SCREENSHOT;
  if (keep) {
    await page.screenshot({ path: keep, fullPage: true });
    log(`screenshot: ${keep}`);
  }
  clearTimeout(guard);
  await cleanUp();
  console.log('dashboard test passed');
  process.exit(0);
} catch (error) {
  clearTimeout(guard);
  await fail(error);
}
