import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { eventually, type RunningProcess } from '../support/processes.js';
import { assertNoCanary, launchBrowser, serveDashboard, type Browser } from './support.js';
import { startSmallFleet, type SmallFleet } from './fleet-support.js';
import { recordId } from '../../src/schema/record-id.js';

const manifestId = (host: string, native: string) => recordId(host, 'manifest', 'recipe-serve', native);

/** The budget of issue 27 for one open tab, applied to the Fleet view's frames alone. */
const BUDGET_BYTES_PER_MIN = 150 * 1024;

// A real fleet (nats-server, two node controllers with a manifest actor each, a third node
// declared but never started, `fleet serve`) read through `dashboard serve
// --workload-fleet-url` in chromium, with the credential typed at Connect.
describe('dashboard Fleet view against a real fleet controller', { timeout: 120_000 }, () => {
  let fleet: SmallFleet;
  let dash: RunningProcess;
  let stranger: RunningProcess;
  let b: Browser;
  const args = (expected: string) => [
    '--workload-controller-url',
    fleet.controllers.get('node-a')!,
    '--workload-expected-node',
    expected,
    '--workload-authorization-policy',
    fleet.policy.path,
    '--workload-fleet-url',
    fleet.fleetUrl,
  ];
  const connect = async (url: string) => {
    await b.page.goto(`${url}#workloads`);
    await b.page.fill('#credential', fleet.policy.tokens.reader);
    await b.page.click('#connect');
    await b.page
      .locator('#session-status', { hasText: 'signed in as ops-reader' })
      .or(b.page.locator('#session-status', { hasText: 'connected as ops-reader' }))
      .or(b.page.locator('#session-status', { hasText: 'could not be read' }))
      .waitFor();
    await b.page.click('#tab-fleet');
  };
  const fleetFrames = (since: number) =>
    b.frames.filter((f) => f.dir === 'received' && f.at >= since && /^\{"type":"fleet/.test(f.payload));

  before(async () => {
    fleet = await startSmallFleet(['node-a', 'node-b'], ['node-c']);
    dash = await serveDashboard(args('node-a'), fleet.policy.env);
    // Its expected node is not one of the fleet's: not the fleet the operator meant.
    stranger = await serveDashboard(args('node-z'), fleet.policy.env);
    b = await launchBrowser();
  });
  after(async () => {
    try {
      await b?.close();
    } finally {
      await dash?.stop();
      await stranger?.stop();
      await fleet?.stop();
    }
  });

  it('lists every declared node with its status, condition, counts and age; a node opens to its sources and records', async () => {
    await connect(dash.url);
    await eventually(async () => (await b.page.locator('#fleet-nodes tbody tr').count()) === 3, 15_000);
    await b.page
      .locator('#fleet-nodes tr[data-host="node-a"]', { hasText: '1 configured' })
      .waitFor({ timeout: 10_000 });
    const down = b.page.locator('#fleet-nodes tr[data-host="node-c"]');
    assert.match(await down.innerText(), /unavailable/);
    assert.match(await down.innerText(), /unreachable \(no answer within node_timeout_ms\)/);
    assert.match(await down.innerText(), /not read/, 'a failed node has no counts, not zero');
    assert.match(await b.page.locator('#fleet-status').innerText(), /3 declared node\(s\)/);
    assert.match(await b.page.locator('#fleet-nodes tr[data-host="node-a"]').innerText(), /s ago/);
    await b.page.click('#fleet-nodes tr[data-host="node-a"] button');
    await b.page.locator('#fleet-node-title', { hasText: 'Node node-a' }).waitFor();
    assert.equal(await b.page.evaluate<string>('document.activeElement.id'), 'fleet-node-title');
    assert.equal(await b.page.locator('#fleet-sources tbody tr').count(), 6, 'all six sources');
    assert.match(await b.page.locator('#fleet-records').innerText(), /manifest/);
    await b.page.click('#fleet-nodes tr[data-host="node-c"] button');
    await b.page.locator('#fleet-node-title', { hasText: 'Node node-c' }).waitFor();
    assert.match(await b.page.locator('#fleet-records-empty').innerText(), /not an empty inventory/);
    await assertNoCanary(b, fleet.policy.tokens.reader, { dashboard: dash.output() }, 'fleet read');
  });

  it('after the first whole fleet, only what changed travels, and the page view equals each fresh read', async () => {
    const since = Date.now();
    fleet.setRecords('node-b', ['node-b-model', 'node-b-second']);
    await b.page
      .locator('#fleet-nodes tr[data-host="node-b"]', { hasText: '2 configured' })
      .waitFor({ timeout: 10_000 });
    await sleep(6_000);
    const frames = fleetFrames(since);
    const deltas = frames.filter((f) => f.payload.startsWith('{"type":"fleet-delta"'));
    console.log(
      deltas
        .slice(-2)
        .map((f) => f.payload)
        .join('\n'),
    );
    assert.ok(deltas.length >= 3, `${deltas.length} fleet-delta frames`);
    // node-a's record changes only its source_timestamp (its owner re-observes it): a patch
    // of that member travels, never the record again.
    for (const f of deltas) {
      const d = JSON.parse(f.payload) as {
        delta: { nodes: { host: string; node?: unknown; delta?: { sources: { added: unknown[] }[] } }[] };
      };
      const a = d.delta.nodes.find((n) => n.host === 'node-a');
      assert.ok(a === undefined || (a.node === undefined && a.delta!.sources.every((s) => s.added.length === 0)));
    }
    assert.ok(
      deltas.some((f) => f.payload.includes(manifestId('node-b', 'node-b-second'))),
      "node-b's new record travels",
    );
    const last = JSON.parse(frames.at(-1)!.payload) as { seq: number; digest: string };
    await eventually(
      async () => (await b.page.getAttribute('#panel-fleet', 'data-view-seq')) === String(last.seq),
      3_000,
    );
    assert.equal(await b.page.getAttribute('#panel-fleet', 'data-view-digest'), last.digest);
    const bytes = frames.reduce((n, f) => n + Buffer.byteLength(f.payload), 0);
    const perMin = (bytes * 60_000) / (Date.now() - since);
    console.log(`fleet view: ${Math.round(perMin / 1024)} KB a minute (${frames.length} frames)`);
    assert.ok(perMin < BUDGET_BYTES_PER_MIN, `${Math.round(perMin)} bytes a minute`);
  });

  it('a node that stays down is not sent again, though its age on the page follows each read; it is sent when it comes up and when it goes down', async () => {
    type NodeEntry = { host: string; node?: { condition?: string; status: string }; delta?: unknown };
    type Delta = { seq: number; delta: { collected_at: string; hosts?: string[]; nodes: NodeEntry[] } };
    const deltasSince = (since: number) =>
      fleetFrames(since)
        .filter((f) => f.payload.startsWith('{"type":"fleet-delta"'))
        .map((f) => ({ bytes: Buffer.byteLength(f.payload), frame: JSON.parse(f.payload) as Delta }));
    const nodeC = (d: Delta) => d.delta.nodes.find((n) => n.host === 'node-c');
    const since = Date.now();
    await sleep(8_000);
    const quiet = deltasSince(since);
    assert.ok(quiet.length >= 3, `${quiet.length} rounds`);
    for (const { frame } of quiet) {
      assert.equal(nodeC(frame), undefined, `round ${frame.seq}: node-c, unchanged and still down, is not resent`);
      assert.equal(frame.delta.hosts, undefined, 'the same declared nodes are not listed again');
    }
    // Its age on the page is the latest try (the fleet's read), not the first one: the page
    // shows the last frame sent (a round may have come since the quiet ones were counted).
    const latest = quiet.at(-1)!.frame;
    const shown = await eventually(async () => {
      const seq = Number(await b.page.getAttribute('#panel-fleet', 'data-view-seq'));
      if (!(seq >= latest.seq)) return undefined;
      const frame = deltasSince(since).find((d) => d.frame.seq === seq)?.frame;
      const ts = await b.page.getAttribute('#fleet-nodes tr[data-host="node-c"] span.age', 'data-ts');
      return frame !== undefined && ts === frame.delta.collected_at ? frame : undefined;
    }, 5_000);
    assert.ok(shown.seq >= latest.seq);
    assert.match(await b.page.locator('#fleet-nodes tr[data-host="node-c"]').innerText(), /tried \d+ s ago/);
    const perMin = (quiet.reduce((n, d) => n + d.bytes, 0) * 60_000) / (Date.now() - since);
    console.log(`fleet view, node-c down and unchanged: ${Math.round(perMin / 1024)} KB a minute`);

    const up = Date.now();
    await fleet.startHost('node-c');
    const row = b.page.locator('#fleet-nodes tr[data-host="node-c"]');
    await row.filter({ hasText: '1 configured' }).waitFor({ timeout: 15_000 });
    const cameUp = deltasSince(up)
      .map((d) => nodeC(d.frame))
      .find((n) => n?.node !== undefined);
    assert.ok(cameUp?.node && cameUp.node.condition === undefined, 'the node that came up travels whole, with records');

    const down = Date.now();
    await fleet.stopHost('node-c');
    await row.filter({ hasText: 'unreachable' }).waitFor({ timeout: 15_000 });
    const wentDown = deltasSince(down)
      .map((d) => nodeC(d.frame))
      .find((n) => n?.node?.condition !== undefined);
    assert.equal(wentDown?.node?.condition, 'unreachable', 'the node that went down travels, with its condition');
    assert.match(await row.innerText(), /not read/);
    const last = JSON.parse(fleetFrames(down).at(-1)!.payload) as { seq: number; digest: string };
    await eventually(
      async () => (await b.page.getAttribute('#panel-fleet', 'data-view-seq')) === String(last.seq),
      3_000,
    );
    assert.equal(await b.page.getAttribute('#panel-fleet', 'data-view-digest'), last.digest);
  });

  it('Disconnect clears the fleet and stops reading it', async () => {
    await b.page.click('#tab-workloads');
    await b.page.click('#disconnect');
    await b.page.click('#tab-fleet');
    assert.equal(await b.page.locator('#fleet-nodes').isHidden(), true);
    assert.match(await b.page.locator('#fleet-status').innerText(), /Connect \(Workloads tab\)/);
    const since = Date.now();
    await sleep(3_000);
    assert.equal(fleetFrames(since).length, 0, 'no fleet frame after Disconnect');
  });

  it("a fleet that does not declare the dashboard's expected node is refused, never shown", async () => {
    await connect(stranger.url);
    await b.page
      .locator('#fleet-status', { hasText: "not among the fleet's declared nodes" })
      .waitFor({ timeout: 10_000 });
    assert.equal(await b.page.locator('#fleet-nodes').isHidden(), true);
    assert.ok(!stranger.output().includes(fleet.policy.tokens.reader));
  });
});
