import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { artifactsDir, assertNoCanary, launchBrowser, serveDashboard, type Browser } from './support.js';

// A real node (`svc-serving up`: engine sim, router, controller) and a separate
// `dashboard serve` pointed at its controller, driven through headless chromium.
describe('dashboard Workloads tab against a real node', { timeout: 120_000 }, () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-dash-up-'));
  // The reader credential is a canary: it must never show up anywhere it is not meant to be.
  const CANARY = `svc-canary-reader-${randomBytes(12).toString('hex')}`;
  let node: RunningProcess;
  let dash: RunningProcess;
  let b: Browser;
  let routerUrl = '';
  let routerKey = '';
  const logs = () => ({ dashboard: dash.output(), node: node.output() });
  const scan = (step: string) => assertNoCanary(b, CANARY, logs(), step);
  const reads = (since: number) =>
    b.frames.filter((f) => f.dir === 'sent' && f.at >= since && f.payload.includes('"type":"read"')).length;
  const chat = (content: string) =>
    fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${routerKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-chat', stream: true, messages: [{ role: 'user', content }] }),
    });
  const connect = async () => {
    await b.page.fill('#credential', CANARY);
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader · node local' }).waitFor();
    await b.page.locator('#node-status', { hasText: 'Node local:' }).waitFor();
  };

  before(async () => {
    writeFileSync(join(home, 'reader.token'), `${CANARY}\n`, { mode: 0o600 });
    node = await spawnNode(CLI, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      env: { SVC_SERVING_HOME: home, SVC_NVIDIA_SMI: '/nonexistent' },
    });
    await eventually(() => /dashboard +http/.test(node.output()), 10_000);
    routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
    const controllerUrl = /controller +(http:\/\/\S+)/.exec(node.output())![1]!;
    routerKey = readFileSync(join(home, 'router.key'), 'utf8').trim();
    dash = await serveDashboard([
      '--workload-controller-url',
      controllerUrl,
      '--workload-expected-node',
      'local',
      '--workload-authorization-policy',
      join(home, 'policy.toml'),
    ]);
    b = await launchBrowser();
  });
  after(async () => {
    // Closing the browser throws when the page logged an error: the processes stop anyway.
    try {
      await b?.close();
    } finally {
      await node?.stop();
      assert.equal(await dash?.stop(), 0, 'the dashboard exits 0 on SIGTERM');
      assert.ok(!JSON.stringify(logs()).includes(CANARY), 'never logged, start to finish');
    }
  });

  it('`up` prints its own dashboard address and the credential file, never the credential', async () => {
    const upDashboard = /dashboard +(http:\/\/\S+)/.exec(node.output())![1]!;
    assert.match(await (await fetch(upDashboard)).text(), /<title>svc-serving dashboard<\/title>/);
    assert.match(node.output(), new RegExp(`paste the contents of ${join(home, 'reader.token')}`));
    assert.ok(!node.output().includes(CANARY));
  });

  it('connects with the reader credential, checked locally and forwarded to the controller', async () => {
    await b.page.goto(dash.url);
    // The tabs follow the WAI-ARIA pattern: one tab stop, arrow keys move between them.
    assert.equal(await b.page.getAttribute('#tab-workloads', 'tabindex'), '-1');
    await b.page.focus('#tab-telemetry');
    await b.page.keyboard.press('ArrowRight');
    assert.equal(await b.page.getAttribute('#tab-workloads', 'aria-selected'), 'true');
    assert.equal(await b.page.evaluate<string>('document.activeElement.id'), 'tab-workloads');
    assert.equal(await b.page.getAttribute('#tab-telemetry', 'tabindex'), '-1');
    // Status changes are announced (live regions), not only drawn.
    assert.equal(await b.page.getAttribute('#session-status', 'aria-live'), 'polite');
    await connect();
    assert.equal(await b.page.locator('#sources tbody tr').count(), 6, 'all six sources, each with its status');
    assert.equal(await b.page.locator('#credential').inputValue(), '', 'the input is emptied at Connect');
    assert.ok(!b.page.url().includes('?'));
    await scan('connect');
  });

  it('filters (owner=router) start a new generation and a new bounded read', async () => {
    await (await chat('quick sim:tokens=2 sim:ttft_ms=0')).text();
    const gensBefore = b.frames.filter((f) => f.dir === 'sent').map((f) => JSON.parse(f.payload).gen as number);
    await b.page.selectOption('#f-owner', 'router');
    const sent = await eventually(
      () => b.frames.find((f) => f.dir === 'sent' && f.payload.includes('"owner":"router"')),
      3_000,
    );
    assert.ok(JSON.parse(sent.payload).gen > Math.max(...gensBefore), 'a newer generation');
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    const owners = await b.page.locator('#records tbody tr td:first-child').allInnerTexts();
    assert.ok(owners.length > 0 && owners.every((o) => o === 'router'));
    await scan('filter');
  });

  const setLimit = async (v: string) => {
    await b.page.fill('#f-limit', v);
    await b.page.locator('#f-limit').dispatchEvent('change');
  };

  it('a narrow screen (360 px) scrolls wide tables inside their box, never the page sideways', async () => {
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    const before = b.page.viewportSize();
    await b.page.setViewportSize({ width: 360, height: 800 });
    try {
      const widths = await b.page.evaluate<{ page: number; view: number }>(
        '({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth })',
      );
      assert.ok(widths.page <= widths.view, `page ${widths.page} px wide in a ${widths.view} px window`);
      assert.ok(await b.page.locator('#session-status').isVisible());
    } finally {
      if (before) await b.page.setViewportSize(before);
    }
  });

  it('an invalid filter value clears what other filters read, and nothing is read until it is fixed', async () => {
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    const t = Date.now();
    await setLimit('0');
    await b.page
      .locator('#node-status', { hasText: 'Nothing is shown: a filter value is invalid' })
      .waitFor({ timeout: 3_000 });
    assert.equal(await b.page.locator('#records tbody tr').count(), 0);
    // The field is named, with what it takes, and marked for assistive technology.
    assert.match(await b.page.locator('#filter-status').innerText(), /limit: a whole number from 1 to 1000/);
    assert.equal(await b.page.getAttribute('#f-limit', 'aria-invalid'), 'true');
    assert.equal(await b.page.getAttribute('#f-host', 'aria-invalid'), 'false');
    await sleep(2_600);
    assert.equal(reads(t), 0, 'no read with filters other than those shown');
    assert.equal(await b.page.locator('#records tbody tr').count(), 0, 'and no late answer drawn');
    await setLimit('5');
    await eventually(
      () => b.frames.find((f) => f.dir === 'sent' && f.at >= t && f.payload.includes('"limit":5')),
      3_000,
    );
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    assert.ok((await b.page.locator('#records tbody tr').count()) <= 5);
    assert.equal(await b.page.getAttribute('#f-limit', 'aria-invalid'), 'false');
    await setLimit('');
    // Typing (no change event yet): the records read with the old filters go at once, and the
    // new filters are read when typing pauses.
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    const typed = Date.now();
    await b.page.locator('#f-host').pressSequentially('othernode');
    assert.equal(
      await b.page.locator('#records tbody tr').count(),
      0,
      'nothing drawn under filters it was not read with',
    );
    await eventually(
      () => b.frames.find((f) => f.dir === 'sent' && f.at >= typed && f.payload.includes('"host":"othernode"')),
      3_000,
    );
    assert.ok(
      !b.frames.some(
        (f) =>
          f.dir === 'sent' &&
          f.at >= typed &&
          f.payload.includes('"type":"read"') &&
          /"host":"o[a-z]{0,7}"/.test(f.payload) &&
          !f.payload.includes('"host":"othernode"'),
      ),
      'no read with half-typed filters',
    );
    await b.page.locator('#node-status', { hasText: 'Node local:' }).waitFor({ timeout: 5_000 });
    assert.equal(await b.page.locator('#records tbody tr').count(), 0, 'no record of host local under host=othernode');
    await b.page.fill('#f-host', '');
    await b.page.locator('#f-host').dispatchEvent('change');
    await scan('invalid filter');
  });

  it('shows a slow streaming request move from active to terminal (screenshot while it streams)', async () => {
    const slow = chat('slow sim:ttft_ms=200 sim:tokens=50 sim:token_delay_ms=100');
    const active = b.page
      .locator(
        '#records tbody tr:is([data-state="checking"],[data-state="admitted"],[data-state="dispatched"],[data-state="streaming"])',
      )
      .first();
    await active.waitFor({ timeout: 6_000 });
    const id = await active.getAttribute('data-id');
    await b.page.screenshot({ path: join(artifactsDir(), 'workloads.png'), fullPage: true });
    await (await slow).text();
    await b.page.locator(`#records tbody tr[data-id="${id}"][data-state="terminal"]`).waitFor({ timeout: 6_000 });
    assert.match(await b.page.locator(`#records tbody tr[data-id="${id}"]`).innerText(), /completed\s+success/);
    await scan('active to terminal');
  });

  it('polls only while the Workloads tab and the document are visible', async () => {
    await b.page.click('#tab-telemetry');
    let t = Date.now();
    await sleep(2_600);
    assert.equal(reads(t), 0, 'no reads while the Telemetry tab is shown');
    await b.page.click('#tab-workloads');
    await b.page.evaluate(`Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
      document.dispatchEvent(new Event('visibilitychange'))`);
    t = Date.now();
    await sleep(2_600);
    assert.equal(reads(t), 0, 'no reads while the document is hidden');
    await b.page.evaluate(`delete document.visibilityState; document.dispatchEvent(new Event('visibilitychange'))`);
    assert.ok(await eventually(() => reads(t) > 0, 3_000), 'visible again: reads resume at once');
  });

  it('Disconnect clears the records and forgets the credential', async () => {
    await b.page.click('#disconnect');
    await b.page.locator('#node-status', { hasText: 'Disconnected. The credential was forgotten' }).waitFor();
    assert.equal(await b.page.locator('#records tbody tr').count(), 0);
    assert.equal(await b.page.locator('#sources').isVisible(), false);
    assert.equal(await b.page.locator('#disconnect').isDisabled(), true);
    const t = Date.now();
    await sleep(2_600);
    assert.equal(reads(t), 0, 'nothing more is read');
    assert.ok(!b.frames.some((f) => f.at >= t && f.payload.includes(CANARY)), 'the credential is not sent again');
    await scan('disconnect');
  });

  it('a value no server could take as a credential (20,000 characters, a space inside) is refused on the page, never sent', async () => {
    for (const bad of ['x'.repeat(20_000), 'two words']) {
      const t = Date.now();
      await b.page.fill('#credential', bad);
      await b.page.click('#connect');
      await b.page.locator('#session-status', { hasText: 'not a credential' }).waitFor();
      await sleep(1_500);
      assert.ok(
        !b.frames.some((f) => f.at >= t && f.dir === 'sent' && f.payload.includes('"type":"connect"')),
        'no connect message',
      );
      assert.equal(await b.page.locator('#credential').inputValue(), '', 'the input is emptied');
    }
    assert.doesNotMatch(await b.page.locator('body').innerText(), /unreachable/);
  });

  it('Connect with an invalid filter value waits for valid filters: nothing is read with others', async () => {
    await setLimit('0');
    const t = Date.now();
    await b.page.fill('#credential', CANARY);
    await b.page.click('#connect');
    await b.page
      .locator('#session-status', { hasText: 'waiting for valid filters to connect' })
      .waitFor({ timeout: 3_000 });
    await sleep(1_000);
    const sentSince = (re: RegExp) => b.frames.filter((f) => f.dir === 'sent' && f.at >= t && re.test(f.payload));
    assert.equal(
      sentSince(/"type":"(connect|read)"/).length,
      0,
      'no connect or read with filters other than those shown',
    );
    await setLimit('3');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor({ timeout: 5_000 });
    assert.match(sentSince(/"type":"connect"/)[0]!.payload, /"limit":3/);
    await setLimit('');
    await b.page.click('#disconnect');
    await b.page.locator('#node-status', { hasText: 'Disconnected.' }).waitFor();
    await scan('connect with an invalid filter');
  });

  it('shows `unavailable` (not an empty inventory) when the controller stops', async () => {
    await connect();
    await node.stop();
    await b.page
      .locator('#node-status', { hasText: 'the controller could not be reached' })
      .waitFor({ timeout: 8_000 });
    const status = await b.page.locator('#node-status').innerText();
    assert.match(status, /unavailable/);
    assert.match(status, /left out: count unknown/);
    assert.match(await b.page.locator('#records-empty').innerText(), /This is not an empty inventory/);
    assert.equal(await b.page.locator('#records tbody tr').count(), 0);
    // The last view read stays, greyed apart from the current records, with its time.
    assert.match(
      await b.page.locator('#last-known-title').innerText(),
      /^Last view read, as of \d\d:\d\d:\d\d: not current$/,
    );
    assert.ok((await b.page.locator('#last-known-table tbody tr').count()) > 0, 'the records last read are kept');
    // The pill no longer says "connected": the local policy's yes is not the controller's.
    const pill = await b.page.locator('#session-status').innerText();
    assert.doesNotMatch(pill, /connected as/);
    assert.match(pill, /could not be read/);
    await scan('controller stopped');
  });
});
