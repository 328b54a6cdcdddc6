import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eventually, type RunningProcess } from '../support/processes.js';
import { axeSerious, fakeNvidiaSmi, launchBrowser, serveDashboard, startDemoNode, type Browser } from './support.js';
import { startSmallFleet, type SmallFleet } from './fleet-support.js';

// `svc-serving up` with a little traffic, read in chromium: axe-core on every view, focus,
// and a phone-sized screen.
describe('dashboard accessibility and phone layout', { timeout: 120_000 }, () => {
  const home = mkdtempSync(join(tmpdir(), 'svc-dash-a11y-'));
  let node: RunningProcess;
  let b: Browser;
  let dashboardUrl = '';

  /** axe-core's serious and critical violations of the page as it is now. */
  const serious = (): Promise<string[]> => axeSerious(b.page);

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

  it('axe-core finds no serious or critical violation (nor a heading-order problem) on any view', async () => {
    await b.page.goto(dashboardUrl);
    await b.page.locator('#gpu-status', { hasText: 'no GPU telemetry' }).waitFor();
    // The router panel: three charts with their figures in words once two scrapes are in.
    await b.page.locator('#router-charts .chart-card .figures', { hasText: 'requests ' }).waitFor({ timeout: 15_000 });
    assert.equal(await b.page.locator('#router-charts .chart-card').count(), 3);
    assert.deepEqual(await serious(), [], 'Telemetry');
    await b.page.click('#tab-workloads');
    await b.page.fill('#credential', readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
    await eventually(async () => (await b.page.locator('#records tbody tr').count()) >= 2, 20_000);
    assert.deepEqual(await serious(), [], 'Workloads');
    // A filter puts five sources "outside the filter" (the badges that were faded below contrast).
    await b.page.selectOption('#f-owner', 'router');
    await b.page.locator('#sources tr.outside').first().waitFor({ timeout: 5_000 });
    assert.deepEqual(await serious(), [], 'Workloads filtered by owner');
    await b.page.selectOption('#f-owner', '');
    await b.page.click('#tab-requests');
    await b.page.locator('#rq-finished tbody tr').first().waitFor({ timeout: 15_000 });
    await b.page.locator('#rq-finished tbody tr button').first().click();
    await b.page.locator('#rq-detail-title', { hasText: 'Diagnosis of' }).waitFor({ timeout: 5_000 });
    assert.deepEqual(await serious(), [], 'Requests with a diagnosis open');
  });

  it('on a 390 px phone the status comes before the filters, and the truncation figures need no sideways scroll', async () => {
    await b.page.click('#tab-workloads');
    await b.page.setViewportSize({ width: 390, height: 844 });
    try {
      const layout = await b.page.evaluate<{
        statusTop: number;
        filtersTop: number;
        width: number;
        view: number;
        figures: { left: number; right: number }[];
      }>(`({
        statusTop: document.getElementById('node-status').getBoundingClientRect().top,
        filtersTop: document.getElementById('filters').getBoundingClientRect().top,
        width: document.documentElement.scrollWidth,
        view: document.documentElement.clientWidth,
        figures: [...document.querySelectorAll('#sources tbody td:nth-child(3), #sources tbody td:nth-child(4)')].map((td) => {
          const r = td.getBoundingClientRect();
          return { left: r.left, right: r.right };
        }),
      })`);
      assert.ok(layout.statusTop < layout.filtersTop, 'the node status is above the filters');
      assert.ok(layout.width <= layout.view, `the page is ${layout.width} px wide in a ${layout.view} px window`);
      assert.ok(layout.figures.length >= 12, 'returned and left-out figures for every source');
      for (const f of layout.figures)
        assert.ok(f.left >= 0 && f.right <= layout.view, `a figure at ${f.left}-${f.right} px`);
      assert.deepEqual(await serious(), [], 'Workloads on a phone');
    } finally {
      await b.page.setViewportSize({ width: 1280, height: 820 });
    }
  });

  it('after Disconnect, keyboard focus goes to the Connect button, not to <body>', async () => {
    await b.page.focus('#disconnect');
    await b.page.keyboard.press('Enter');
    await b.page.locator('#session-status', { hasText: 'not connected' }).waitFor();
    assert.equal(await b.page.evaluate<string>('document.activeElement.id'), 'connect');
  });
});

// The Fleet view, against a real fleet with a node down, a node opened, and on a phone.
describe('dashboard Fleet view accessibility', { timeout: 120_000 }, () => {
  let fleet: SmallFleet;
  let dash: RunningProcess;
  let b: Browser;
  const serious = (): Promise<string[]> => axeSerious(b.page);

  before(async () => {
    fleet = await startSmallFleet(['node-a'], ['node-b']);
    dash = await serveDashboard(
      [
        '--workload-controller-url',
        fleet.controllers.get('node-a')!,
        '--workload-expected-node',
        'node-a',
        '--workload-authorization-policy',
        fleet.policy.path,
        '--workload-fleet-url',
        fleet.fleetUrl,
      ],
      // Ten cards: the Telemetry tab's compact table is checked here too.
      { ...fleet.policy.env, SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x10.csv') },
    );
    b = await launchBrowser();
  });
  after(async () => {
    try {
      await b?.close();
    } finally {
      await dash?.stop();
      await fleet?.stop();
    }
  });

  it('axe-core finds no serious or critical violation on the Fleet view, with a node open, and on a phone', async () => {
    await b.page.goto(dash.url);
    await b.page.locator('#gpu-table tbody tr').nth(9).waitFor({ timeout: 10_000 });
    assert.deepEqual(await serious(), [], 'Telemetry with ten cards (one table)');
    await b.page.click('#tab-workloads');
    await b.page.fill('#credential', fleet.policy.tokens.reader);
    await b.page.click('#connect');
    await b.page.locator('#session-status', { hasText: 'ops-reader' }).waitFor();
    await b.page.click('#tab-fleet');
    await eventually(async () => (await b.page.locator('#fleet-nodes tbody tr').count()) === 2, 15_000);
    assert.deepEqual(await serious(), [], 'Fleet');
    await b.page.click('#fleet-nodes tr[data-host="node-a"] button');
    await b.page.locator('#fleet-node-title', { hasText: 'Node node-a' }).waitFor();
    assert.deepEqual(await serious(), [], 'Fleet with a node open');
    await b.page.setViewportSize({ width: 390, height: 844 });
    const w = await b.page.evaluate<{ page: number; view: number }>(
      '({ page: document.documentElement.scrollWidth, view: document.documentElement.clientWidth })',
    );
    assert.ok(w.page <= w.view, `the page is ${w.page} px wide in a ${w.view} px window`);
    assert.deepEqual(await serious(), [], 'Fleet on a phone');
  });
});
