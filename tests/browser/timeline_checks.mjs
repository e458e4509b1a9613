// The run's timeline as a browser shows it, read from the page, and the
// checks every run's timeline must pass; shared by dashboard.mjs (a live
// demo run), timeline.mjs (a run replayed from the stored log) and
// hands.mjs (a run a person handles by hand).

/** Waits until the timeline has a tick for each row of the verdict table. */
export async function waitForTicks(page, timeout) {
  await page.waitForFunction(
    () => {
      const verdicts = document.querySelectorAll('tr.verdict-row').length;
      return verdicts > 0 && document.querySelectorAll('#timeline .tl-tick').length === verdicts;
    },
    null,
    { timeout, polling: 100 },
  );
}

/** What the timeline shows: rows and their bars, ticks, pauses. */
export async function readTimeline(page) {
  return page.evaluate(() => {
    const box = (node) => {
      const r = node.getBoundingClientRect();
      return { x: r.left, right: r.right, width: r.width };
    };
    const colour = (node) => getComputedStyle(node).color;
    const rows = [...document.querySelectorAll('#timeline .tl-row')].map((row) => ({
      path: row.dataset.path,
      kind: row.dataset.kind,
      label: row.querySelector('.tl-label').textContent,
      title: row.querySelector(':scope > title').textContent,
      bars: [...row.querySelectorAll('.tl-bar')].map((bar) => ({
        ...box(bar),
        attempt: bar.dataset.attempt ? Number(bar.dataset.attempt) : null,
        outcome: bar.dataset.outcome,
      })),
    }));
    const ticks = [...document.querySelectorAll('#timeline .tl-tick')].map((tick) => ({
      path: tick.closest('.tl-row').dataset.path,
      verdict: tick.dataset.verdict,
      decidedBy: tick.dataset.decidedBy,
      classes: tick.getAttribute('class'),
      mark: tick.querySelector('.tl-mark').getAttribute('class'),
      colour: colour(tick),
      x: tick.querySelector('.tl-tick-line').getBoundingClientRect().left,
      title: tick.querySelector('title').textContent,
    }));
    const tableColours = {};
    for (const span of document.querySelectorAll('#verdicts-body span.verdict')) {
      tableColours[span.textContent] = colour(span);
    }
    const verdictRows = {};
    for (const row of document.querySelectorAll('tr.verdict-row')) {
      verdictRows[row.dataset.verdict] = (verdictRows[row.dataset.verdict] || 0) + 1;
    }
    const pauses = [...document.querySelectorAll('#timeline .tl-pause')].map((pause) => ({
      ...box(pause),
      open: pause.dataset.open === 'true',
      title: pause.querySelector('title').textContent,
    }));
    const legend = [...document.querySelectorAll('#timeline-legend .tl-legend-item')].map((i) => i.textContent);
    return { rows, ticks, tableColours, verdictRows, pauses, legend };
  });
}

/**
 * The checks that hold for any run: a tick per verdict, coloured as the
 * verdict table colours it and marked by who decided; each attempt of a
 * restarted operation after the one before it; a legend naming each
 * verdict. Throws on the first that fails.
 */
export function checkTimeline(seen) {
  const fail = (message) => { throw new Error(`timeline: ${message}`); };
  if (!seen.rows.length) fail('no rows');
  const ticksBy = {};
  for (const tick of seen.ticks) {
    ticksBy[tick.verdict] = (ticksBy[tick.verdict] || 0) + 1;
    if (!tick.classes.split(' ').includes(`verdict-${tick.verdict}`)) {
      fail(`a ${tick.verdict} tick has the classes "${tick.classes}"`);
    }
    if (tick.colour !== seen.tableColours[tick.verdict]) {
      fail(`a ${tick.verdict} tick is coloured ${tick.colour}, the table's ${tick.verdict} ${seen.tableColours[tick.verdict]}`);
    }
    if (!tick.decidedBy || !tick.mark.split(' ').includes(`tl-mark-${tick.decidedBy}`)) {
      fail(`a tick decided by "${tick.decidedBy}" has the mark "${tick.mark}"`);
    }
  }
  if (JSON.stringify(sorted(ticksBy)) !== JSON.stringify(sorted(seen.verdictRows))) {
    fail(`ticks by verdict ${JSON.stringify(ticksBy)}, verdict rows ${JSON.stringify(seen.verdictRows)}`);
  }
  const colours = new Set(Object.keys(ticksBy).map((v) => seen.tableColours[v]));
  if (colours.size !== Object.keys(ticksBy).length) fail(`two verdicts share a colour: ${JSON.stringify(seen.tableColours)}`);
  for (const row of seen.rows) {
    for (let i = 1; i < row.bars.length; i += 1) {
      if (row.bars[i].x < row.bars[i - 1].right - 0.5) {
        fail(`${row.path}: bar ${i + 1} starts before bar ${i} ends`);
      }
    }
  }
  for (const verdict of ['RENEW', 'NUDGE', 'INTERVENE', 'ESCALATE']) {
    if (!seen.legend.includes(verdict)) fail(`the legend does not name ${verdict}`);
  }
  return ticksBy;
}

function sorted(counts) {
  return Object.fromEntries(Object.entries(counts).sort(([a], [b]) => a.localeCompare(b)));
}

/** The row at `path`, or a failure naming the rows there are. */
export function row(seen, path) {
  const found = seen.rows.find((r) => r.path === path);
  if (!found) throw new Error(`timeline: no row ${path}; rows: ${seen.rows.map((r) => r.path).join(', ')}`);
  return found;
}

/**
 * While the run waits for a person, nothing of it grows: every bar still
 * running (the run's, its loops' and steps') ends where the open pause's
 * shade begins, not at the clock. Throws if one does not.
 */
export function checkBarsStopAtOpenPause(seen) {
  const fail = (message) => { throw new Error(`timeline under a pause: ${message}`); };
  const open = seen.pauses.find((p) => p.open);
  if (!open) fail(`no open pause: ${JSON.stringify(seen.pauses)}`);
  const running = seen.rows.flatMap((r) => r.bars
    .filter((bar) => bar.outcome === 'running')
    .map((bar) => ({ path: r.path, ...bar })));
  if (!running.some((bar) => bar.path === 'run')) {
    fail(`the run has no running bar: ${JSON.stringify(running)}`);
  }
  for (const bar of running) {
    // A bar is at least 2 px wide.
    if (bar.right > Math.max(open.x, bar.x + 2) + 0.5) {
      fail(`${bar.path}: a running bar ends at x ${bar.right}, past the pause's start at x ${open.x} (shade ${open.width} px wide)`);
    }
  }
  return running.length;
}
