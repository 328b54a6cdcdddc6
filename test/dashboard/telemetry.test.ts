import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import type { Socket } from 'node:net';
import { WebSocket } from 'undici';
import { MAX_SOCKETS, MAX_SOCKETS_PER_ADDRESS } from '../../src/dashboard/dashboard.js';
import { DISABLED_FRAME } from '../../src/dashboard/dashboard-session.js';
import { writeTestPolicy } from '../support/policy.js';
import { eventually, type RunningProcess } from '../support/processes.js';
import { assertNoCanary, fakeNvidiaSmi, launchBrowser, serveDashboard, type Browser } from './support.js';

const policy = writeTestPolicy();
const CANARY = `svc-canary-reader-${'c0ffee'.repeat(4)}`;
const MIXED = [
  'GPU-11111111-2222-3333-4444-555555555555',
  'GPU-66666666-7777-8888-9999-000000000000',
  'GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee',
];

/** Raw HTTP with chosen headers (fetch forbids setting Host). */
function status(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url + '/ws', { headers, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('upgrade', (res, socket) => {
      socket.destroy();
      resolve(res.statusCode ?? 0);
    });
    // A server that neither answers nor closes must fail the test, not hang it.
    req.setTimeout(5_000, () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', reject).end();
  });
}

describe('dashboard telemetry, and the fixed denial of a disabled workload service', { timeout: 120_000 }, () => {
  let b: Browser;
  const running: RunningProcess[] = [];
  const serve = async (args: string[], env: Record<string, string> = {}) => {
    const p = await serveDashboard(args, env);
    running.push(p);
    return p;
  };
  /** Workloads tab, type a credential, Connect: expect the fixed denial, exactly. */
  const expectDenial = async (credential: string) => {
    const before = b.frames.length;
    await b.page.click('#tab-workloads');
    await b.page.fill('#credential', credential);
    await b.page.click('#connect');
    await b.page.locator('#node-status', { hasText: 'Workload reads are disabled on this dashboard' }).waitFor();
    const denials = b.frames
      .slice(before)
      .filter((f) => f.dir === 'received' && f.payload.includes('workloads-denied'));
    assert.deepEqual(
      denials.map((f) => f.payload),
      [DISABLED_FRAME],
    );
    assert.equal(await b.page.locator('#records tbody tr').count(), 0, 'no unauthenticated empty inventory');
    await b.page.click('#tab-telemetry');
  };

  before(async () => {
    b = await launchBrowser();
  });
  after(async () => {
    for (const p of running) assert.equal(await p.stop(), 0, 'the dashboard exits 0 on SIGTERM');
    await b?.close();
  });

  it('shows per-card entries keyed by uuid and the aggregate as a display sum; workloads without options: fixed denial', async () => {
    const d = await serve([], { SVC_NVIDIA_SMI: fakeNvidiaSmi('mixed-na.csv') });
    await b.page.goto(d.url);
    await b.page.locator('#gpu-cards article').nth(2).waitFor();
    assert.deepEqual(
      await b.page.locator('#gpu-cards article').evaluateAll((els) => els.map((e) => e.getAttribute('data-uuid'))),
      MIXED,
    );
    const a100 = await b.page.locator(`article[data-uuid="${MIXED[1]}"]`).innerText();
    assert.match(a100, /GPU 1 · NVIDIA A100-SXM4-40GB/);
    assert.match(a100, /memory not reported \/ not reported GiB/, '[N/A] is shown as not reported, never 0');
    const aggregate = await b.page.locator('#gpu-aggregate').innerText();
    assert.match(aggregate, /Aggregate GPU memory: 22\.5 \/ 39\.0 GiB used across 2 card\(s\)/);
    assert.match(aggregate, /display sum of per-card memory, not one unified capacity/);
    assert.match(aggregate, /1 card\(s\) did not report memory/);
    assert.equal(
      await b.page.locator('#telemetry-auth').isVisible(),
      false,
      'open telemetry on loopback asks for nothing',
    );

    await expectDenial(CANARY);
    assert.match(
      await b.page.locator('#gpu-status').innerText(),
      /3 GPU card\(s\) sampled by nvidia-smi/,
      'telemetry keeps working',
    );
    assert.match(d.output(), /"reason":"not-configured"/);
    await assertNoCanary(b, CANARY, { dashboard: d.output() }, 'denied connect');
  });

  it('says "no GPU telemetry" when nvidia-smi is absent', async () => {
    const d = await serve([]);
    await b.page.goto(d.url);
    await b.page
      .locator('#gpu-status', { hasText: 'no GPU telemetry: nvidia-smi is not installed on this host' })
      .waitFor();
    assert.equal(await b.page.locator('#gpu-cards article').count(), 0);
    assert.equal(await b.page.locator('#gpu-aggregate').isVisible(), false);
  });

  it('incomplete or invalid workload options: the same fixed denial, telemetry keeps working', async () => {
    const cases: [string[], string][] = [
      [['--workload-controller-url', 'http://127.0.0.1:8100', '--workload-expected-node', 'node-a'], 'incomplete'],
      [
        [
          '--workload-controller-url',
          'http://controller.example.com',
          '--workload-expected-node',
          'node-a',
          '--workload-authorization-policy',
          policy.path,
        ],
        'invalid-controller-url',
      ],
      [
        [
          '--workload-controller-url',
          'http://127.0.0.1:8100',
          '--workload-expected-node',
          '9-not-a-host',
          '--workload-authorization-policy',
          policy.path,
        ],
        'invalid-expected-node',
      ],
    ];
    // Started together: each process start costs about a second of module loading.
    const started = await Promise.all(
      cases.map(([args]) => serve(args, { ...policy.env, SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x2.csv') })),
    );
    for (const [i, d] of started.entries()) {
      assert.match(d.output(), new RegExp(`"reason":"${cases[i]![1]}"`));
      await b.page.goto(d.url);
      await expectDenial(policy.tokens.reader);
      await b.page.locator('#gpu-cards article').nth(1).waitFor();
    }
  });

  it('--auth-env gates telemetry; a workload client with the same credential disables workload reads', async () => {
    const env = { ...policy.env, DASH_TELEMETRY: policy.tokens.reader, SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x2.csv') };
    const d = await serve(
      [
        '--auth-env',
        'DASH_TELEMETRY',
        '--workload-controller-url',
        'http://127.0.0.1:8100',
        '--workload-expected-node',
        'node-a',
        '--workload-authorization-policy',
        policy.path,
      ],
      env,
    );
    assert.match(d.output(), /"reason":"collision"/);
    await b.page.goto(d.url);
    await b.page.locator('#telemetry-auth').waitFor();
    assert.equal(await b.page.locator('#gpu-cards article').count(), 0, 'nothing before the credential');
    await b.page.fill('#telemetry-credential', 'wrong-telemetry-credential');
    await b.page.click('#telemetry-auth button');
    await b.page.locator('#telemetry-auth-status', { hasText: 'telemetry credential refused (HTTP 401)' }).waitFor();
    await b.page.fill('#telemetry-credential', policy.tokens.reader);
    await b.page.click('#telemetry-auth button');
    await b.page.locator('#gpu-cards article').nth(1).waitFor();
    await expectDenial(policy.tokens.reader);
    assert.ok(!d.output().includes(policy.tokens.reader), 'the credential is never logged');
  });

  it('ten cards are one compact table, a row a card, instead of twenty charts', async () => {
    const d = await serve([], { SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x10.csv') });
    await b.page.goto(d.url);
    await b.page.locator('#gpu-table tbody tr').nth(9).waitFor({ timeout: 10_000 });
    assert.equal(await b.page.locator('#gpu-cards article').count(), 0, 'no per-card charts');
    assert.equal(await b.page.locator('#gpu-table tbody tr').count(), 10);
    const row = (i: number) => b.page.locator('#gpu-table tbody tr').nth(i).innerText();
    // Card 0: 40960 of 81559 MiB, 87 %.
    assert.match(
      await row(0),
      /^GPU 0\s+NVIDIA H100 80GB HBM3\s+40\.0 \/ 79\.6 GiB \(50 %\)\s+87 %\s+40 °C\s+100\.5 W$/,
    );
    assert.match(await row(2), /79\.1 \/ 79\.6 GiB \(99 %\)\s+100 %/);
    assert.match(await row(9), /not reported \/ not reported GiB\s+not reported/, '[N/A] is not reported, never 0');
    const width = await b.page.evaluate<string>("document.querySelector('#gpu-table tbody tr .bar-fill').style.width");
    assert.equal(width, '50%', "the bar is the card's memory share");
    await b.page.setViewportSize({ width: 390, height: 844 });
    try {
      const w = await b.page.evaluate<{ page: number; view: number }>(
        '({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth })',
      );
      assert.ok(w.page <= w.view, 'the table scrolls inside its box on a phone');
    } finally {
      await b.page.setViewportSize({ width: 1280, height: 820 });
    }
  });

  it('refuses foreign Host headers (DNS rebinding) and cross-origin WebSocket upgrades', async () => {
    const d = await serve([]);
    const host = new URL(d.url).host;
    const upgrade = {
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
    };
    assert.equal(await status(d.url, { ...upgrade, host, origin: `http://${host}` }), 101);
    assert.equal(await status(d.url, { ...upgrade, host, origin: 'http://evil.example' }), 403);
    assert.equal(await status(d.url, { ...upgrade, host }), 403, 'no Origin at all');
    assert.equal(await status(d.url, { ...upgrade, host: 'evil.example', origin: 'http://evil.example' }), 403);
    // `/ws` without an upgrade: the fixed 400 problem, for GET and HEAD alike.
    for (const method of ['GET', 'HEAD']) {
      const res = await fetch(`${d.url}/ws`, { method, headers: { origin: `http://${host}` } });
      assert.equal(res.status, 400, method);
      assert.match(res.headers.get('content-type') ?? '', /^application\/problem\+json/, method);
    }
    // A frame over the size bound closes the socket (1009) and leaves one warn line: name and
    // code, no message or stack.
    const ws = new WebSocket(`${d.url.replace('http', 'ws')}/ws`, { headers: { origin: `http://${host}` } });
    await new Promise((r, j) => {
      ws.onopen = r;
      ws.onerror = j;
    });
    const closed = new Promise<number>((r) => (ws.onclose = (ev) => r(ev.code)));
    ws.send('x'.repeat(17 * 1024));
    assert.equal(await closed, 1009);
    const lines = await eventually(() => {
      const l = d
        .output()
        .split('\n')
        .filter((x) => x.includes('websocket closed on a protocol error'));
      return l.length > 0 ? l : undefined;
    }, 3_000);
    const line = JSON.parse(lines[0]!) as { level: number; err: Record<string, unknown> };
    assert.equal(line.level, 40);
    assert.deepEqual(Object.keys(line.err).sort(), ['code', 'name']);
    assert.doesNotMatch(d.output(), /node_modules|receiver\.js|"stack"/);
  });

  it(`holds at most ${MAX_SOCKETS} WebSockets open, ${MAX_SOCKETS_PER_ADDRESS} per remote address; the next upgrade is the fixed 503 until one closes`, async () => {
    const d = await serve([]);
    const host = new URL(d.url).host;
    const upgrade = {
      connection: 'Upgrade',
      upgrade: 'websocket',
      'sec-websocket-version': '13',
      'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
      host,
      origin: `http://${host}`,
    };
    const open: Socket[] = [];
    /** One upgrade from a chosen loopback source address (all of 127/8 reaches the server); an accepted socket stays open. */
    const from = (localAddress: string): Promise<number> =>
      new Promise((resolve, reject) => {
        const req = request(d.url + '/ws', { headers: upgrade, agent: false, localAddress }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.on('upgrade', (res, socket) => {
          open.push(socket);
          resolve(res.statusCode ?? 0);
        });
        req.setTimeout(5_000, () => req.destroy(new Error('no answer within 5 s')));
        req.on('error', reject).end();
      });
    try {
      for (let i = 0; i < MAX_SOCKETS_PER_ADDRESS; i++) assert.equal(await from('127.0.0.1'), 101);
      // One address has taken its share: it is refused, another address is not.
      assert.equal(await from('127.0.0.1'), 503);
      let n = MAX_SOCKETS_PER_ADDRESS;
      for (let a = 2; n < MAX_SOCKETS; a++) {
        for (let i = 0; i < MAX_SOCKETS_PER_ADDRESS && n < MAX_SOCKETS; i++, n++)
          assert.equal(await from(`127.0.0.${a}`), 101);
      }
      // Every slot is taken: a fresh address is refused too, until a socket closes.
      assert.equal(await from('127.0.0.200'), 503);
      open[0]!.destroy();
      assert.equal(await eventually(async () => ((await from('127.0.0.200')) === 101 ? true : undefined), 3_000), true);
      // The address whose socket closed has a slot again as well.
      open.at(-1)!.destroy();
      assert.equal(await eventually(async () => ((await from('127.0.0.1')) === 101 ? true : undefined), 3_000), true);
    } finally {
      for (const s of open) s.destroy();
    }
  });
});
