import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { assertNoCanary, launchBrowser, type Browser } from './support.js';

// `svc-serving up` (engine sim, router, controller, dashboard): its dashboard reads the
// router with the node's own data-plane key, which must never reach the page.
describe('dashboard Requests tab against a real router', { timeout: 120_000 }, () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-dash-requests-'));
  let node: RunningProcess;
  let b: Browser;
  let routerUrl = '';
  let routerKey = '';
  let dashboardUrl = '';
  const chat = async (content: string, session: string): Promise<string> => {
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${routerKey}`,
        'content-type': 'application/json',
        'x-svc-session-id': session,
      },
      body: JSON.stringify({ model: 'sim-chat', stream: true, messages: [{ role: 'user', content }] }),
    });
    await res.text();
    return res.headers.get('x-svc-request-id') ?? '';
  };

  before(async () => {
    node = await spawnNode(CLI, ['up', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'], {
      env: { SVC_SERVING_HOME: home, SVC_NVIDIA_SMI: '/nonexistent' },
    });
    await eventually(() => /dashboard +http/.test(node.output()), 10_000);
    routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
    dashboardUrl = /dashboard +(http:\/\/\S+)/.exec(node.output())![1]!;
    routerKey = readFileSync(join(home, 'router.key'), 'utf8').trim();
    b = await launchBrowser();
  });
  after(async () => {
    try {
      await b?.close();
    } finally {
      await node?.stop();
    }
  });

  it('shows a request in flight, then finished with its figures; filters narrow the list', async () => {
    await b.page.goto(`${dashboardUrl}#workloads`);
    await b.page.fill('#credential', readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
    await b.page.click('#tab-requests');
    await b.page.locator('#requests-status', { hasText: 'Router read' }).waitFor({ timeout: 10_000 });
    // A slow request: long enough to be seen in flight by a 2 s poll.
    const slow = chat('slow sim:tokens=8 sim:ttft_ms=4500', 'sess-dash');
    await b.page.locator('#rq-active tbody tr').first().waitFor({ timeout: 8_000 });
    assert.match(await b.page.locator('#rq-active tbody tr').first().innerText(), /sim-chat[\s\S]*sess-dash/);
    const id = await slow;
    assert.match(id, /^req_[0-9a-f]{32}$/);
    const row = b.page.locator(`#rq-finished tbody tr[data-id="${id}"]`);
    await row.waitFor({ timeout: 10_000 });
    const cells = await row.locator('td').allInnerTexts();
    assert.equal(cells[0], id, 'the whole request id, as router diagnose takes it');
    assert.equal(cells[1], 'sim-chat');
    assert.equal(cells[2], 'success');
    assert.equal(cells[3], '200');
    assert.match(cells[4]!, /^\d+(\.\d+)? (s|ms)$/, 'latency measured');
    assert.match(cells[5]!, /^4\.\d\d s$|^[5-9]\.\d\d s$/, 'first token after the 4.5 s the engine waited');
    assert.equal(cells[6], 'stop');
    assert.match(
      cells[7]!,
      /\((upstream|estimated)\) \/ \d+ \((upstream|estimated)\)/,
      'token counts with their source',
    );
    assert.equal(cells[8], 'sess-dash');
    // Filters: a minimum latency above it, and another outcome, leave it out.
    await b.page.fill('#rq-min-latency', '600000');
    assert.equal(await row.count(), 0);
    await b.page.fill('#rq-min-latency', '1000');
    assert.equal(await row.count(), 1);
    await b.page.selectOption('#rq-outcome', 'error');
    assert.equal(await row.count(), 0);
    await b.page.selectOption('#rq-outcome', '');
    await b.page.fill('#rq-session', 'another');
    assert.equal(await row.count(), 0);
    await b.page.fill('#rq-session', 'sess-dash');
    assert.equal(await row.count(), 1);
  });

  it("opening a row shows the diagnosis (router diagnose's interpretation) and the session history", async () => {
    const id = (await b.page.locator('#rq-finished tbody tr').first().getAttribute('data-id'))!;
    await b.page.locator('#rq-finished tbody tr').first().locator('button').click();
    await b.page.locator('#rq-detail-title', { hasText: `Diagnosis of ${id}` }).waitFor({ timeout: 5_000 });
    const text = await b.page.locator('#rq-detail').innerText();
    assert.match(text, /Interpretation: startup_dominated/, 'the 4.5 s wait for the first token dominates');
    assert.match(text, new RegExp(`svc-serving router diagnose ${id}`));
    assert.match(text, /Session sess-dash[\s\S]*1 request\(s\) of this session/);
    assert.equal(
      await b.page.evaluate<string>('document.activeElement.id'),
      'rq-detail-title',
      'focus moves to the diagnosis',
    );
  });

  it('lists every finished request, however much shorter than the 2 s poll, newest first, once each', async () => {
    await b.page.fill('#rq-min-latency', '');
    await b.page.fill('#rq-session', 'sess-brief');
    // Three requests of a few milliseconds each: none is ever in flight when the dashboard reads.
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push(await chat(`brief ${i} sim:tokens=2 sim:ttft_ms=0`, 'sess-brief'));
    for (const id of ids) assert.match(id, /^req_[0-9a-f]{32}$/);
    const rows = b.page.locator('#rq-finished tbody tr');
    await b.page.locator(`#rq-finished tbody tr[data-id="${ids[0]}"]`).waitFor({ timeout: 8_000 });
    await eventually(async () => (await rows.count()) === 3, 8_000);
    const shown = await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-id')));
    assert.deepEqual(shown, [...ids].reverse(), 'newest first');
    // Later rounds list them again (the router's recent list): the page still holds each once.
    await new Promise((r) => setTimeout(r, 4_500));
    assert.deepEqual(await rows.evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-id'))), [...ids].reverse());
    await b.page.fill('#rq-session', '');
  });

  it('searches by request id (even one too quick to be seen in flight) and by session id', async () => {
    const quick = await chat('quick sim:tokens=2 sim:ttft_ms=0', 'sess-quick');
    await b.page.fill('#rq-search', quick);
    await b.page.click('#rq-search-go');
    await b.page.locator('#rq-detail-title', { hasText: `Diagnosis of ${quick}` }).waitFor({ timeout: 5_000 });
    assert.match(await b.page.locator('#rq-detail').innerText(), /Session sess-quick/);
    await b.page.fill('#rq-search', 'sess-dash');
    await b.page.click('#rq-search-go');
    await b.page.locator('#rq-detail-title', { hasText: 'Session sess-dash' }).waitFor({ timeout: 5_000 });
    await b.page.fill('#rq-search', 'nobody-here');
    await b.page.click('#rq-search-go');
    await b.page.locator('#rq-search-status', { hasText: 'Not found' }).waitFor({ timeout: 5_000 });
    await b.page.fill('#rq-search', 'not an id');
    await b.page.click('#rq-search-go');
    await b.page.locator('#rq-search-status', { hasText: 'Not a request id or session id' }).waitFor();
  });

  it('the router credential never reaches the page, its storage, its URL or the log', async () => {
    await assertNoCanary(b, routerKey, { node: node.output() }, 'requests view');
  });

  it('Disconnect stops the view and forgets what it showed', async () => {
    await b.page.click('#tab-workloads');
    await b.page.click('#disconnect');
    await b.page.click('#tab-requests');
    assert.equal(await b.page.locator('#rq-finished tbody tr').count(), 0);
    assert.match(await b.page.locator('#requests-status').innerText(), /Connect \(Workloads tab\)/);
  });
});
