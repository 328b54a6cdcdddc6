// Screenshots of the dashboard for README.md and docs/reference/dashboard.md:
// `npm run build && node build/tools/screenshots.js` writes docs/images/dashboard-<view>.png.
// It starts `svc-serving up --demo-traffic` (engine sim, router, controller, dashboard, demo
// work) with a fake two-card nvidia-smi, and a small real fleet (nats-server, two node
// controllers, a third node declared but down, `fleet serve`) read by `dashboard serve
// --workload-fleet-url`; then opens each view in Debian's chromium (test/dashboard/support.ts).
import { mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { CLI, eventually, spawnNode, type RunningProcess } from '../test/support/processes.js';
import { fakeNvidiaSmi, launchBrowser, serveDashboard, type Browser } from '../test/dashboard/support.js';
import { startSmallFleet, type SmallFleet } from '../test/dashboard/fleet-support.js';

const OUT = fileURLToPath(new URL('../../docs/images/', import.meta.url));

/** Tallest picture taken (px): a long table is cut, so the pictures (and the npm package, which ships docs/) stay small. */
const MAX_HEIGHT = 1600;

async function shoot(b: Browser, name: string): Promise<void> {
  const size = await b.page.evaluate<{ width: number; height: number }>(
    '({ width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight })',
  );
  await b.page.screenshot({
    path: join(OUT, `dashboard-${name}.png`),
    fullPage: true,
    clip: { x: 0, y: 0, width: size.width, height: Math.min(size.height, MAX_HEIGHT) },
  });
  process.stdout.write(`wrote docs/images/dashboard-${name}.png\n`);
}

async function nodeViews(b: Browser, url: string, token: string): Promise<void> {
  await b.page.goto(url);
  // Two scrapes at least, so that the router panel has points; demo traffic meanwhile.
  await b.page.locator('#router-charts .chart-card .figures', { hasText: 'requests ' }).waitFor({ timeout: 20_000 });
  await sleep(20_000);
  await shoot(b, 'telemetry');
  await b.page.click('#tab-workloads');
  await b.page.fill('#credential', token);
  await b.page.click('#connect');
  await b.page.locator('#session-status', { hasText: 'connected as local-reader' }).waitFor();
  await eventually(async () => (await b.page.locator('#records tbody tr').count()) >= 3, 30_000);
  await shoot(b, 'workloads');
  await b.page.setViewportSize({ width: 390, height: 844 });
  await shoot(b, 'phone');
  await b.page.setViewportSize({ width: 1280, height: 820 });
  await b.page.click('#tab-requests');
  await b.page.locator('#rq-finished tbody tr').first().waitFor({ timeout: 20_000 });
  await b.page.locator('#rq-finished tbody tr button').first().click();
  await b.page.locator('#rq-detail-title', { hasText: 'Diagnosis of' }).waitFor({ timeout: 5_000 });
  await shoot(b, 'requests');
}

async function fleetView(b: Browser, fleet: SmallFleet, dash: RunningProcess): Promise<void> {
  await b.page.goto(`${dash.url}#workloads`);
  await b.page.fill('#credential', fleet.policy.tokens.reader);
  await b.page.click('#connect');
  await b.page.locator('#session-status', { hasText: 'ops-reader' }).waitFor();
  await b.page.click('#tab-fleet');
  await eventually(async () => (await b.page.locator('#fleet-nodes tbody tr').count()) === 3, 20_000);
  await b.page.locator('#fleet-nodes tr[data-host="node-a"]', { hasText: 'configured' }).waitFor({ timeout: 10_000 });
  await b.page.click('#fleet-nodes tr[data-host="node-a"] button');
  await b.page.locator('#fleet-node-title', { hasText: 'Node node-a' }).waitFor();
  await shoot(b, 'fleet');
}

async function main(): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  const home = mkdtempSync(join(tmpdir(), 'svc-screenshots-'));
  const running: RunningProcess[] = [];
  let fleet: SmallFleet | undefined;
  let b: Browser | undefined;
  try {
    const node = await spawnNode(
      CLI,
      ['up', '--demo-traffic', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'],
      { env: { SVC_SERVING_HOME: home, SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x2.csv') } },
    );
    running.push(node);
    await eventually(() => /dashboard +http/.test(node.output()), 10_000);
    const url = /dashboard +(http:\/\/\S+)/.exec(node.output())![1]!;
    fleet = await startSmallFleet(['node-a', 'node-b'], ['node-c']);
    fleet.setRecords('node-a', ['node-a-model', 'node-a-embed']);
    const dash = await serveDashboard(
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
      fleet.policy.env,
    );
    running.push(dash);
    b = await launchBrowser();
    await nodeViews(b, url, readFileSync(join(home, 'reader.token'), 'utf8').trim());
    await fleetView(b, fleet, dash);
  } finally {
    await b?.close();
    await Promise.all(running.map((p) => p.stop()));
    await fleet?.stop();
  }
}

await main();
