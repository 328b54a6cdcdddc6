import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { connect, PermissionViolationError, type NatsConnection } from '@nats-io/transport-node';
import { checkFleetResult, type FleetResult, type NodeResult, type SourceResult } from '../../src/schema/envelopes.js';
import type { Owner } from '../../src/schema/enums.js';
import { passwords } from '../support/nats-cluster.js';
import { RawLeaf, startShippedLeaf, type NatsLeafSetup } from '../support/nats-leaf.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { batch, enc, rec } from '../support/records.js';

const ACTOR = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));
const NODES = ['node-a', 'node-c', 'node-d'];
const PW = passwords([
  'NODE_A_NATS_PASSWORD',
  'NODE_B_NATS_PASSWORD',
  'FLEET_NATS_PASSWORD',
  'SITE_EAST_LEAF_PASSWORD',
  'NODE_C_NATS_PASSWORD',
  'NODE_D_NATS_PASSWORD',
]);
const pw = (user: string): string => PW[`${user.toUpperCase().replace('-', '_')}_NATS_PASSWORD`]!;

describe('a site as a leaf node of the hub (deploy/nats-leaf: real nats-servers, controllers and fleet)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-leaf-'));
  const policy = writeTestPolicy(dir);
  const procs: RunningProcess[] = [];
  let nats: NatsLeafSetup;
  let fleet: RunningProcess;
  const url = (host: string): string => (host === 'node-a' ? nats.hub.url : nats.site.url);

  const start = async (script: string, args: string[], env: Record<string, string>): Promise<RunningProcess> => {
    const p = await spawnNode(script, args, { env: { ...policy.env, ...env } });
    procs.push(p);
    return p;
  };
  const startNode = async (host: string): Promise<void> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[node]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        `nats_url = "${url(host)}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'stale_after_seconds = 5',
        `state_dir = "state-${host}"`,
      ].join('\n'),
    );
    await start(CLI, ['controller', 'serve', '--config', cfg], { NODE_NATS_PASSWORD: pw(host) });
    const records = join(dir, `${host}-records.json`);
    writeFileSync(records, JSON.stringify([rec(host, 'manifest', `model-of-${host}`, { at: Date.now() })]));
    await start(ACTOR, [], {
      NATS_URL: url(host),
      NATS_USER: host,
      NATS_PASS: pw(host),
      HOST_ID: host,
      OWNER: 'manifest',
      RECORDS_FILE: records,
      POLL_MS: '100',
      STALE_MS: '5000',
    });
  };
  const read = async (): Promise<FleetResult> => {
    const res = await fetch(`${fleet.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'fleet_workloads', arguments: {} }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as FleetResult;
    assert.ok(checkFleetResult.Check(body), 'a valid fleet result');
    return body;
  };
  const node = (r: FleetResult, h: string): NodeResult => r.nodes.find((n) => n.expected_host === h)!;
  const source = (r: FleetResult, h: string, owner: Owner): SourceResult | undefined =>
    node(r, h).sources.find((s) => s.owner === owner);
  /** A valid batch that the host's view would fold if it arrived: a fresh owner (no actor publishes recipes here). */
  const recipeBatch = (host: string, native: string): Uint8Array =>
    enc(batch(host, 'recipe', { seq: 1, at: Date.now(), upserts: [rec(host, 'recipe', native, { at: Date.now() })] }));
  const has = (r: FleetResult, h: string, native: string): boolean =>
    node(r, h).sources.some((s) => s.records.some((x) => x.id === rec(h, 'recipe', native).id));

  /** Everything a hub client allowed to see node-a's subjects receives, decoded. */
  const watchNodeA = async (): Promise<{ nc: NatsConnection; seen: string[] }> => {
    const nc = await connect({
      servers: nats.hub.url,
      user: 'node-a',
      pass: pw('node-a'),
      inboxPrefix: '_INBOX_node-a',
    });
    const seen: string[] = [];
    nc.subscribe('svc.v1.node-a.obs.recipe', {
      callback: (_e, m) => {
        seen.push(new TextDecoder().decode(m.data));
      },
    });
    await nc.flush();
    return { nc, seen };
  };

  before(async () => {
    nats = await startShippedLeaf(PW);
    await Promise.all(NODES.map(startNode));
    const cfg = join(dir, 'fleet.toml');
    writeFileSync(
      cfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.hub.url}"`,
        'nats_user = "fleet"',
        'nats_password_env = "FLEET_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        'node_timeout_ms = 1000',
        '',
        ...NODES.flatMap((h) => ['[[nodes]]', `host_id = "${h}"`, '']),
      ].join('\n'),
    );
    fleet = await start(CLI, ['fleet', 'serve', '--config', cfg], { FLEET_NATS_PASSWORD: PW['FLEET_NATS_PASSWORD']! });
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await nats?.stop();
  });

  it("the hub's fleet reads both nodes of the site through the leaf connection, each answering for its own host", async () => {
    const r = await eventually(
      async () => {
        const x = await read();
        return NODES.every((h) => source(x, h, 'manifest')?.status === 'complete') ? x : undefined;
      },
      10_000,
      100,
    );
    for (const h of NODES) {
      assert.equal(node(r, h).condition, undefined, h);
      assert.deepEqual(
        source(r, h, 'manifest')!.records.map((x) => [x.host, x.id]),
        [[h, rec(h, 'manifest', `model-of-${h}`).id]],
        h,
      );
    }
  });

  it('a node of the site cannot publish for another host, of the site or of the hub: its server refuses, and nothing arrives', async () => {
    const watcher = await watchNodeA();
    const intruder = await connect({
      servers: nats.site.url,
      user: 'node-c',
      pass: pw('node-c'),
      inboxPrefix: '_INBOX_node-c',
    });
    const refused: string[] = [];
    void (async () => {
      for await (const s of intruder.status())
        if (s.type === 'error' && s.error instanceof PermissionViolationError) refused.push(s.error.subject);
    })();
    try {
      intruder.publish('svc.v1.node-d.obs.recipe', recipeBatch('node-d', 'forged-by-c'));
      intruder.publish('svc.v1.node-a.obs.recipe', recipeBatch('node-a', 'forged-by-c'));
      await intruder.flush();
      await eventually(() => refused.length === 2, 3000, 20);
      assert.deepEqual(refused.sort(), ['svc.v1.node-a.obs.recipe', 'svc.v1.node-d.obs.recipe']);
      // The same batch on node-c's own subject is taken: the refusals are about the subject.
      intruder.publish('svc.v1.node-c.obs.recipe', recipeBatch('node-c', 'own-of-c'));
      const r = await eventually(
        async () => {
          const x = await read();
          return has(x, 'node-c', 'own-of-c') ? x : undefined;
        },
        5000,
        100,
      );
      assert.equal(has(r, 'node-d', 'forged-by-c'), false, 'node-d folded nothing from node-c');
      assert.equal(has(r, 'node-a', 'forged-by-c'), false, 'node-a folded nothing from node-c');
      assert.deepEqual(watcher.seen, [], "nothing reached the hub on node-a's subjects");
    } finally {
      await intruder.close();
      await watcher.nc.close();
    }
  });

  it('the leaf link cannot carry a publish for a hub host, even from a site server that ignores the permissions it is told', async () => {
    const watcher = await watchNodeA();
    const raw = await RawLeaf.login(nats.leafPort, 'site-east', PW['SITE_EAST_LEAF_PASSWORD']!);
    try {
      raw.publish('svc.v1.node-a.obs.recipe', recipeBatch('node-a', 'forged-by-site'));
      raw.publish('svc.v1.node-b.workloads', new Uint8Array(0));
      // The control: the same link does carry a batch for a host of the site.
      raw.publish('svc.v1.node-d.obs.recipe', recipeBatch('node-d', 'control-from-site'));
      await raw.flush();
      const r = await eventually(
        async () => {
          const x = await read();
          return has(x, 'node-d', 'control-from-site') ? x : undefined;
        },
        5000,
        100,
      );
      assert.equal(has(r, 'node-a', 'forged-by-site'), false, 'node-a folded nothing from the site');
      assert.equal(node(r, 'node-a').condition, undefined);
      assert.deepEqual(watcher.seen, [], "nothing reached the hub on node-a's subjects");
    } finally {
      raw.close();
      await watcher.nc.close();
    }
  });

  it("a hub node's password does not open the leaf port (the hub would not hold a leaf to that user's permissions)", async () => {
    await assert.rejects(RawLeaf.login(nats.leafPort, 'node-a', pw('node-a')));
    await assert.rejects(RawLeaf.login(nats.leafPort, 'site-east', 'not-the-password'));
    // and the site's leaf user is no client login on the hub
    await assert.rejects(
      connect({ servers: nats.hub.url, user: 'site-east', pass: PW['SITE_EAST_LEAF_PASSWORD']!, reconnect: false }),
    );
  });

  it("a site whose server is gone shows its hosts unreachable, never idle, and the hub's own node as before", async () => {
    await nats.site.kill();
    const r = await eventually(
      async () => {
        const x = await read();
        return node(x, 'node-c').condition !== undefined && node(x, 'node-d').condition !== undefined ? x : undefined;
      },
      5000,
      100,
    );
    for (const h of ['node-c', 'node-d']) {
      assert.deepEqual(
        [node(r, h).condition, node(r, h).status, node(r, h).truncation.omitted],
        ['unreachable', 'unavailable', null],
        h,
      );
      assert.ok(
        node(r, h).sources.every((s) => s.records.length === 0),
        h,
      );
    }
    assert.equal(node(r, 'node-a').condition, undefined);
    assert.equal(source(r, 'node-a', 'manifest')!.status, 'complete');
    assert.equal(r.status, 'partial');
    assert.equal(r.truncation.omitted, null);
  });
});
