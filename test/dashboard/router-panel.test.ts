import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { startRouterHarness, type RouterHarness } from '../support/router-harness.js';
import type { RunningProcess } from '../support/processes.js';
import { axeSerious, launchBrowser, serveDashboard, type Browser } from './support.js';

interface RatesFrame {
  type: string;
  router_rates?: { by_alias: Record<string, unknown> }[];
  router_rates_delta?: { by_alias: Record<string, { err_per_s: number | null }> }[];
}

// A real router with two aliases on one engine sim: `alpha` answers, `beta`'s engine fails
// every request (HTTP 500). `dashboard serve --router-url` charts them one alias at a time.
describe('router panel: a chart per alias, chosen in a selector (decision 0036)', { timeout: 120_000 }, () => {
  let h: RouterHarness;
  let dash: RunningProcess;
  let b: Browser;
  let traffic = true;
  let sending: Promise<void> = Promise.resolve();

  const post = (model: string, content: string) =>
    fetch(`${h.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${h.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content }] }),
    }).then((r) => r.arrayBuffer());

  before(async () => {
    h = await startRouterHarness({ models: [{ alias: 'alpha' }, { alias: 'beta' }] });
    dash = await serveDashboard(['--router-url', h.routerUrl, '--router-auth-env', 'DASH_ROUTER_KEY'], {
      DASH_ROUTER_KEY: h.key,
    });
    sending = (async () => {
      while (traffic) {
        await Promise.all([post('alpha', 'fine'), post('beta', 'broken sim:status=500')]);
        await sleep(250);
      }
    })();
    b = await launchBrowser();
  });
  after(async () => {
    traffic = false;
    await sending.catch(() => undefined);
    try {
      await b?.close();
    } finally {
      await dash?.stop();
      await h?.stop();
    }
  });

  const requestsFigures = () => b.page.locator('#router-charts .chart-card').first().locator('.figures').innerText();

  it('offers every alias; each chart then shows that alias alone, and the choice holds across frames', async () => {
    await b.page.goto(dash.url);
    await b.page.locator('#router-alias-row').waitFor({ state: 'visible', timeout: 20_000 });
    assert.deepEqual(await b.page.locator('#router-alias option').allInnerTexts(), [
      'all aliases (summed)',
      'alpha',
      'beta',
    ]);
    await b.page.locator('#router-charts .figures', { hasText: 'all aliases: requests' }).first().waitFor();
    await b.page.selectOption('#router-alias', 'beta');
    const beta = await requestsFigures();
    assert.match(beta, /^alias beta: requests \d+\.\d\d\/s · errors and timeouts (\d+\.\d\d)\/s$/);
    assert.ok(Number(/timeouts (\S+)\/s/.exec(beta)![1]) > 0, `every beta request fails: ${beta}`);
    await b.page.selectOption('#router-alias', 'alpha');
    const alpha = await requestsFigures();
    assert.match(alpha, /^alias alpha: requests \d+\.\d\d\/s · errors and timeouts 0\.00\/s$/);
    assert.ok(Number(/requests (\S+)\/s/.exec(alpha)![1]) > 0, `alpha answers: ${alpha}`);
    assert.match(
      await b.page.locator('#router-charts .chart-card').nth(2).locator('.figures').innerText(),
      /^alias alpha: p50 \d+ ms · p95 \d+ ms$/,
      'durations of alpha alone',
    );
    // The next frames keep the operator's choice.
    const frames = b.frames.length;
    await sleep(4_000);
    assert.ok(b.frames.length > frames, 'telemetry frames arrived meanwhile');
    assert.equal(await b.page.inputValue('#router-alias'), 'alpha');
    assert.match(await requestsFigures(), /^alias alpha: /);
  });

  it("the Router table shows each alias's own rates side by side", async () => {
    const row = (alias: string) => b.page.locator('#router-figures tbody tr', { hasText: alias }).locator('td').last();
    assert.match(await row('alpha').innerText(), /^\d+\.\d\d\/s \/ 0\.00\/s$/);
    const beta = await row('beta').innerText();
    assert.ok(Number(/\/ (\S+)\/s$/.exec(beta)?.[1]) > 0, `beta's errors: ${beta}`);
  });

  it('per-alias figures travel with each new point only; axe-core finds no serious violation', async () => {
    const since = Date.now();
    await sleep(6_000);
    const frames = b.frames
      .filter((f) => f.dir === 'received' && f.at >= since)
      .map((f) => ({ bytes: Buffer.byteLength(f.payload), frame: JSON.parse(f.payload) as RatesFrame }))
      .filter((f) => f.frame.type === 'telemetry');
    assert.ok(frames.length >= 1);
    for (const { frame } of frames) {
      assert.equal(frame.router_rates, undefined, 'the 15 minutes are sent once, not again');
      for (const p of frame.router_rates_delta ?? [])
        assert.deepEqual(Object.keys(p.by_alias).sort(), ['alpha', 'beta']);
    }
    const perMin = (frames.reduce((n, f) => n + f.bytes, 0) * 60_000) / (Date.now() - since);
    console.log(`telemetry with two aliases: ${Math.round(perMin / 1024)} KB a minute`);
    assert.deepEqual(await axeSerious(b.page), [], 'Telemetry with the alias selector');
  });
});
