import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type { FleetResult } from '../../src/schema/envelopes.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { nodeResultJson } from '../../src/schema/result-json.js';
import { foldBatch } from '../../src/streams/fold-node.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { startNatsServer, type NatsServerHandle } from '../support/nats-server.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { RawNats } from '../support/raw-nats.js';
import { batch, rec } from '../support/records.js';

const SHIPPED_CONF = fileURLToPath(new URL('../../../deploy/nats.conf', import.meta.url));

/** A NodeResult that claims to be node-a's, holding a record node-a never had. */
function forgedNodeA(): Buffer {
  const now = Date.now();
  const snap = createNodeSnapshot('node-a');
  for (const owner of CONTROLLER_OWNERS)
    foldBatch(
      snap,
      batch('node-a', owner, {
        seq: 1,
        at: now,
        upserts: owner === 'manifest' ? [rec('node-a', 'manifest', 'forged-by-b', { at: now })] : [],
      }),
    );
  return Buffer.from(
    nodeResultJson(queryNode(snap, resolveFilters({}), now, { staleAfterMs: 30_000, owners: CONTROLLER_OWNERS })),
  );
}

/** Reply subjects an attacker would try next to one it saw: counted tokens (decimal and base 36) and their neighbours. */
function neighbours(reply: string): string[] {
  const at = reply.lastIndexOf('.');
  const prefix = reply.slice(0, at + 1);
  const token = reply.slice(at + 1);
  const out: string[] = [];
  for (const radix of [10, 36]) {
    const n = Number.parseInt(token, radix);
    if (!Number.isSafeInteger(n)) continue;
    for (let d = -20; d <= 20; d++) if (d !== 0 && n + d >= 0) out.push(prefix + (n + d).toString(radix));
  }
  return out;
}

/**
 * Node users may publish into the fleet's inbox (that is where they answer: deploy/nats.conf),
 * and each sees the reply subject of the fleet's request to it. The fleet's reply tokens must
 * be unguessable, or a node could answer another node's pending request first, as that node,
 * and be believed (the answer names the right host). node-b here is a raw-protocol attacker
 * with the shipped permissions, answering every request the fleet sends it with node-a's
 * forged NodeResult on every subject next to its own reply subject.
 */
describe('a node cannot answer the fleet for another node (unguessable reply tokens, shipped permissions)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-forge-'));
  const policy = writeTestPolicy(dir);
  const pw = {
    'node-a': `p${randomBytes(12).toString('hex')}`,
    'node-b': `p${randomBytes(12).toString('hex')}`,
    fleet: `p${randomBytes(12).toString('hex')}`,
  };
  let nats: NatsServerHandle;
  const procs: RunningProcess[] = [];
  let attacker: RawNats;
  let fleetUrl = '';
  const seen: string[] = [];
  let stop = false;

  before(async () => {
    nats = await startNatsServer({
      configFile: SHIPPED_CONF,
      jetstream: false,
      env: { NODE_A_NATS_PASSWORD: pw['node-a'], NODE_B_NATS_PASSWORD: pw['node-b'], FLEET_NATS_PASSWORD: pw.fleet },
    });
    const nodeCfg = join(dir, 'node-a.toml');
    writeFileSync(
      nodeCfg,
      [
        '[node]',
        'host_id = "node-a"',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'nats_user = "node-a"',
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'state_dir = "state-a"',
      ].join('\n'),
    );
    procs.push(
      await spawnNode(CLI, ['controller', 'serve', '--config', nodeCfg], {
        env: { ...policy.env, NODE_NATS_PASSWORD: pw['node-a'] },
      }),
    );
    const fleetCfg = join(dir, 'fleet.toml');
    writeFileSync(
      fleetCfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'nats_user = "fleet"',
        'nats_password_env = "FLEET_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 1000',
        '',
        '[[nodes]]',
        'host_id = "node-a"',
        '',
        '[[nodes]]',
        'host_id = "node-b"',
      ].join('\n'),
    );
    const fleet = await spawnNode(CLI, ['fleet', 'serve', '--config', fleetCfg], {
      env: { ...policy.env, FLEET_NATS_PASSWORD: pw.fleet },
    });
    procs.push(fleet);
    fleetUrl = fleet.url;
    attacker = await RawNats.open(nats.port, 'node-b', pw['node-b']);
    attacker.sub('svc.v1.node-b.workloads');
    await attacker.flush();
    const forged = forgedNodeA();
    // Answer each request as soon as it arrives: node-a's forged answer on every neighbour first.
    void (async () => {
      let handled = 0;
      while (!stop) {
        for (; handled < attacker.msgs.length; handled++) {
          const reply = attacker.msgs[handled]!.reply;
          if (!reply) continue;
          seen.push(reply);
          for (const guess of neighbours(reply)) attacker.pub(guess, forged);
        }
        await sleep(1);
      }
    })();
  });
  after(async () => {
    stop = true;
    attacker?.close();
    await Promise.all(procs.map((p) => p.stop()));
    await nats?.stop();
  });

  it("over many reads, node-a's entry is always node-a's own answer, never the forged one", async () => {
    const read = async (): Promise<FleetResult> => {
      const res = await fetch(`${fleetUrl}/tools/call`, {
        method: 'POST',
        headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
        body: '{"name":"fleet_workloads","arguments":{}}',
      });
      assert.equal(res.status, 200);
      return (await res.json()) as FleetResult;
    };
    await eventually(async () => (await read()).nodes[0]!.condition === undefined, 8000, 100);
    for (let i = 0; i < 25; i++) {
      const r = await read();
      const a = r.nodes.find((n) => n.expected_host === 'node-a')!;
      const ids = a.sources.flatMap((s) => s.records.map((x) => x.id));
      assert.ok(
        !ids.includes(rec('node-a', 'manifest', 'forged-by-b').id),
        `read ${i}: the forged record was believed`,
      );
    }
    assert.ok(seen.length >= 25, "the attacker saw the fleet's requests");
    const tokens = seen.map((s) => s.slice(s.lastIndexOf('.') + 1));
    assert.equal(new Set(tokens).size, tokens.length, 'no token repeats');
    for (const t of tokens) assert.match(t, /^[0-9a-f]{32}$/, 'a token carries 128 random bits');
  });
});
