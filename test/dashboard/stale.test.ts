import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, spawnNode, type RunningProcess } from '../support/processes.js';
import { rec } from '../support/records.js';
import { assertNoCanary, launchBrowser, serveDashboard, type Browser } from './support.js';

const H = 'node-a';
const STALE_S = 0.8;
const FIXTURE = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));

// Staleness needs an owner that stops reporting while the controller keeps running: a
// controller with a small stale_after_seconds and a router-owner actor as separate processes
// on a real nats-server (the controller runs no router actor of its own); stopping the actor
// leaves its last observation to age.
describe('dashboard labels stale records with their age', { timeout: 120_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-dash-stale-'));
  const policy = writeTestPolicy(dir);
  let nats: NatsServerHandle;
  let controller: RunningProcess;
  let actor: RunningProcess;
  let dash: RunningProcess;
  let b: Browser;

  before(async () => {
    nats = await startNatsServer();
    const config = join(dir, 'node.toml');
    writeFileSync(
      config,
      `[node]\nhost_id = "${H}"\nlisten = "127.0.0.1:0"\nnats_url = "${nats.url}"\nauthorization_policy = "policy.toml"\nstale_after_seconds = ${STALE_S}\n`,
    );
    const recordsFile = join(dir, 'records.json');
    writeFileSync(recordsFile, JSON.stringify([rec(H, 'router', 'req-1', { at: Date.now() })]));
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', config], { env: policy.env });
    actor = await spawnNode(FIXTURE, [], {
      env: {
        NATS_URL: nats.url,
        HOST_ID: H,
        OWNER: 'router',
        RECORDS_FILE: recordsFile,
        POLL_MS: '100',
        STALE_MS: String(STALE_S * 1000),
      },
    });
    dash = await serveDashboard(
      [
        '--workload-controller-url',
        controller.url,
        '--workload-expected-node',
        H,
        '--workload-authorization-policy',
        policy.path,
      ],
      policy.env,
    );
    b = await launchBrowser();
  });
  after(async () => {
    // Closing the browser throws when the page logged an error: the processes stop anyway.
    try {
      await b?.close();
    } finally {
      await actor?.stop();
      await dash?.stop();
      await controller?.stop();
      await nats?.stop();
    }
  });

  it("keeps the record's state, labels it stale with the age of its evidence, and marks the source partial", async () => {
    await b.page.goto(dash.url);
    await b.page.click('#tab-workloads');
    await b.page.selectOption('#f-owner', 'router');
    await b.page.fill('#credential', policy.tokens.reader);
    await b.page.click('#connect');
    const row = b.page.locator('#records tbody tr[data-state="streaming"]');
    await row.locator('.q-recorded').waitFor({ timeout: 5_000 });

    // SIGKILL: an owner that dies says nothing more (a graceful stop may withdraw its records).
    await actor.stop('SIGKILL');
    await row.locator('.q-stale').waitFor({ timeout: 6_000 });
    assert.match(await row.innerText(), /stale\s+observed \d+ s ago/);
    assert.equal(await row.getAttribute('data-state'), 'streaming', 'a stale record keeps its original state');
    const source = b.page.locator('#sources tr[data-owner="router"]');
    assert.match(await source.innerText(), /partial\s+\d+\s+count unknown\s+its observations are too old/);
    assert.match(
      await b.page.locator('#node-status').innerText(),
      /partial — trust the records shown, but this is not the whole inventory/,
    );
    await assertNoCanary(
      b,
      policy.tokens.reader,
      { dashboard: dash.output(), controller: controller.output() },
      'stale',
    );
  });
});
