#!/usr/bin/env node
// Another site tries to drive a leasehold server through a real Chromium.
//
//   node tests/browser/cross_site.mjs SERVER_PORT MARKER
//
// Serves an "attacker" page of its own on 127.0.0.1 (another origin than the
// server's), under the name evil.test, and opens it in Chromium. The page
// does what any web page can do without asking: a text/plain fetch POST of
// a flow whose tool server is `sh -c "touch MARKER"` (mode no-cors: no
// preflight), an HTML form POST of the same flow, and a cross-site cancel.
// Then it plays DNS rebinding: the name rebind.test is resolved to
// 127.0.0.1 by the browser, so a page "of" rebind.test:SERVER_PORT talks to
// the server as same-origin, with `Host: rebind.test:SERVER_PORT`.
//
// Prints one JSON line `{"rebind_page": STATUS, "rebind_post": STATUS}`
// (what the browser saw for the rebinding page and its same-origin POST)
// and exits 0 once every request has been sent; the caller checks that the
// marker was never created and that the server holds no run. Exit 1 on a
// failure of the script itself, within 60 s.
import http from 'node:http';

import { CHROMIUM_ARGS, chromiumPeer } from './chromium.mjs';

const HOSTS = '--host-resolver-rules=MAP evil.test 127.0.0.1, MAP rebind.test 127.0.0.1';

const serverPort = Number(process.argv[2]);
const marker = process.argv[3];
if (!serverPort || !marker) {
  console.error('usage: node tests/browser/cross_site.mjs SERVER_PORT MARKER');
  process.exit(2);
}

const flow = JSON.stringify({
  name: 'attack',
  task: 'nothing',
  max_steps: 1,
  tools: [{ name: 'x', command: ['sh', '-c', `touch ${marker}`] }],
});
const target = `http://127.0.0.1:${serverPort}`;

// The attacker's page: every request a page may send without a preflight.
const page = `<!doctype html><html><body>
<form id="form" method="POST" enctype="text/plain" action="${target}/runs" target="sink">
  <input type="hidden" name='${flow.slice(0, -1)}, "x": "' value='"}'>
</form>
<iframe name="sink"></iframe>
<script>
  (async () => {
    const sent = [];
    sent.push(fetch(${JSON.stringify(target + '/runs')}, {
      method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' },
      body: ${JSON.stringify(flow)},
    }).catch(() => null));
    sent.push(fetch(${JSON.stringify(target + '/runs/any/cancel')}, {
      method: 'POST', mode: 'no-cors', body: '{}',
    }).catch(() => null));
    await Promise.all(sent);
    document.getElementById('form').submit();
    document.title = 'sent';
  })();
</script>
</body></html>`;

const attacker = http.createServer((request, response) => {
  response.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
  response.end(page);
});
await new Promise((resolve) => attacker.listen(0, '127.0.0.1', resolve));
const attackerPort = attacker.address().port;

const timer = setTimeout(() => {
  console.error('cross-site script: ran past 60 s');
  process.exit(1);
}, 60_000);

const { chromium, executablePath } = chromiumPeer();
const browser = await chromium.launch({ executablePath, args: [...CHROMIUM_ARGS, HOSTS] });
try {
  const context = await browser.newContext();
  const tab = await context.newPage();
  const formPosted = tab.waitForResponse((r) => r.url() === `${target}/runs`
    && r.request().method() === 'POST' && r.request().resourceType() === 'document');
  await tab.goto(`http://evil.test:${attackerPort}/`);
  await tab.waitForFunction(() => document.title === 'sent');
  await formPosted;

  // DNS rebinding: the page's own origin now resolves to the server.
  const rebound = await context.newPage();
  const landing = await rebound.goto(`http://rebind.test:${serverPort}/`);
  const rebindPage = landing ? landing.status() : 0;
  const rebindPost = await rebound.evaluate(async (body) => {
    const response = await fetch('/runs', {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body,
    });
    return response.status;
  }, flow);
  console.log(JSON.stringify({ rebind_page: rebindPage, rebind_post: rebindPost }));
} finally {
  await browser.close();
  attacker.close();
  clearTimeout(timer);
}
