import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { NodeResult } from '../../src/schema/envelopes.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { controllerNodeResult, sendJson, startFake, type FakeServer } from '../cli/fake-servers.js';
import { writeTestPolicy } from '../support/policy.js';
import type { RunningProcess } from '../support/processes.js';
import { fakeNvidiaSmi, launchBrowser, serveDashboard, type Browser } from './support.js';

/** A controller's answer for node-a (all six sources, the router's with records), collected at `at`. */
function sixSources(at: number): NodeResult {
  return { ...controllerNodeResult('node-a'), collected_at: formatTimestamp(at) };
}

// What the page says must be what it knows: a credential the controller refuses is not
// "connected", a timestamp from a clock ahead of the browser's is not "0 s ago", and locked
// telemetry is not "waiting for a sample".
describe('the dashboard page does not claim what it does not know', { timeout: 120_000 }, () => {
  const policy = writeTestPolicy();
  let controller: FakeServer;
  let answer: 'refuse' | 'future' | 'now' = 'refuse';
  let asked = 0;
  let b: Browser;
  const running: RunningProcess[] = [];

  before(async () => {
    // A controller whose own policy does not know the reader credential the dashboard's does.
    controller = await startFake((_req, res) => {
      asked++;
      if (answer === 'refuse')
        sendJson(res, 401, { type: 'urn:svc-serving:problem:unauthenticated', title: 'Unauthenticated', status: 401 });
      else sendJson(res, 200, sixSources(Date.now() + (answer === 'future' ? 90_000 : 0)));
    });
    b = await launchBrowser();
  });
  after(async () => {
    for (const p of running) await p.stop();
    await b?.close();
    await controller?.close();
  });

  /** A dashboard reading the fake controller, its Workloads tab open and Connect pressed with the reader. */
  const connectWorkloads = async (): Promise<RunningProcess> => {
    const d = await serveDashboard(
      [
        '--workload-controller-url',
        controller.url,
        '--workload-expected-node',
        'node-a',
        '--workload-authorization-policy',
        policy.path,
      ],
      policy.env,
    );
    running.push(d);
    await b.page.goto(d.url);
    await b.page.click('#tab-workloads');
    await b.page.fill('#credential', policy.tokens.reader);
    await b.page.click('#connect');
    return d;
  };

  it('a credential the controller refuses turns the pill from connected to refused, and back once it is taken', async () => {
    await connectWorkloads();
    await b.page
      .locator('#session-status', { hasText: 'the controller refused the credential (HTTP 401)' })
      .waitFor({ timeout: 5_000 });
    assert.match((await b.page.locator('#session-status').getAttribute('class')) ?? '', /pill-bad/);
    assert.match(await b.page.locator('#node-status').innerText(), /did not accept the credential \(HTTP 401\)/);
    // Refused: the page polls slowly (one read per 10 s), not every 2 s.
    const before = asked;
    await new Promise((r) => setTimeout(r, 5_000));
    assert.ok(asked - before <= 1, `${asked - before} reads in 5 s after the refusal`);

    // The controller now answers, with a clock 90 s ahead of this browser's: the next slow
    // poll finds it and the pill comes back.
    answer = 'future';
    await b.page.locator('#session-status', { hasText: 'connected as' }).waitFor({ timeout: 15_000 });
    const status = await b.page.locator('#node-status').innerText();
    assert.match(status, /collected 9\d s in the future \(the clocks disagree; age unknown\)/);
    assert.doesNotMatch(status, /0 s ago/);
  });

  it('a number filter the browser cannot parse is invalid, not "no filter"; a hung dashboard server leaves nothing on screen as current', async () => {
    answer = 'now';
    const d = await connectWorkloads();
    await b.page.locator('#session-status', { hasText: 'connected as' }).waitFor({ timeout: 10_000 });
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 5_000 });
    // Polls that bring nothing new do not rewrite the node's live status line (a screen
    // reader would announce it every 2 s): only its age ticks.
    const rewrites = await b.page.evaluate<number>(`new Promise((resolve) => {
      let n = 0;
      const o = new MutationObserver((list) => { n += list.length; });
      o.observe(document.getElementById('node-status'), { childList: true });
      setTimeout(() => { o.disconnect(); resolve(n); }, 5000);
    })`);
    assert.equal(rewrites, 0, 'the status line was rewritten by polls that changed nothing');
    // `5e` in a number input reads as '' to scripts: the page must call it invalid and read nothing.
    await b.page.click('#f-limit');
    await b.page.keyboard.type('5e');
    await b.page.locator('#node-status', { hasText: 'Nothing is shown' }).waitFor({ timeout: 5_000 });
    assert.equal(await b.page.locator('#f-limit').getAttribute('aria-invalid'), 'true');
    assert.equal(await b.page.locator('#records').isHidden(), true);
    await b.page.fill('#f-limit', '');
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 10_000 });
    // The dashboard server hangs (stopped, its socket still open): after 20 s without an
    // answer, the records go and the page says nothing shown is current (the read is overdue),
    // or that the server is unreachable (its link went silent: decision 0037), whichever it
    // notices first.
    d.proc.kill('SIGSTOP');
    try {
      await b.page
        .locator('#node-status', { hasText: /nothing shown is current|unreachable: nothing can be read now/ })
        .waitFor({ timeout: 35_000 });
      assert.equal(await b.page.locator('#records').isHidden(), true);
      assert.doesNotMatch(await b.page.locator('#session-status').innerText(), /connected as/);
    } finally {
      d.proc.kill('SIGCONT');
    }
    // It answers again: the records come back.
    await b.page.locator('#records tbody tr').first().waitFor({ timeout: 15_000 });
  });

  it('locked telemetry says locked, not "waiting for the first sample"', async () => {
    const d = await serveDashboard(['--auth-env', 'DASH_TELEMETRY'], {
      DASH_TELEMETRY: 'telemetry-credential-0123456789',
      SVC_NVIDIA_SMI: fakeNvidiaSmi('h100x2.csv'),
    });
    running.push(d);
    await b.page.goto(d.url);
    await b.page.locator('#telemetry-auth').waitFor();
    await b.page
      .locator('#gpu-status', { hasText: 'GPU telemetry: locked — enter the telemetry credential' })
      .waitFor({ timeout: 5_000 });
    assert.doesNotMatch(await b.page.locator('#gpu-status').innerText(), /waiting/);
    // No router is wired to this dashboard: its figures are not "not current", they are locked.
    const router = await b.page.locator('#router-status').innerText();
    assert.doesNotMatch(router, /not current/);
    assert.match(router, /locked/);
  });
});
