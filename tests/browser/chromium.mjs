// Chromium for the browser tests: playwright-core, found where
// scripts/peers.sh installs it (LEASEHOLD_PEER_PLAYWRIGHT, a node_modules
// folder), else through NODE_PATH or a local install; Debian's Chromium at
// LEASEHOLD_CHROMIUM (default /usr/bin/chromium), started headless with
// the flags this machine's closed network needs. A missing peer exits 1
// saying what to do.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

function loadPlaywright() {
  const dir = process.env.LEASEHOLD_PEER_PLAYWRIGHT;
  const attempts = [];
  if (dir) attempts.push(path.join(dir, 'leasehold-resolve.js'));
  attempts.push(import.meta.url); // NODE_PATH, or tests/browser/node_modules
  for (const from of attempts) {
    try {
      return createRequire(from)('playwright-core');
    } catch (_) {
      // try the next place
    }
  }
  console.error(
    'playwright-core was not found: run scripts/peers.sh, which installs it, and set ' +
      'LEASEHOLD_PEER_PLAYWRIGHT to the node_modules folder it prints ' +
      `(LEASEHOLD_PEER_PLAYWRIGHT=${dir || '(unset)'})`,
  );
  process.exit(1);
}

// playwright's `chromium` and the executable to give it.
export function chromiumPeer() {
  const { chromium } = loadPlaywright();
  const executablePath = process.env.LEASEHOLD_CHROMIUM || '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) {
    console.error(
      `Chromium was not found at ${executablePath}: install Debian's chromium ` +
        '(apt-get install -y --no-install-recommends chromium) or set LEASEHOLD_CHROMIUM',
    );
    process.exit(1);
  }
  return { chromium, executablePath };
}
