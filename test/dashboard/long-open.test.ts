import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { MAX_SOCKETS_PER_ADDRESS } from '../../src/dashboard/dashboard.js';
import { HEARTBEAT_MS, SILENT_BEATS } from '../../src/dashboard/dashboard-heartbeat.js';
import { freePort } from '../support/free-port.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { launchBrowser, serveDashboard, type Browser } from './support.js';

// What a tab left open for hours meets: the dashboard server restarting under it, a link that
// goes silent without closing (a laptop that slept, a proxy that dropped the connection), and
// tabs that died without closing their sockets.
describe('a dashboard tab left open', { timeout: 180_000 }, () => {
  let b: Browser;
  const running: RunningProcess[] = [];
  const pill = () => b.page.locator('#link-status').innerText();
  /** WebSockets the page opened, by the time each was created. */
  const opened: number[] = [];

  before(async () => {
    b = await launchBrowser();
    b.page.on('websocket', () => opened.push(Date.now()));
  });
  after(async () => {
    for (const p of running) await p.stop();
    await b?.close();
  });

  it('after the dashboard server restarts, the page reconnects by itself: signed in again, every view live', async () => {
    const home = mkdtempSync(join(tmpdir(), 'svc-dash-restart-'));
    const port = await freePort();
    const up = () =>
      spawnNode(
        CLI,
        ['up', '--demo-traffic', '--router-port', '0', '--controller-port', '0', '--dashboard-port', String(port)],
        { env: { SVC_SERVING_HOME: home, SVC_NVIDIA_SMI: '/nonexistent' } },
      );
    let node = await up();
    running.push(node);
    await eventually(() => /dashboard +http/.test(node.output()), 10_000);
    const url = /dashboard +(http:\/\/\S+)/.exec(node.output())![1]!;
    await b.page.goto(`${url}#workloads`);
    await b.page.fill('#credential', readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
    await b.page.click('#tab-requests');
    await b.page.locator('#requests-status', { hasText: 'Router read' }).waitFor({ timeout: 10_000 });

    await node.stop();
    await b.page.locator('#link-status', { hasText: 'unreachable' }).waitFor({ timeout: 5_000 });
    await b.page.locator('#requests-status', { hasText: 'not current' }).waitFor({ timeout: 5_000 });
    const down = Date.now();
    await sleep(8_000);
    // Down for 8 s: the page retried with a backoff (0.5, 1, 2, 4 s), one attempt at a time.
    const attempts = opened.filter((t) => t >= down).length;
    assert.ok(attempts >= 2 && attempts <= 5, `${attempts} attempts while the server was down`);

    node = await up();
    running.push(node);
    const back = Date.now();
    await b.page.locator('#link-status', { hasText: 'dashboard server connected' }).waitFor({ timeout: 15_000 });
    // Signed in again with the credential the page kept in memory, and reading again.
    await b.page.locator('#requests-status', { hasText: 'Router read' }).waitFor({ timeout: 10_000 });
    const readAt = await b.page.locator('#requests-status').innerText();
    assert.ok(!readAt.includes('not current'), readAt);
    await b.page.click('#tab-workloads');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor({ timeout: 10_000 });
    await eventually(async () => (await b.page.locator('#records tbody tr').count()) > 0, 10_000);
    await b.page.click('#tab-telemetry');
    await b.page.locator('#router-charts .figures', { hasText: 'requests' }).first().waitFor({ timeout: 15_000 });
    assert.ok(opened.filter((t) => t >= back).length <= 2, 'one new socket, not a pile of them');
    await node.stop();
  });

  it(`a link that goes silent without closing is given up after ${(4 * HEARTBEAT_MS) / 1000} s of silence, and the page connects again`, async () => {
    // Telemetry locked (--auth-env, no credential typed): nothing but the server's beats
    // travels, so a quiet but healthy link is shown to stay up.
    const dash = await serveDashboard(['--auth-env', 'DASH_TELEMETRY'], { DASH_TELEMETRY: 'telemetry-secret-1' });
    running.push(dash);
    await b.page.goto(dash.url);
    await b.page.locator('#link-status', { hasText: 'dashboard server connected' }).waitFor();
    const quietSince = Date.now();
    const sockets = opened.length;
    await sleep(4 * HEARTBEAT_MS + 3_000);
    assert.equal(await pill(), 'dashboard server connected', 'a quiet link with its beats is not given up');
    assert.equal(opened.length, sockets, 'no reconnect');
    const beats = b.frames.filter((f) => f.at >= quietSince && f.payload === '{"type":"beat"}').length;
    assert.ok(beats >= 3, `${beats} beats`);

    // The server stops answering (its process is stopped): its TCP connection stays open.
    const stopped = Date.now();
    process.kill(dash.proc.pid!, 'SIGSTOP');
    try {
      await b.page
        .locator('#link-status', { hasText: /unreachable \(nothing heard for \d+ s\)/ })
        .waitFor({ timeout: 4 * HEARTBEAT_MS + 10_000 });
      const after = Date.now() - stopped;
      assert.ok(after >= 3 * HEARTBEAT_MS, `not given up early (${after} ms)`);
    } finally {
      process.kill(dash.proc.pid!, 'SIGCONT');
    }
    await b.page.locator('#link-status', { hasText: 'dashboard server connected' }).waitFor({ timeout: 30_000 });
    await b.page.locator('#gpu-status', { hasText: 'locked' }).waitFor();
    await dash.stop();
  });

  it(`the server cuts sockets that answer no ping for ${SILENT_BEATS} beats: dead tabs do not hold an address's ${MAX_SOCKETS_PER_ADDRESS} sockets`, async () => {
    const dash = await serveDashboard([]);
    running.push(dash);
    const host = new URL(dash.url).host;
    const held: Socket[] = [];
    // A raw upgrade that never reads and never answers a ping: a tab whose machine went away.
    const upgrade = (): Promise<number> =>
      new Promise((resolve, reject) => {
        const req = request(
          `${dash.url}/ws`,
          {
            agent: false,
            headers: {
              connection: 'Upgrade',
              upgrade: 'websocket',
              'sec-websocket-version': '13',
              'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
              host,
              origin: `http://${host}`,
            },
          },
          (res) => {
            res.resume();
            resolve(res.statusCode ?? 0);
          },
        );
        req.on('upgrade', (res, socket) => {
          held.push(socket);
          resolve(res.statusCode ?? 0);
        });
        req.setTimeout(5_000, () => req.destroy(new Error('no answer within 5 s')));
        req.on('error', reject).end();
      });
    try {
      for (let i = 0; i < MAX_SOCKETS_PER_ADDRESS; i++) assert.equal(await upgrade(), 101);
      assert.equal(await upgrade(), 503, 'every socket of this address is taken');
      const t0 = Date.now();
      await eventually(
        async () => ((await upgrade()) === 101 ? true : undefined),
        (SILENT_BEATS + 2) * HEARTBEAT_MS,
        1_000,
      );
      const freed = Date.now() - t0;
      assert.ok(freed >= (SILENT_BEATS - 1) * HEARTBEAT_MS, `freed after ${freed} ms, not before they were silent`);
    } finally {
      for (const s of held) s.destroy();
    }
  });
});
