#!/usr/bin/env node
// The model endpoint marked down and up by a person from the list of runs,
// in a real Chromium.
//
//   node tests/browser/endpoints.mjs PORT TOKEN ENDPOINT
//
// Driven step by step by
// `a_person_marks_the_model_endpoint_down_and_up_from_the_list_in_a_real_browser`
// (cli/tests/dashboard_browser.rs), which checks the server between the
// steps: the script prints `@STEP` when it has done one, and reads a line
// on its standard input when it must wait for the test.
//
// The list's Endpoints panel shows ENDPOINT (the executor's model) up; the
// script presses "Mark down" and sees the server's answer and the endpoint
// down, marked by the person (prints `@marked-down`). It reads the id of
// the run the test then starts, which waits paused on the endpoint; the
// panel counts it among the runs waiting, with a link to it, and the run's
// page says it waits for ENDPOINT to answer again and resumes by itself.
// Back on the list it presses "Mark up" and sees the answer say one run
// resumed (prints `@marked-up`); the run's page then reads "resumed:
// ENDPOINT answered again" in its trace and log, and shows the run
// completed.
//
// Prints one JSON line of what the page said, for the test to check, then
// "endpoints test passed" and exits 0; exits 1 saying what failed, with
// what the page showed and a screenshot in the OS's temporary folder.
// LEASEHOLD_ENDPOINTS_SCREENSHOTS=DIR also keeps screenshots of a pass
// there: the endpoint marked down with a run waiting, the run's page.
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';

const [port, token, endpoint] = process.argv.slice(2);
if (!port || !token || !endpoint) {
  console.error('usage: node tests/browser/endpoints.mjs PORT TOKEN ENDPOINT');
  process.exit(2);
}
const base = `http://127.0.0.1:${port}`;
const TOTAL_MS = 100_000;
const started = Date.now();
const left = () => Math.max(1_000, started + TOTAL_MS - Date.now());
const BY = 'a person on the dashboard';

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
const errors = [];
let step = 'opening the list';
let page = null;

/** Keeps a screenshot of the page as `name`.png, if asked to. */
async function keep(name) {
  const dir = process.env.LEASEHOLD_ENDPOINTS_SCREENSHOTS;
  if (!dir) return;
  const file = path.join(dir, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot: ${file}`);
}

function log(text) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)} s] ${text}`);
}

async function fail(error) {
  console.error(`endpoints test FAILED while ${step}: ${error && error.message ? error.message : error}`);
  if (page) {
    try {
      const text = await page.evaluate(() => document.body.innerText);
      console.error(`--- what the page showed (${page.url()}) ---`);
      console.error(text.length > 8000 ? `${text.slice(0, 8000)}\n…` : text);
      const shot = path.join(os.tmpdir(), `leasehold-endpoints-${process.pid}-${Date.now()}.png`);
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

// The test's lines, read one at a time when the script waits for it.
const input = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** The next line the test sends. */
async function told(what) {
  const { value, done } = await input.next();
  if (done) throw new Error(`the test closed its side before saying ${what}`);
  return value.trim();
}

/** The endpoint's row on the list, found by its name. */
const row = () => page.locator(`#endpoints-body tr[data-endpoint=${JSON.stringify(endpoint)}]`);

/** Waits until the endpoint's row says `up` (true or false) and its button reads `button`. */
async function rowShows(up, button) {
  await page.waitForFunction(
    ([name, wantUp, wantButton]) => {
      const tr = [...document.querySelectorAll('#endpoints-body tr')].find((r) => r.dataset.endpoint === name);
      return tr && tr.dataset.up === String(wantUp)
        && tr.querySelector('.status').textContent === (wantUp ? 'up' : 'down')
        && tr.querySelector('button').textContent === wantButton;
    },
    [endpoint, up, button],
    { timeout: left(), polling: 100 },
  ).catch(async (error) => {
    const shown = await row().count() ? await row().innerText() : 'no row';
    throw new Error(`the endpoint's row does not show ${up ? 'up' : 'down'} with "${button}" (it shows: ${shown}): ${error.message}`);
  });
}

/** Waits for the panel's answer to be `outcome` and hold `words`; its text, checked to be text only. */
async function answered(outcome, words) {
  await page.waitForFunction(
    ([want, text]) => {
      const box = document.querySelector('#endpoints-message');
      return box && !box.hidden && box.dataset.outcome === want && box.textContent.includes(text);
    },
    [outcome, words],
    { timeout: left(), polling: 100 },
  ).catch(async (error) => {
    const shown = await page.evaluate(() => {
      const box = document.querySelector('#endpoints-message');
      return box ? `${box.dataset.outcome}: ${box.textContent}` : 'nothing';
    });
    throw new Error(`the panel did not say ${outcome} "${words}" (it says ${shown}): ${error.message}`);
  });
  const { text, elements } = await page.evaluate(() => ({
    text: document.querySelector('#endpoints-message').textContent,
    elements: document.querySelectorAll('#endpoints-message *').length,
  }));
  if (elements) throw new Error(`the panel made markup of the server's words: ${text}`);
  return text;
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

/** Waits for a trace row and a log line of `kind` that read `words`; the row's text. */
async function traced(kind, words) {
  await page.waitForFunction(
    ([k, text]) => [...document.querySelectorAll(`#supervision-body tr.trace-row[data-kind="${k}"]`)]
      .some((r) => r.textContent.includes(text))
      && [...document.querySelectorAll(`#event-log li[data-kind="${k}"]`)].some((li) => li.textContent.includes(text)),
    [kind, words],
    { timeout: left(), polling: 100 },
  ).catch((error) => {
    throw new Error(`no ${kind} row and log line reading "${words}": ${error.message}`);
  });
  return page.evaluate(
    ([k, text]) => [...document.querySelectorAll(`#supervision-body tr.trace-row[data-kind="${k}"] td.why`)]
      .map((td) => td.textContent).find((t) => t.includes(text)),
    [kind, words],
  );
}

try {
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (error) => errors.push(`page error: ${error.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(`console: ${m.text()}`);
  });
  await page.goto(`${base}/?token=${encodeURIComponent(token)}#/`);
  const seen = {};

  step = 'reading the model endpoint on the list, up';
  log(step);
  await rowShows(true, 'Mark down');
  const waitingBefore = await row().locator('.endpoint-waiting').textContent();
  if (waitingBefore !== 'none') throw new Error(`before any run, the runs waiting read "${waitingBefore}"`);

  step = 'marking the endpoint down';
  log(step);
  await row().getByRole('button', { name: 'Mark down' }).click({ timeout: left() });
  seen.down_answer = await answered('done', `Marked down: ${endpoint}`);
  await rowShows(false, 'Mark up');
  const downBy = await row().locator('.endpoint-down-by').textContent();
  if (downBy !== BY) throw new Error(`the row says it was marked down by "${downBy}"`);
  seen.down_by = downBy;
  console.log('@marked-down');

  step = 'waiting for the test to start a run';
  log(step);
  const runId = await told('the run it started');
  if (!runId) throw new Error('the test sent no run id');

  step = 'reading the run among those waiting on the endpoint';
  log(step);
  const link = row().locator(`.endpoint-waiting a[data-run-id=${JSON.stringify(runId)}]`);
  await link.waitFor({ state: 'visible', timeout: left() });
  if ((await link.getAttribute('href')) !== `#/runs/${encodeURIComponent(runId)}`) {
    throw new Error(`the link to the run goes to ${await link.getAttribute('href')}`);
  }
  seen.waiting = await row().locator('.endpoint-waiting-count').textContent();
  await keep('marked-down');

  step = 'opening the waiting run from the panel';
  log(step);
  await link.click({ timeout: left() });
  await statusShown(runId, 'waiting_human');
  const title = `Waiting for ${endpoint} to answer again \u2014 it resumes by itself`;
  await page.waitForFunction(
    (want) => (document.querySelector('#pause-title')?.textContent || '') === want,
    title,
    { timeout: left(), polling: 100 },
  ).catch(async (error) => {
    throw new Error(`the pause reads "${await page.locator('#pause-title').textContent()}": ${error.message}`);
  });
  await page.locator('#pause-endpoint').waitFor({ state: 'visible', timeout: left() });
  seen.pause_title = await page.locator('#pause-title').textContent();
  seen.pause_subject = await page.locator('#pause-subject').textContent();
  seen.paused_row = await traced('paused', 'waiting for its endpoint to answer again');
  await keep('waiting-run');

  step = 'marking the endpoint up from the list';
  log(step);
  await page.locator('#run-view .back a').click({ timeout: left() });
  await rowShows(false, 'Mark up');
  await row().getByRole('button', { name: 'Mark up' }).click({ timeout: left() });
  seen.up_answer = await answered('done', `Marked up: ${endpoint}`);
  await rowShows(true, 'Mark down');
  console.log('@marked-up');

  step = 'reading the run resumed by its endpoint';
  log(step);
  await page.locator(`#runs-body a[data-run-id=${JSON.stringify(runId)}]`).click({ timeout: left() });
  seen.resumed_row = await traced('resumed', `resumed: ${endpoint} answered again`);
  await statusShown(runId, 'completed');

  step = 'checking that the page\'s script threw nothing';
  const thrown = errors.filter((e) => e.startsWith('page error'));
  if (thrown.length) throw new Error(`the page's script threw: ${thrown.join('; ')}`);

  console.log(JSON.stringify(seen));
  clearTimeout(guard);
  await browser.close();
  console.log('endpoints test passed');
  process.exit(0);
} catch (error) {
  clearTimeout(guard);
  await fail(error);
}
