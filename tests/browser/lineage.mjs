#!/usr/bin/env node
// A stored fork of a worker's step in a real Chromium: its lineage and its
// parent beside it.
//
//   node tests/browser/lineage.mjs PORT PARENT_RUN_ID FORK_RUN_ID HOSTILE
//
// The runs are the ones
// `a_stored_fork_of_a_worker_step_shows_its_lineage_and_its_parent_side_by_side_in_a_real_browser`
// (cli/tests/dashboard_browser.rs) stores: the parent's root spawns a
// researcher that searches in its step 1 and answers in its step 2; the
// fork starts at the researcher's step 2, with guidance, two changes and
// two answers a person had given the parent, one of them HOSTILE, and
// replays the search, whose result a person gave. Checks the lineage (the
// loop, the step, the changes, the answers, the replayed call said to be a
// person's), the comparison's rows for both loops and its totals (steps,
// verdicts by verdict, tokens, answers), the fork form's point for a
// worker's step (`PATH:N`) and its refusal, and HOSTILE shown as text.
//
// Exit 0 and "lineage test passed" on success; exit 1 saying what failed.
// LEASEHOLD_FORK_SCREENSHOTS=DIR also keeps screenshots of a pass there.
import path from 'node:path';
import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';

const [port, parent, fork, hostile] = process.argv.slice(2);
if (!port || !parent || !fork || !hostile) {
  console.error('usage: node tests/browser/lineage.mjs PORT PARENT_RUN_ID FORK_RUN_ID HOSTILE');
  process.exit(2);
}
const TIMEOUT = 60_000;
const WORKER = 'run/worker:researcher:1';

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, headless: true, args: CHROMIUM_ARGS });
const errors = [];
let step = 'opening the fork';
let page = null;

/** Keeps a screenshot of the page as `name`.png, if asked to. */
async function keep(name) {
  const dir = process.env.LEASEHOLD_FORK_SCREENSHOTS;
  if (dir) await page.screenshot({ path: path.join(dir, `${name}.png`), fullPage: true });
}

const same = (what, got, want) => {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(`${what}: ${JSON.stringify(got)}, not ${JSON.stringify(want)}`);
  }
};

try {
  page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.on('pageerror', (error) => errors.push(error.message));
  await page.goto(`http://127.0.0.1:${port}/#/runs/${encodeURIComponent(fork)}`);
  await page.waitForFunction(
    () => (document.querySelector('#run-status')?.textContent || '').trim() === 'completed' &&
      document.querySelectorAll('#lineage-replayed .replayed-call').length === 1 &&
      document.querySelector('#lineage-answers'),
    null,
    { timeout: TIMEOUT, polling: 100 },
  );

  step = 'reading the lineage';
  const lineage = await page.evaluate(() => ({
    parent: document.querySelector('#lineage-parent')?.textContent,
    loop: document.querySelector('#lineage-loop')?.textContent,
    step: document.querySelector('#lineage-step')?.textContent,
    guidance: document.querySelector('#lineage-guidance')?.textContent,
    changes: [...document.querySelectorAll('#lineage-changes li')].map((li) => li.textContent),
    answers: [...document.querySelectorAll('#lineage-answers li')].map((li) => li.textContent),
    replayed: document.querySelector('#lineage-replayed .replayed-call')?.textContent,
    node: document.querySelector('li.node[data-path="run/worker:researcher:1/tool_call:1.0"]')?.dataset.state,
  }));
  same('the parent', lineage.parent, parent);
  same('the loop and step', [lineage.loop, lineage.step], [WORKER, '2']);
  same('the guidance', lineage.guidance, `Check the disk. ${hostile}`);
  same('the changes', lineage.changes, ['leases.tool_call=30s', 'max_steps=12']);
  same('what people had answered', lineage.answers, ['Use the staging logs.', hostile]);
  if (!lineage.replayed.includes('search') || !lineage.replayed.includes('given by a person')) {
    throw new Error(`the replayed call reads "${lineage.replayed}"`);
  }
  same('the replayed call in the tree', lineage.node, 'replayed');
  await keep('lineage-fork');

  step = 'comparing with the parent';
  await page.getByRole('link', { name: 'Compare with parent' }).click({ timeout: TIMEOUT });
  await page.waitForFunction(
    () => ['parent', 'fork'].every((side) =>
      document.querySelector(`#compare-totals tr[data-total="root_steps"] td[data-run="${side}"]`)?.textContent === '2'),
    null,
    { timeout: TIMEOUT, polling: 100 },
  );
  const compare = await page.evaluate(() => {
    const totals = {};
    for (const row of document.querySelectorAll('#compare-totals tbody tr')) {
      totals[row.dataset.total] = ['parent', 'fork'].map((side) => {
        const td = row.querySelector(`td[data-run="${side}"]`);
        const verdicts = td.querySelector('[data-text]');
        return verdicts ? verdicts.dataset.text : td.textContent;
      });
    }
    const rows = [...document.querySelectorAll('#compare-steps tbody tr')].map((row) => ({
      at: `${row.dataset.loop}:${row.dataset.step}`,
      forkPoint: row.classList.contains('fork-point'),
      cells: ['parent', 'fork'].map((side) => {
        const td = row.querySelector(`td[data-run="${side}"]`);
        return {
          calls: [...td.querySelectorAll('.call')].map((c) => c.dataset.state),
          verdicts: [...td.querySelectorAll('.verdict')].map((v) => v.textContent),
          notes: [...td.querySelectorAll('.note')].map((n) => n.textContent),
          text: td.textContent,
        };
      }),
    }));
    return { totals, rows };
  });
  const { totals, rows } = compare;
  same('the statuses', totals.status, ['completed', 'completed']);
  same('the answers', totals.answer, ['The disk is full.', 'The disk is not full.']);
  same('the steps run', totals.steps, ['4', '2']);
  same('the calls sent', totals.calls_sent, ['1', '0']);
  same('the calls replayed', totals.calls_replayed, ['0', '1']);
  same('the verdicts', totals.verdicts, ['RENEW 1 · NUDGE 1', 'INTERVENE 1']);
  same('the input tokens', totals.input_tokens, ['330', '200']);
  same('the output tokens', totals.output_tokens, ['33', '20']);
  same('the rows', rows.map((r) => r.at), ['run:1', 'run:2', `${WORKER}:1`, `${WORKER}:2`]);
  const at = (place) => rows.find((r) => r.at === place);
  same('the fork point', rows.filter((r) => r.forkPoint).map((r) => r.at), [`${WORKER}:2`]);
  const [rootOne, workerOne, workerTwo] = [at('run:1'), at(`${WORKER}:1`), at(`${WORKER}:2`)];
  if (!rootOne.cells[0].notes.some((n) => n.includes('spawned researcher')) || !rootOne.cells[1].text.includes('inherited')) {
    throw new Error(`the root's step 1 reads ${JSON.stringify(rootOne.cells)}`);
  }
  same('the researcher\'s step 1 calls', workerOne.cells.map((c) => c.calls), [['sent'], ['replayed']]);
  same('the researcher\'s step 2 verdicts', workerTwo.cells.map((c) => c.verdicts), [['NUDGE 1'], ['INTERVENE 1']]);
  same('the researcher\'s step 2 results', workerTwo.cells.map((c) => c.notes),
    [['worker ok: the disk is full'], ['worker ok: the disk is not full']]);
  await keep('lineage-compare');

  step = 'forking the parent from the researcher\'s step 2';
  await page.locator('#compare-totals th[data-run="parent"] a').click({ timeout: TIMEOUT });
  const button = page.getByRole('button', { name: `Fork from here: ${WORKER} step 2` });
  await button.click({ timeout: TIMEOUT });
  same('the fork point of a worker\'s step', await page.locator('#fork-at').inputValue(), `${WORKER}:2`);
  await page.locator('#fork-button').click({ timeout: TIMEOUT });
  await page.locator('#fork-message').waitFor({ state: 'visible', timeout: TIMEOUT });
  const refused = (await page.locator('#fork-message').textContent()) || '';
  if (!refused.includes('cannot fork there') || !refused.includes(`has no loop \`${WORKER}\``)) {
    throw new Error(`the refusal reads "${refused}"`);
  }

  step = 'checking that text from the runs stayed text';
  const made = await page.evaluate(() => ({
    images: document.querySelectorAll('img').length,
    ran: window.__leaseholdHostile === true,
  }));
  if (made.images || made.ran) throw new Error(`run text became markup: ${JSON.stringify(made)}`);
  if (errors.length) throw new Error(`the page's script threw: ${errors.join('; ')}`);

  console.log(`lineage: ${JSON.stringify(lineage)}`);
  console.log(`compared: ${JSON.stringify(totals)}`);
  console.log(`refused: ${refused}`);
  console.log('lineage test passed');
  await browser.close();
  process.exit(0);
} catch (error) {
  console.error(`lineage test FAILED while ${step}: ${error.message}`);
  if (page) {
    const text = await page.evaluate(() => document.body.innerText).catch(() => '');
    console.error(`--- what the page showed (${page.url()}) ---\n${text.slice(0, 8000)}`);
  }
  if (errors.length) console.error(`page errors: ${errors.join('; ')}`);
  await browser.close().catch(() => {});
  process.exit(1);
}
