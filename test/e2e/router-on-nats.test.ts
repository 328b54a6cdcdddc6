import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NodeResult } from '../../src/schema/envelopes.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';

const H = 'gpu-1';

describe('router and controller as separate processes on one nats-server', () => {
  let nats: NatsServerHandle;
  let sim: RunningProcess;
  let router: RunningProcess;
  let controller: RunningProcess;
  const dir = mkdtempSync(join(tmpdir(), 'svc-rn-'));
  const policy = writeTestPolicy(dir);
  const env = { ...policy.env, SVC_ROUTER_KEYS: 'dp-key-router-on-nats' };

  before(async () => {
    nats = await startNatsServer();
    sim = await spawnNode(CLI, [
      'engine',
      'sim',
      '--listen',
      '127.0.0.1:0',
      '--ttft-ms',
      '0',
      '--token-delay-ms',
      '150',
      '--tokens',
      '8',
    ]);
    writeFileSync(
      join(dir, 'router.toml'),
      [
        '[server]',
        `host_id = "${H}"`,
        'listen = "127.0.0.1:0"',
        'api_keys_env = "SVC_ROUTER_KEYS"',
        'authorization_policy = "policy.toml"',
        `nats_url = "${nats.url}"`,
        'stale_after_seconds = 2',
        '',
        '[[models]]',
        'alias = "m"',
        `upstream = "${sim.url}/v1"`,
        'upstream_model = "sim-model"',
      ].join('\n'),
    );
    writeFileSync(
      join(dir, 'node.toml'),
      `[node]\nhost_id = "${H}"\nlisten = "127.0.0.1:0"\nnats_url = "${nats.url}"\nauthorization_policy = "policy.toml"\nstale_after_seconds = 2\n`,
    );
    router = await spawnNode(CLI, ['router', 'serve', '--config', join(dir, 'router.toml')], { env });
    controller = await spawnNode(CLI, ['controller', 'serve', '--config', join(dir, 'node.toml')], { env });
  });
  after(async () => {
    await Promise.all([router?.stop(), controller?.stop(), sim?.stop()]);
    await nats?.stop();
  });

  const nodeRead = async (): Promise<NodeResult> => {
    const res = await fetch(`${controller.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'node_workloads', arguments: { owner: 'router' } }),
    });
    return (await res.json()) as NodeResult;
  };

  it('the controller shows a request streaming through the router, then its terminal record', async () => {
    const pending = fetch(`${router.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer dp-key-router-on-nats', 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hello' }] }),
    });
    const live = await eventually(
      async () => {
        const r = await nodeRead();
        return r.sources[0]!.records.find((x) => x.state === 'streaming');
      },
      5000,
      50,
    );
    assert.equal(live.owner, 'router');
    assert.equal(live.host, H);
    const res = await pending;
    await res.text();
    const fin = await eventually(
      async () => {
        const r = await nodeRead();
        return r.sources[0]!.records.find((x) => x.id === live.id && x.state === 'terminal');
      },
      5000,
      50,
    );
    assert.equal(fin.outcome, 'success');
    assert.equal(fin.created_at, live.created_at, 'a reader never rewrites created_at');
  });

  it('stopping the router makes its source stale, never an empty complete', async () => {
    await router.stop();
    const r = await eventually(
      async () => {
        const x = await nodeRead();
        return x.sources[0]!.status !== 'complete' ? x : undefined;
      },
      8000,
      200,
    );
    assert.equal(r.sources[0]!.truncation.omitted, null);
    assert.notEqual(r.status, 'complete');
  });
});
