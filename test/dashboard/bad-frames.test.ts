import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { RunningProcess } from '../support/processes.js';
import { fakeNvidiaSmi, launchBrowser, serveDashboard, type Browser } from './support.js';

// A broken or foreign dashboard server can send anything on the page's WebSocket. Frames are
// put between the real server and the page here (Playwright's WebSocket routing), so the page
// meets them as it would in the field.
describe('frames the dashboard page cannot read', { timeout: 120_000 }, () => {
  let d: RunningProcess;
  let b: Browser;
  before(async () => {
    d = await serveDashboard([], { SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x2.csv') });
    b = await launchBrowser();
  });
  after(async () => {
    // The server first: closing the browser throws when the page logged an error.
    await d?.stop();
    await b?.close();
  });

  it('non-frames are ignored without a script error; an unreadable telemetry frame clears the figures until a good one comes', async () => {
    const errors: string[] = [];
    b.page.on('pageerror', (e) => errors.push(String(e)));
    let toPage: ((m: string) => void) | undefined;
    let passThrough = true;
    await b.page.routeWebSocket(/\/ws$/, (ws) => {
      const server = ws.connectToServer();
      server.onMessage((m) => {
        if (passThrough) ws.send(m);
      });
      toPage = (m) => ws.send(m);
    });
    await b.page.goto(d.url);
    const status = b.page.locator('#gpu-status');
    await status.filter({ hasText: '2 GPU card(s) sampled by nvidia-smi' }).waitFor({ timeout: 15_000 });
    assert.equal(await b.page.locator('#gpu-aggregate').isHidden(), false);

    // Not frames at all: ignored, the figures stay, and no script error.
    for (const m of ['null', '42', '"text"', '[]', '{', '{"type":"unknown-kind"}']) toPage!(m);
    await new Promise((r) => setTimeout(r, 300));
    assert.match(await status.innerText(), /2 GPU card\(s\) sampled/);

    // Telemetry frames whose content cannot be read: the figures go, and the page says why.
    passThrough = false;
    for (const gpu of ['garbage', null, { status: 'ok', cards: 'x' }]) {
      toPage!(JSON.stringify({ type: 'telemetry', gpu, router: null }));
      await status
        .filter({ hasText: 'the dashboard server sent a frame this page cannot read' })
        .waitFor({ timeout: 5_000 });
      assert.equal(await b.page.locator('#gpu-aggregate').isHidden(), true, JSON.stringify(gpu));
    }
    // The real server's next frame is drawn again.
    passThrough = true;
    await status.filter({ hasText: '2 GPU card(s) sampled by nvidia-smi' }).waitFor({ timeout: 10_000 });
    assert.equal(await b.page.locator('#gpu-aggregate').isHidden(), false);
    assert.deepEqual(errors, []);
  });
});
