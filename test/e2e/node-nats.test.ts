import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { checkNodeResult, type NodeResult } from '../../src/schema/envelopes.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { connectNatsBus, type NatsBus } from '../../src/streams/nats-bus.js';
import { hasDuplicateKey } from '../../src/schema/json-duplicates.js';
import { workloadsSubject } from '../../src/schema/subjects.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { rec } from '../support/records.js';

const H = 'node-a';
const STALE_S = 0.8;
const FIXTURE = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));

describe('node pipeline over a real nats-server (separate processes)', () => {
  let nats: NatsServerHandle;
  let controller: RunningProcess;
  let actor: RunningProcess | undefined;
  let client: NatsBus;
  const dir = mkdtempSync(join(tmpdir(), 'svc-e2e-'));
  const policy = writeTestPolicy(dir);
  const recordsFile = join(dir, 'records.json');

  const writeRecords = (records: WorkloadRecord[]) => writeFileSync(recordsFile, JSON.stringify(records));
  const read = async (args: Record<string, unknown> = {}): Promise<NodeResult> => {
    const res = await fetch(`${controller.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'node_workloads', arguments: args }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as NodeResult;
    assert.ok(checkNodeResult.Check(body), 'the reply is a valid NodeResult');
    return body;
  };
  const manifestSource = (r: NodeResult) => r.sources.find((s) => s.owner === 'manifest')!;
  const startActor = () =>
    spawnNode(FIXTURE, [], {
      env: {
        NATS_URL: nats.url,
        HOST_ID: H,
        OWNER: 'manifest',
        RECORDS_FILE: recordsFile,
        POLL_MS: '100',
        STALE_MS: String(STALE_S * 1000),
      },
    });

  before(async () => {
    nats = await startNatsServer();
    const config = join(dir, 'node.toml');
    writeFileSync(
      config,
      `[node]\nhost_id = "${H}"\nlisten = "127.0.0.1:0"\nnats_url = "${nats.url}"\nauthorization_policy = "policy.toml"\nstale_after_seconds = ${STALE_S}\n`,
    );
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', config], { env: policy.env });
    client = await connectNatsBus({ servers: nats.url, name: 'test-client' });
  });
  after(async () => {
    await actor?.stop();
    await client?.close();
    const code = await controller?.stop();
    assert.equal(code, 0, 'the controller exits 0 on SIGTERM');
    assert.doesNotMatch(controller.output(), new RegExp(policy.tokens.reader), 'no credential in the controller log');
    await nats?.stop();
  });

  it('before the other owners speak, their sources are unavailable (no-observation); the job stores are live', async () => {
    const r = await eventually(async () => {
      const x = await read();
      return x.sources.find((s) => s.owner === 'benchmark')!.status === 'complete' ? x : undefined;
    }, 3000);
    assert.equal(r.status, 'partial');
    for (const s of r.sources) {
      if (['controller', 'benchmark', 'media'].includes(s.owner)) assert.equal(s.status, 'complete', s.owner);
      else assert.deepEqual([s.status, s.reason], ['unavailable', 'no-observation'], s.owner);
    }
  });

  it('a batch published by another process shows up within a second', async () => {
    writeRecords([rec(H, 'manifest', 'recipe-1', { at: Date.now() })]);
    actor = await startActor();
    const t0 = Date.now();
    const r = await eventually(
      async () => {
        const x = await read({ owner: 'manifest' });
        return manifestSource(x).records.length === 1 ? x : undefined;
      },
      3000,
      20,
    );
    assert.ok(Date.now() - t0 < 1000, `seen after ${Date.now() - t0} ms`);
    assert.equal(manifestSource(r).status, 'complete');
    assert.equal(manifestSource(r).records[0]!.state, 'configured');
  });

  it('an update in the authority follows', async () => {
    const created = Date.now() - 1000;
    writeRecords([
      rec(H, 'manifest', 'recipe-1', {
        at: Date.now(),
        created_at: formatTimestamp(created),
        state: 'absent',
        phase: 'absent',
        observation_quality: 'absent',
      }),
    ]);
    await eventually(async () => manifestSource(await read()).records[0]?.state === 'absent', 3000);
  });

  it('answers node_workloads over NATS request/reply, and bad filters with a fixed problem', async () => {
    const reply = JSON.parse(
      new TextDecoder().decode(
        await client.request(workloadsSubject(H), new TextEncoder().encode('{"owner":"manifest"}'), {
          timeoutMs: 2000,
        }),
      ),
    );
    assert.ok(checkNodeResult.Check(reply));
    assert.equal(reply.expected_host, H);
    const bad = JSON.parse(
      new TextDecoder().decode(
        await client.request(workloadsSubject(H), new TextEncoder().encode('{"owner":"MEDIA-CANARY"}'), {
          timeoutMs: 2000,
        }),
      ),
    );
    assert.deepEqual(bad, {
      type: 'urn:svc-serving:problem:invalid-input',
      title: 'Invalid input',
      status: 400,
      code: 'invalid_input',
    });
    // A filter named twice (escaped or not) is refused, as on HTTP, whichever copy comes last.
    for (const body of [
      '{"owner":"controller","owner":"router"}',
      '{"owner":"router","owner":"controller"}',
      '{"limit":5,"\\u006cimit":6}',
    ]) {
      const twice = JSON.parse(
        new TextDecoder().decode(
          await client.request(workloadsSubject(H), new TextEncoder().encode(body), { timeoutMs: 2000 }),
        ),
      );
      assert.deepEqual(
        twice,
        { type: 'urn:svc-serving:problem:invalid-input', title: 'Invalid input', status: 400, code: 'invalid_input' },
        body,
      );
    }
  });

  it('stopping the actor turns the source stale, then unavailable', async () => {
    await actor!.stop('SIGKILL');
    actor = undefined;
    const stale = await eventually(async () => {
      const x = manifestSource(await read());
      return x.status === 'partial' ? x : undefined;
    }, 5000);
    assert.equal(stale.reason, 'timeout');
    assert.equal(stale.records[0]!.state, 'absent', 'a stale record keeps its state');
    assert.equal(stale.records[0]!.observation_quality, 'stale');
    assert.equal(stale.truncation.omitted, null);
    const gone = await eventually(
      async () => {
        const x = manifestSource(await read());
        return x.status === 'unavailable' ? x : undefined;
      },
      15_000,
      200,
    );
    assert.equal(gone.reason, 'timeout');
    assert.deepEqual(gone.records, []);
  });

  it('recovers after nats-server restarts, without restarting the controller', async () => {
    actor = await startActor();
    await eventually(async () => manifestSource(await read()).status === 'complete', 5000);
    await nats.restart();
    writeRecords([rec(H, 'manifest', 'recipe-2', { at: Date.now() })]);
    const r = await eventually(
      async () => {
        const x = manifestSource(await read());
        return x.status === 'complete' && x.records.some((y) => y.id === rec(H, 'manifest', 'recipe-2').id)
          ? x
          : undefined;
      },
      15_000,
      100,
    );
    assert.ok(r);
    const reply = await eventually(
      () => client.request(workloadsSubject(H), new Uint8Array(0), { timeoutMs: 1000 }),
      10_000,
      200,
    );
    assert.ok(checkNodeResult.Check(JSON.parse(new TextDecoder().decode(reply))));
    // The controller's log lines about the outage are JSON a parser reads whole: no member twice
    // (a nested logger repeating `component` would leave a parser only the last value).
    const lines = controller!
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{'));
    assert.ok(
      lines.some((l) => /nats/i.test(l)),
      'the outage was logged',
    );
    for (const l of lines) assert.equal(hasDuplicateKey(l), false, l);
  });
});
