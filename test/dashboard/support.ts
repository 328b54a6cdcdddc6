import assert from 'node:assert/strict';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';

/** Debian's chromium (DEPENDENCIES.md); `.ci/run` installs it. Never a downloaded browser. */
export const CHROMIUM = '/usr/bin/chromium';
/** Browser suites skip (visibly, with the reason) on a machine without it; CI has it. */

export const FIXTURES = fileURLToPath(new URL('../../../test/fixtures/nvidia-smi/', import.meta.url));
export const ARTIFACTS = fileURLToPath(new URL('../../../test-artifacts/', import.meta.url));
const QUERY = '--query-gpu=index,uuid,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw';

export interface Browser {
  readonly context: BrowserContext;
  readonly page: Page;
  /** Every WebSocket payload the page sent or received, in order. */
  readonly frames: { dir: 'sent' | 'received'; at: number; payload: string }[];
  close(): Promise<void>;
}

/** Headless chromium with the flags DEPENDENCIES.md lists and a fresh user-data dir. */
export async function launchBrowser(): Promise<Browser> {
  const context = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), 'svc-chromium-')), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 820 },
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const frames: Browser['frames'] = [];
  page.on('websocket', (ws) => {
    ws.on('framesent', (f) => frames.push({ dir: 'sent', at: Date.now(), payload: String(f.payload) }));
    ws.on('framereceived', (f) => frames.push({ dir: 'received', at: Date.now(), payload: String(f.payload) }));
  });
  // A script error or a CSP violation is a bug of the page: fail loudly.
  const errors: string[] = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/WebSocket connection|ERR_CONNECTION_REFUSED/.test(m.text())) errors.push(m.text());
  });
  return {
    context,
    page,
    frames,
    async close() {
      await context.close();
      assert.deepEqual(errors, [], 'no page errors or console errors');
    },
  };
}

/** A stand-in nvidia-smi that checks its arguments and prints a recorded output. */
export function fakeNvidiaSmi(fixture: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'svc-fake-smi-'));
  const path = join(dir, 'nvidia-smi');
  writeFileSync(
    path,
    `#!/bin/sh\n[ "$1" = "${QUERY}" ] || exit 6\n[ "$2" = "--format=csv,noheader,nounits" ] || exit 7\nexec cat '${join(FIXTURES, fixture)}'\n`,
  );
  chmodSync(path, 0o755);
  return path;
}

/** `svc-serving dashboard serve` on a free loopback port, as its own process. */
export function serveDashboard(args: string[], env: Record<string, string> = {}): Promise<RunningProcess> {
  return spawnNode(CLI, ['dashboard', 'serve', '--host', '127.0.0.1', '--port', '0', ...args], {
    env: { SVC_NVIDIA_SMI: '/nonexistent/nvidia-smi', ...env },
  });
}

/**
 * Looks for `canary` everywhere the credential must never be: cookies, both storages, the URL,
 * the DOM (text, markup and input values) and the given server logs. Thrown when: found.
 */
export async function assertNoCanary(
  b: Browser,
  canary: string,
  logs: Record<string, string>,
  step: string,
): Promise<void> {
  const places: string[] = [];
  const cookies = await b.context.cookies();
  if (JSON.stringify(cookies).includes(canary)) places.push('cookies');
  // A string, not a function: the test build has no DOM types (tsconfig lib is ES2023 only).
  const page = await b.page.evaluate<Record<string, string>>(`({
    local: JSON.stringify(Object.entries(localStorage)),
    session: JSON.stringify(Object.entries(sessionStorage)),
    text: document.body.innerText,
    html: document.documentElement.outerHTML,
    inputs: JSON.stringify([...document.querySelectorAll('input')].map((i) => i.value)),
    url: location.href,
  })`);
  for (const [where, text] of Object.entries(page)) if (text.includes(canary)) places.push(where);
  if (b.page.url().includes(canary)) places.push('page url');
  for (const f of b.frames)
    if (f.dir === 'received' && f.payload.includes(canary)) places.push('a frame from the server');
  for (const [name, text] of Object.entries(logs)) if (text.includes(canary)) places.push(`${name} log`);
  assert.deepEqual(places, [], `after "${step}" the canary credential appears in: ${places.join(', ')}`);
}

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/** axe-core's serious and critical violations (and heading-order problems) of the page as it is now. */
export async function axeSerious(page: Page): Promise<string[]> {
  // Evaluated through the debugging protocol: the page's CSP (no inline script) still holds.
  await page.evaluate(`${AXE};0`);
  const violations = await page.evaluate<{ id: string; impact: string | null; nodes: { target: string[] }[] }[]>(
    `axe.run(document, { resultTypes: ['violations'] }).then((r) => r.violations.map((v) => ({ id: v.id, impact: v.impact, nodes: v.nodes.map((n) => ({ target: n.target })) })))`,
  );
  return violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical' || v.id === 'heading-order')
    .map((v) => `${v.id} (${v.impact}): ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

export function artifactsDir(): string {
  mkdirSync(ARTIFACTS, { recursive: true });
  return ARTIFACTS;
}

/**
 * `svc-serving up --demo-traffic` on free ports with its home in `home` (no GPU sampling), once
 * its dashboard listens: the process and the dashboard's URL.
 */
export async function startDemoNode(home: string): Promise<{ node: RunningProcess; dashboardUrl: string }> {
  const node = await spawnNode(
    CLI,
    ['up', '--demo-traffic', '--router-port', '0', '--controller-port', '0', '--dashboard-port', '0'],
    { env: { SVC_SERVING_HOME: home, SVC_NVIDIA_SMI: '/nonexistent' } },
  );
  await eventually(() => /dashboard +http/.test(node.output()), 10_000);
  return { node, dashboardUrl: /dashboard +(http:\/\/\S+)/.exec(node.output())![1]! };
}
