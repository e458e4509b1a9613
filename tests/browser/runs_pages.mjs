#!/usr/bin/env node
// The dashboard's list of runs, a page at a time, in a real Chromium.
//
//   node tests/browser/runs_pages.mjs SERVER_PORT TOTAL WAITING
//
// The server holds TOTAL runs, WAITING of them waiting_human. The script
// opens the list, sees one page (50 rows, newest first, a "more" button),
// presses "more" until it is gone and checks every run is shown once, in
// order; then keeps only waiting_human runs with the status filter and
// checks it shows exactly those. The oldest run's task is longer than a
// listing holds: its row shows the first 200 characters and an ellipsis, a
// short task shows whole. Above the list a line says the executor's live
// runs, admitted limit, lag and queue. Prints "runs pages test passed" and exits
// 0; exits 1 on a failure, within 60 s.
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';

const [port, total, waiting] = process.argv.slice(2).map(Number);
if (!port || !total || !waiting) {
  console.error('usage: node tests/browser/runs_pages.mjs SERVER_PORT TOTAL WAITING');
  process.exit(2);
}

const timer = setTimeout(() => {
  console.error('runs pages script: ran past 60 s');
  process.exit(1);
}, 60_000);

function check(ok, what) {
  if (!ok) throw new Error(what);
}

const rows = (tab) => tab.$$eval('#runs-body tr', (trs) => trs.map((tr) => ({
  id: tr.dataset.runId,
  status: tr.querySelector('.status').dataset.status,
  task: tr.querySelector('td.task').textContent,
})));

// Presses "more" until it is gone, each time waiting for the rows it adds;
// returns how many times it was pressed.
async function pressMoreUntilGone(tab) {
  let pressed = 0;
  while (await tab.isVisible('#runs-more')) {
    const shown = (await rows(tab)).length;
    await tab.click('#runs-more');
    await tab.waitForFunction(
      (n) => document.querySelectorAll('#runs-body tr').length > n,
      shown,
    );
    pressed += 1;
    check(pressed < 100, 'more pages than runs');
  }
  return pressed;
}

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, args: CHROMIUM_ARGS });
let failed = false;
try {
  const tab = await browser.newPage();
  await tab.goto(`http://127.0.0.1:${port}/`);
  await tab.waitForFunction(() => document.querySelectorAll('#runs-body tr').length > 0);
  const first = await rows(tab);
  check(first.length === 50, `one page of 50 runs, got ${first.length}`);
  check(await tab.isVisible('#runs-more'), 'a "more" button under a full page');

  // Above the list, one line on this executor: its live runs under its
  // admitted limit, its lag against the target and the bound, the queue.
  // The limit is what admission made of the machine's load so far (halved
  // by a late start), so any limit up to the ceiling is right.
  await tab.waitForFunction(() => document.getElementById('executor-load').textContent !== '');
  const load = await tab.textContent('#executor-load');
  check(
    /^this executor: 0 live of an admitted limit of ([1-9]|[1-5]\d|6[0-4]) \(at most 64\) · lag \d+ ms \(admission target 100 ms, lease load bound 250 ms\) · 0 queued in the store$/.test(load),
    `the executor's line: ${load}`,
  );

  const pages = 1 + (await pressMoreUntilGone(tab));
  const all = (await rows(tab)).map((r) => r.id);
  check(all.length === total, `every run shown: ${all.length} of ${total}`);
  check(new Set(all).size === total, 'no run shown twice');
  const sorted = [...all].sort().reverse();
  check(all.every((id, i) => id === sorted[i]), 'newest first');
  const tasks = new Map((await rows(tab)).map((r) => [r.id, r.task]));
  const long = tasks.get('run-00000');
  check(
    [...long].length === 201 && long.endsWith('…') && long.startsWith('task 0 é') && !long.includes('the end'),
    `a long task is cut to 200 characters and an ellipsis: ${long.length} characters`,
  );
  check(tasks.get('run-00001') === 'task 1', `a short task is whole: ${tasks.get('run-00001')}`);

  await tab.selectOption('#runs-status', 'waiting_human');
  await tab.waitForFunction(() => {
    const trs = [...document.querySelectorAll('#runs-body tr')];
    return trs.length > 0
      && trs.every((tr) => tr.querySelector('.status').dataset.status === 'waiting_human');
  });
  await pressMoreUntilGone(tab);
  const held = await rows(tab);
  check(held.length === waiting, `the waiting runs: ${held.length} of ${waiting}`);
  check(held.every((r) => r.status === 'waiting_human'), 'only waiting runs');
  console.log(`runs pages test passed (${pages} pages)`);
} catch (error) {
  failed = true;
  console.error(`runs pages script: ${error.stack || error}`);
} finally {
  await browser.close();
  clearTimeout(timer);
}
process.exit(failed ? 1 : 0);
