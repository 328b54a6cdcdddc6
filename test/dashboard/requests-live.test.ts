import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, type RunningProcess } from '../support/processes.js';
import { launchBrowser, startDemoNode, type Browser } from './support.js';

// `svc-serving up --demo-traffic` (a request every two seconds, each in flight for about one
// to three seconds) read by its own dashboard in chromium: the Requests tables change on
// every 2 s round, and an operator's click on a row must still land.
describe('live tables under demo traffic: clicks, focus and selections survive the rounds', {
  timeout: 120_000,
}, () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-dash-rq-live-'));
  let node: RunningProcess;
  let b: Browser;
  let dashboardUrl = '';
  let routerUrl = '';

  /** A streamed chat request through the router (not awaited by the caller until it wants the id). */
  const chat = async (content: string): Promise<string> => {
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${readFileSync(join(home, 'router.key'), 'utf8').trim()}`,
        'content-type': 'application/json',
        'x-svc-session-id': 'sess-click',
      },
      body: JSON.stringify({ model: 'sim-chat', stream: true, messages: [{ role: 'user', content }] }),
    });
    await res.text();
    return res.headers.get('x-svc-request-id') ?? '';
  };
  const requestsFrames = () =>
    b.frames.filter((f) => f.dir === 'received' && f.payload.startsWith('{"type":"requests"')).length;

  /**
   * Presses the mouse on `selector`, holds it until the page has taken one more `requests`
   * round (the table updated between mousedown and mouseup, as under a slow human click),
   * then releases it. A round that moved the rows between finding the button and pressing
   * it (the press landed on another row) is a miss of the test's aim, not of the page's:
   * it lets go away from the tables and aims again.
   */
  const clickAcrossARound = async (selector: string): Promise<void> => {
    for (let attempt = 1; ; attempt++) {
      await b.page.locator(selector).scrollIntoViewIfNeeded();
      const box = await b.page.locator(selector).boundingBox();
      assert.ok(box, `${selector} is on screen`);
      await b.page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await b.page.evaluate(
        `document.addEventListener('pointerdown', (e) => { window.pressedOn = e.target.matches(${JSON.stringify(selector)}); }, { once: true, capture: true })`,
      );
      const seen = requestsFrames();
      await b.page.mouse.down();
      if (!(await b.page.evaluate<boolean>('window.pressedOn === true'))) {
        assert.ok(attempt < 5, `pressed ${selector} within five tries`);
        await b.page.mouse.move(1, 1);
        await b.page.mouse.up();
        continue;
      }
      await eventually(() => requestsFrames() > seen, 6_000);
      // The frame was received; give the page its turn to draw it before the button is let go.
      await b.page.evaluate('new Promise((r) => requestAnimationFrame(() => setTimeout(r, 50)))');
      await b.page.mouse.up();
      return;
    }
  };

  before(async () => {
    ({ node, dashboardUrl } = await startDemoNode(home));
    routerUrl = /router +(http:\/\/\S+)/.exec(node.output())![1]!;
    b = await launchBrowser();
    await b.page.goto(`${dashboardUrl}#workloads`);
    await b.page.fill('#credential', readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
    await b.page.click('#tab-requests');
    await b.page.locator('#requests-status', { hasText: 'Router read' }).waitFor({ timeout: 10_000 });
  });
  after(async () => {
    try {
      await b?.close();
    } finally {
      await node?.stop();
    }
  });

  it('a click on a request in flight spanning a round opens it; it turns into its diagnosis when it finishes', async () => {
    // Long enough in flight for several rounds while the demo's requests come and go around it.
    const slow = chat('slow sim:tokens=4 sim:ttft_ms=9000');
    const row = b.page.locator('#rq-active tbody tr', { hasText: 'sess-click' });
    await row.waitFor({ timeout: 8_000 });
    const id = (await row.getAttribute('data-id'))!;
    const button = `#rq-active tbody tr[data-id="${id}"] button`;
    // The row is the same element from one round to the next (its elapsed time moves).
    // (a property, not an attribute: the markup a row is compared by stays the page's own)
    await b.page.evaluate(`document.querySelector('${button}').probe = 'kept'`);
    const elapsed = await row.locator('td').nth(3).innerText();
    await clickAcrossARound(button);
    await b.page.locator('#rq-detail-title', { hasText: `In flight: ${id}` }).waitFor({ timeout: 2_000 });
    assert.equal(await b.page.evaluate<string>('document.activeElement.id'), 'rq-detail-title');
    assert.equal(
      await b.page.evaluate<string | undefined>(`document.querySelector('${button}').probe`),
      'kept',
      'the button was never replaced',
    );
    assert.notEqual(await row.locator('td').nth(3).innerText(), elapsed, 'the row itself was updated');
    assert.match(await b.page.locator('#rq-detail').innerText(), /sim-chat[\s\S]*phase[\s\S]*sess-click/);
    // It finishes: the open panel becomes its diagnosis without another click.
    assert.equal(await slow, id);
    await b.page.locator('#rq-detail-title', { hasText: `Diagnosis of ${id}` }).waitFor({ timeout: 8_000 });
    assert.match(await b.page.locator('#rq-detail').innerText(), /Interpretation: startup_dominated/);
  });

  it('a click on a finished request spanning a round opens its diagnosis', async () => {
    // A finished request that stays in the list while the demo's newer ones arrive above it.
    const id = await chat('brief sim:tokens=2 sim:ttft_ms=0');
    const button = `#rq-finished tbody tr[data-id="${id}"] button`;
    await b.page.locator(button).waitFor({ timeout: 8_000 });
    await b.page.click('#tab-requests');
    await b.page.fill('#rq-search', '');
    // Wait for a round that adds a demo request above it, so that the rows move under the test's eye too.
    await eventually(
      async () => (await b.page.locator('#rq-finished tbody tr').first().getAttribute('data-id')) !== id,
      8_000,
    );
    await clickAcrossARound(button);
    await b.page.locator('#rq-detail-title', { hasText: `Diagnosis of ${id}` }).waitFor({ timeout: 5_000 });
  });

  it("a keyboard user's focus on a request stays on it through the rounds, and Enter opens it", async () => {
    const slow = chat('slow sim:tokens=4 sim:ttft_ms=7000');
    const row = b.page.locator('#rq-active tbody tr', { hasText: 'sess-click' });
    await row.waitFor({ timeout: 8_000 });
    const id = (await row.getAttribute('data-id'))!;
    await row.locator('button').focus();
    const seen = requestsFrames();
    await eventually(() => requestsFrames() >= seen + 2, 8_000);
    await b.page.evaluate('new Promise((r) => requestAnimationFrame(() => setTimeout(r, 50)))');
    assert.equal(
      await b.page.evaluate<string | undefined>('document.activeElement.closest("tr")?.dataset.id'),
      id,
      'focus is still on the request two rounds later',
    );
    await b.page.keyboard.press('Enter');
    await b.page.locator('#rq-detail-title', { hasText: `In flight: ${id}` }).waitFor({ timeout: 2_000 });
    await slow;
  });

  it('a record id selected to copy in the Workloads table stays selected through the polls', async () => {
    await b.page.click('#tab-workloads');
    const terminal = b.page.locator('#records tbody tr[data-state="terminal"]').last();
    await terminal.waitFor({ timeout: 15_000 });
    const id = (await terminal.getAttribute('data-id'))!;
    await b.page.evaluate(`(() => {
      const cell = document.querySelector('#records tbody tr[data-id="${id}"] td.id');
      const range = document.createRange();
      range.selectNodeContents(cell);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
    })()`);
    assert.equal(await b.page.evaluate<string>('getSelection().toString()'), id);
    const deltas = () =>
      b.frames.filter((f) => f.dir === 'received' && f.payload.startsWith('{"type":"workloads-delta"')).length;
    const seen = deltas();
    await eventually(() => deltas() >= seen + 2, 10_000);
    await b.page.evaluate('new Promise((r) => requestAnimationFrame(() => setTimeout(r, 50)))');
    assert.equal(await b.page.evaluate<string>('getSelection().toString()'), id, 'still selected two polls later');
  });
});
