import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { NodeResult } from '../../src/schema/envelopes.js';
import { applyNodeDelta, viewDigest, type NodeDelta } from '../../src/dashboard/view-delta.js';
import { eventually, type RunningProcess } from '../support/processes.js';
import { launchBrowser, startDemoNode, type Browser } from './support.js';

/** The budget of issue 27: what one open tab may cost per minute on the wire, both ways. */
const BUDGET_BYTES_PER_MIN = 150 * 1024;
const WINDOW_MS = 20_000;

interface Frame {
  type: string;
  gen?: number;
  seq?: number;
  base?: number;
  digest?: string;
  result?: NodeResult;
  delta?: NodeDelta;
  failure?: string;
}

// `svc-serving up --demo-traffic` (engine sim, router, controller, dashboard, a request every
// two seconds and demo jobs) read by its own dashboard in chromium: after the first whole
// view, the page is sent what changed, and at every check its view is the fresh full read.
describe('Live by deltas under demo traffic', { timeout: 120_000 }, () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-dash-deltas-'));
  let node: RunningProcess;
  let b: Browser;
  let dashboardUrl = '';

  before(async () => {
    ({ node, dashboardUrl } = await startDemoNode(home));
    b = await launchBrowser();
  });
  after(async () => {
    try {
      await b?.close();
    } finally {
      await node?.stop();
    }
  });

  it(`costs at most ${BUDGET_BYTES_PER_MIN / 1024} KB a minute per tab, and its view equals the fresh read at every check`, async () => {
    await b.page.goto(`${dashboardUrl}#workloads`);
    await b.page.fill('#credential', readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
    // Some demo work on the node before measuring, so that there is a view to keep up to date.
    await eventually(async () => (await b.page.locator('#records tbody tr').count()) >= 3, 20_000);
    const received = (since: number): Frame[] =>
      b.frames.filter((f) => f.dir === 'received' && f.at >= since).map((f) => JSON.parse(f.payload) as Frame);
    // The test's own reconstruction from the frames, with the server's module: the view the
    // page must be showing after each frame, checked against the digest of the server's read.
    let mine: { seq: number; result: NodeResult } | undefined;
    let consumed = 0;
    const follow = (): void => {
      const all = b.frames.filter((f) => f.dir === 'received').map((f) => JSON.parse(f.payload) as Frame);
      for (const f of all.slice(consumed)) {
        if (f.type === 'workloads' && f.result && !f.failure) mine = { seq: f.seq!, result: f.result };
        if (f.type === 'workloads-delta') {
          assert.ok(mine && mine.seq === f.base, 'every delta applies to the view sent just before it');
          mine = { seq: f.seq!, result: applyNodeDelta(mine.result, f.delta!) };
          assert.equal(viewDigest(mine.result), f.digest, 'the delta rebuilds exactly the fresh full read');
        }
      }
      consumed = all.length;
    };
    const t0 = Date.now();
    let checks = 0;
    let wholeViewBytes = 0;
    while (Date.now() - t0 < WINDOW_MS) {
      await sleep(2_000);
      follow();
      // The page's own view: the same seq and digest as the server's fresh read of that seq,
      // and the records drawn are exactly the view's.
      const shown = await b.page.evaluate<{ seq: string; digest: string; ids: string[] }>(`({
        seq: document.getElementById('panel-workloads').dataset.viewSeq,
        digest: document.getElementById('panel-workloads').dataset.viewDigest,
        ids: [...document.querySelectorAll('#records tbody tr')].map((tr) => tr.dataset.id),
      })`);
      assert.ok(mine, 'a view was sent');
      if (Number(shown.seq) !== mine.seq) continue; // a frame arrived between the two looks
      checks += 1;
      assert.equal(shown.digest, viewDigest(mine.result), `check ${checks}: the page's view is the fresh read`);
      const expected = mine.result.sources.flatMap((s) => s.records.map((r) => r.id)).sort();
      assert.deepEqual([...shown.ids].sort(), expected, `check ${checks}: the rows drawn are the view's records`);
      wholeViewBytes += Buffer.byteLength(JSON.stringify({ type: 'workloads', result: mine.result }));
    }
    const t1 = Date.now();
    assert.ok(checks >= 5, `at least five checks matched a frame (${checks})`);
    const inWindow = b.frames.filter((f) => f.at >= t0 && f.at < t1);
    const bytes = inWindow.reduce((n, f) => n + Buffer.byteLength(f.payload), 0);
    const perMinute = (bytes * 60_000) / (t1 - t0);
    const frames = received(t0);
    const deltas = frames.filter((f) => f.type === 'workloads-delta');
    const moved = deltas.reduce(
      (n, f) => n + f.delta!.sources.reduce((m, s) => m + s.added.length + s.changed.length + s.removed.length, 0),
      0,
    );
    // The window is 20 s, scaled to a minute (a full minute would triple the test's time).
    const note = `${Math.round(perMinute / 1024)} KB/min over ${Math.round((t1 - t0) / 1000)} s scaled to a minute; ${deltas.length} deltas moving ${moved} records; whole views at each check would have been ${Math.round(wholeViewBytes / 1024)} KB`;
    const byType = new Map<string, number>();
    for (const f of inWindow) {
      const k = `${f.dir} ${(JSON.parse(f.payload) as Frame).type}`;
      byType.set(k, (byType.get(k) ?? 0) + Buffer.byteLength(f.payload));
    }
    console.log(note, JSON.stringify([...byType]));
    assert.ok(deltas.length >= 5, `the page kept reading by deltas: ${note}`);
    assert.ok(moved > 0, `the demo traffic changed records while measured: ${note}`);
    assert.ok(
      frames.every((f) => f.type !== 'workloads' || f.failure !== undefined),
      'no whole view was resent after the first',
    );
    assert.ok(perMinute <= BUDGET_BYTES_PER_MIN, note);
  });
});
