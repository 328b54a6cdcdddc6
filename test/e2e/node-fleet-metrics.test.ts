import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectNatsBus, type NatsBus } from '../../src/streams/nats-bus.js';
import { observationSubject, workloadsSubject } from '../../src/schema/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { batch, enc, rec } from '../support/records.js';
import { noPromtool, promtoolCheck } from '../support/promtool.js';

/** The value of one series (labels as written), or undefined when absent. */
function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('controller and fleet metrics over a real nats-server (real processes)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-node-metrics-'));
  const policy = writeTestPolicy(dir);
  let nats: NatsServerHandle;
  let controller: RunningProcess;
  let fleet: RunningProcess;
  let bus: NatsBus;

  before(async () => {
    nats = await startNatsServer();
    writeFileSync(
      join(dir, 'node.toml'),
      [
        '[node]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'authorization_policy = "policy.toml"',
        'stale_after_seconds = 5',
        'state_dir = "state-a"',
      ].join('\n'),
    );
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', join(dir, 'node.toml')], { env: policy.env });
    writeFileSync(
      join(dir, 'fleet.toml'),
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 500',
        'metrics_require_auth = true',
        '',
        ...['[[nodes]]', 'host_id = "node-a"', '', '[[nodes]]', 'host_id = "node-z"', ''],
        ...['[[nodes]]', 'host_id = "node-s"', 'sleeping = true', ''],
      ].join('\n'),
    );
    fleet = await spawnNode(CLI, ['fleet', 'serve', '--config', join(dir, 'fleet.toml')], { env: policy.env });
    bus = await connectNatsBus({ servers: nats.url, name: 'test' });
  });
  after(async () => {
    await bus?.close();
    await Promise.all([controller?.stop(), fleet?.stop()]);
    await nats?.stop();
  });

  const scrape = async (url: string, token?: string): Promise<string> => {
    const res = await fetch(`${url}/metrics`, token ? { headers: { authorization: `Bearer ${token}` } } : {});
    assert.equal(res.status, 200);
    return res.text();
  };

  it('batches by owner and fate, source status and age, reads by way and outcome', async () => {
    const now = Date.now();
    // A full window of the manifest owner: folded. Then the same delta again: out of order.
    bus.publish(
      observationSubject('node-a', 'manifest'),
      enc(batch('node-a', 'manifest', { at: now, seq: 1, upserts: [rec('node-a', 'manifest', 'job-1', { at: now })] })),
    );
    bus.publish(
      observationSubject('node-a', 'manifest'),
      enc(batch('node-a', 'manifest', { at: now - 1000, seq: 1, full: false })),
    );
    // Not JSON: malformed, counted under the owner its subject names.
    bus.publish(observationSubject('node-a', 'router'), new TextEncoder().encode('{not json'));
    await bus.flush();
    const text = await eventually(async () => {
      const t = await scrape(controller.url);
      return sample(t, 'svc_node_batches_total{owner="router",result="malformed"}') === 1 &&
        sample(t, 'svc_node_batches_total{owner="manifest",result="out_of_order"}') === 1
        ? t
        : undefined;
    }, 5000);
    assert.equal(sample(text, 'svc_node_batches_total{owner="manifest",result="folded"}'), 1);
    assert.equal(sample(text, 'svc_node_source_status{owner="manifest",status="complete"}'), 1);
    assert.equal(sample(text, 'svc_node_source_status{owner="manifest",status="unavailable"}'), 0);
    assert.equal(sample(text, 'svc_node_source_status{owner="router",status="unavailable"}'), 1);
    const age = sample(text, 'svc_node_source_age_seconds{owner="manifest"}')!;
    assert.ok(age >= 0 && age < 5, `age ${age}`);
    assert.equal(sample(text, 'svc_node_source_age_seconds{owner="router"}'), undefined, 'never heard: no age');
    assert.equal(sample(text, 'svc_nats_connected'), 1);
    assert.equal(sample(text, 'svc_nats_reconnects_total'), 0);

    // Reads: NATS (one good, one bad), HTTP (one good, one refused).
    await bus.request(workloadsSubject('node-a'), new Uint8Array(0), { timeoutMs: 2000 });
    await bus.request(workloadsSubject('node-a'), new TextEncoder().encode('{"limit":"x"}'), { timeoutMs: 2000 });
    const call = (token?: string) =>
      fetch(`${controller.url}/tools/call`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
        body: JSON.stringify({ name: 'node_workloads', arguments: {} }),
      }).then((r) => r.text());
    await call(policy.tokens.reader);
    await call();
    const reads = await eventually(async () => {
      const t = await scrape(controller.url);
      return sample(t, 'svc_node_reads_total{via="http",outcome="refused"}') === 1 ? t : undefined;
    }, 3000);
    assert.equal(sample(reads, 'svc_node_reads_total{via="nats",outcome="ok"}'), 1);
    assert.equal(sample(reads, 'svc_node_reads_total{via="nats",outcome="invalid"}'), 1);
    assert.equal(sample(reads, 'svc_node_reads_total{via="http",outcome="ok"}'), 1);
    assert.equal(sample(reads, 'svc_node_reads_total{via="mcp",outcome="ok"}'), 0);
  });

  it('the fleet: one condition per declared node (ok included), read durations, and metrics_require_auth', async () => {
    assert.equal((await fetch(`${fleet.url}/metrics`)).status, 401);
    const text = await scrape(fleet.url, policy.tokens.reader);
    assert.equal(sample(text, 'svc_fleet_node_condition{node="node-a",condition="ok"}'), 1);
    assert.equal(sample(text, 'svc_fleet_node_condition{node="node-a",condition="unreachable"}'), 0);
    assert.equal(sample(text, 'svc_fleet_node_condition{node="node-z",condition="unreachable"}'), 1);
    assert.equal(sample(text, 'svc_fleet_node_condition{node="node-s",condition="sleeping"}'), 1);
    const nodes = new Set([...text.matchAll(/node="([^"]+)"/g)].map((m) => m[1]));
    assert.deepEqual([...nodes].sort(), ['node-a', 'node-s', 'node-z']);
    assert.equal(sample(text, 'svc_nats_connected'), 1);
    // A client read is timed; the scrape's own fan-out is not.
    assert.equal(sample(text, 'svc_fleet_read_duration_seconds_count'), 0);
    const res = await fetch(`${fleet.url}/tools/call`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${policy.tokens.reader}` },
      body: JSON.stringify({ name: 'fleet_workloads', arguments: {} }),
    });
    assert.equal(res.status, 200);
    await res.text();
    const after = await scrape(fleet.url, policy.tokens.reader);
    assert.equal(sample(after, 'svc_fleet_read_duration_seconds_count'), 1);
    const sum = sample(after, 'svc_fleet_read_duration_seconds_sum')!;
    assert.ok(sum > 0 && sum < 5, `read took ${sum} s`);
  });

  it('promtool check metrics reports nothing for the controller and the fleet', { skip: noPromtool }, async () => {
    assert.deepEqual(promtoolCheck(await scrape(controller.url)), { status: 0, output: '' });
    assert.deepEqual(promtoolCheck(await scrape(fleet.url, policy.tokens.reader)), { status: 0, output: '' });
  });

  it('a lost NATS connection reads 0, and its return counts one reconnect', async () => {
    await nats.kill();
    await eventually(async () => sample(await scrape(controller.url), 'svc_nats_connected') === 0 || undefined, 5000);
    await nats.restart();
    const text = await eventually(async () => {
      const t = await scrape(controller.url);
      return sample(t, 'svc_nats_connected') === 1 ? t : undefined;
    }, 8000);
    assert.equal(sample(text, 'svc_nats_reconnects_total'), 1);
  });
});
