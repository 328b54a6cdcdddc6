import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { checkFleetResult, type FleetResult, type NodeResult } from '../../src/schema/envelopes.js';
import { freePort } from '../support/free-port.js';
import {
  holds,
  passwords,
  startShippedCluster,
  type NatsCluster,
  type ShippedServer,
} from '../support/nats-cluster.js';
import { writeTestPolicy } from '../support/policy.js';
import { CLI, eventually, spawnNode, type RunningProcess } from '../support/processes.js';
import { rec } from '../support/records.js';

const ACTOR = fileURLToPath(new URL('../support/fixture-actor.js', import.meta.url));
const NODES = ['node-a', 'node-b'];
const PW = passwords(['NODE_A_NATS_PASSWORD', 'NODE_B_NATS_PASSWORD', 'FLEET_NATS_PASSWORD']);
const pw = (user: string): string => PW[`${user.toUpperCase().replace('-', '_')}_NATS_PASSWORD`]!;
const STALE_S = 1;
const NODE_TIMEOUT_MS = 1000;
const CONTROLLER_A = 'svc-serving controller node-a';

/**
 * What a fleet answer may claim from what it saw: a node that could not be read is unavailable
 * with its condition and no records, never idle; a complete source has only fresh records and
 * a count; a stale one keeps its records labelled stale and no count; nothing is complete
 * above a part that is not. Thrown when: an answer claims more than its evidence.
 */
function assertClaimsOnlyItsEvidence(r: FleetResult): void {
  assert.ok(checkFleetResult.Check(r), 'a valid fleet result');
  assert.deepEqual(
    r.nodes.map((n) => n.expected_host),
    NODES,
    'one entry per declared node, in order',
  );
  for (const n of r.nodes) {
    const at = n.expected_host;
    if (n.condition !== undefined) {
      assert.equal(n.status, 'unavailable', at);
      assert.equal(n.truncation.omitted, null, at);
      assert.ok(
        n.sources.every((s) => s.records.length === 0),
        `${at} unread: no records`,
      );
      continue;
    }
    for (const s of n.sources) {
      const where = `${at}/${s.owner}`;
      if (s.status === 'complete') {
        assert.ok(
          s.records.every((x) => x.observation_quality !== 'stale'),
          `${where}: complete, so fresh`,
        );
        assert.equal(typeof s.truncation.omitted, 'number', where);
      } else if (s.status === 'unavailable') {
        assert.deepEqual([s.records.length, s.truncation.omitted], [0, null], where);
      } else if (s.reason === 'timeout') {
        assert.ok(
          s.records.every((x) => x.observation_quality === 'stale'),
          `${where}: timed out, so stale`,
        );
        assert.equal(s.truncation.omitted, null, where);
      }
    }
    if (n.status === 'complete')
      assert.ok(
        n.sources.every((s) => s.status === 'complete'),
        `${at}: complete only if every source is`,
      );
    if (n.sources.some((s) => s.truncation.omitted === null)) assert.equal(n.truncation.omitted, null, at);
  }
  if (r.status === 'complete')
    assert.ok(
      r.nodes.every((n) => n.status === 'complete'),
      'the fleet is complete only if every node is',
    );
  if (r.nodes.some((n) => n.truncation.omitted === null)) assert.equal(r.truncation.omitted, null);
}

/** How node-a's manifest (published by an actor that only its own server can reach) looks in one answer. */
function manifestOfA(n: NodeResult): 'fresh' | 'stale' | 'unreachable' | 'other' {
  if (n.condition === 'unreachable') return 'unreachable';
  const s = n.sources.find((x) => x.owner === 'manifest');
  if (s?.status === 'complete' && s.records.length === 1) return 'fresh';
  if (s?.status === 'partial' && s.reason === 'timeout' && s.records.length === 1) return 'stale';
  return 'other';
}

describe('a three-server NATS cluster (deploy/nats-cluster): losing a server mid-read (real nats-servers, controllers and fleet)', () => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-cluster-'));
  const policy = writeTestPolicy(dir);
  const procs: RunningProcess[] = [];
  let cluster: NatsCluster;
  let fleet: RunningProcess;
  let controllerA: RunningProcess;
  let serverOfA: ShippedServer;

  const start = async (script: string, args: string[], env: Record<string, string>): Promise<RunningProcess> => {
    const p = await spawnNode(script, args, { env: { ...policy.env, ...env } });
    procs.push(p);
    return p;
  };
  const startController = (host: string, natsUrl: string): Promise<RunningProcess> => {
    const cfg = join(dir, `${host}.toml`);
    writeFileSync(
      cfg,
      [
        '[node]',
        `host_id = "${host}"`,
        'listen = "127.0.0.1:0"',
        `nats_url = "${natsUrl}"`,
        `nats_user = "${host}"`,
        'nats_password_env = "NODE_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        `stale_after_seconds = ${STALE_S}`,
        `state_dir = "state-${host}"`,
      ].join('\n'),
    );
    return start(CLI, ['controller', 'serve', '--config', cfg], { NODE_NATS_PASSWORD: pw(host) });
  };
  const startActor = (host: string, natsUrl: string, pin: boolean): Promise<RunningProcess> => {
    const records = join(dir, `${host}-records.json`);
    writeFileSync(records, JSON.stringify([rec(host, 'manifest', `model-of-${host}`, { at: Date.now() })]));
    return start(ACTOR, [], {
      NATS_URL: natsUrl,
      NATS_USER: host,
      NATS_PASS: pw(host),
      HOST_ID: host,
      OWNER: 'manifest',
      RECORDS_FILE: records,
      POLL_MS: '100',
      STALE_MS: String(STALE_S * 1000),
      ...(pin ? { NATS_PIN: '1' } : {}),
    });
  };
  const read = async (): Promise<FleetResult> => {
    const res = await fetch(`${fleet.url}/tools/call`, {
      method: 'POST',
      headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'fleet_workloads', arguments: {} }),
      signal: AbortSignal.timeout(NODE_TIMEOUT_MS + 2000),
    });
    assert.equal(res.status, 200, 'the fleet answers');
    return (await res.json()) as FleetResult;
  };
  const nodeOf = (r: FleetResult, h: string): NodeResult => r.nodes.find((n) => n.expected_host === h)!;

  before(async () => {
    cluster = await startShippedCluster(PW);
    const all = cluster.servers;
    // node-a is given the whole cluster, as a deployment would: the client picks a member.
    controllerA = await startController('node-a', all.map((s) => s.url).join(', '));
    serverOfA = await eventually(
      async () => {
        for (const s of all) if (await holds(s, CONTROLLER_A)) return s;
        return undefined;
      },
      5000,
      50,
    );
    const [other, third] = all.filter((s) => s !== serverOfA) as [ShippedServer, ShippedServer];
    // The actor of node-a knows only node-a's server: while that is down, nothing it says arrives.
    await startActor('node-a', serverOfA.url, true);
    await startController('node-b', other.url);
    await startActor('node-b', other.url, false);
    // The fleet on the third member; its list begins with a server that is not there at all.
    const nobody = `nats://127.0.0.1:${await freePort()}`;
    const cfg = join(dir, 'fleet.toml');
    writeFileSync(
      cfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nobody},${third.url}"`,
        'nats_user = "fleet"',
        'nats_password_env = "FLEET_NATS_PASSWORD"',
        'authorization_policy = "policy.toml"',
        `node_timeout_ms = ${NODE_TIMEOUT_MS}`,
        '',
        ...NODES.flatMap((h) => ['[[nodes]]', `host_id = "${h}"`, '']),
      ].join('\n'),
    );
    fleet = await start(CLI, ['fleet', 'serve', '--config', cfg], { FLEET_NATS_PASSWORD: PW['FLEET_NATS_PASSWORD']! });
    assert.ok(
      await holds(third, 'svc-serving fleet'),
      'the fleet is on the third member, past the server that is not there',
    );
  });
  after(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    await cluster?.stop();
    for (const p of procs) assert.ok(!Object.values(PW).some((v) => p.output().includes(v)), 'no password in any log');
  });

  it('across the cluster the fleet reads nodes connected to other members', async () => {
    const r = await eventually(
      async () => {
        const x = await read();
        return NODES.every((h) => manifestOfA(nodeOf(x, h)) === 'fresh') ? x : undefined;
      },
      10_000,
      100,
    );
    assertClaimsOnlyItsEvidence(r);
    assert.deepEqual(
      NODES.map((h) => nodeOf(r, h).sources.find((s) => s.owner === 'manifest')!.records[0]!.host),
      NODES,
    );
  });

  it("kill -9 of node-a's server mid-loop: the fleet answers every read, node-a's controller moves to another member, its source goes stale and comes back, and no answer claims more than it saw", async (t) => {
    const seen: string[] = [];
    // Fresh reads of node-a while its server is down, in ms after the kill.
    const freshWhileDown: number[] = [];
    let killedAt = 0;
    let restartedAt = 0;
    let movedTo: ShippedServer | undefined;
    const deadline = Date.now() + 30_000;
    for (let i = 0; Date.now() < deadline; i++) {
      const t0 = Date.now();
      // The fourth read is in flight when the member goes: it may see node-a answer or not.
      const killNow = killedAt === 0 && i === 3;
      const [r] = await Promise.all([
        read(),
        killNow ? serverOfA.kill().then(() => (killedAt = Date.now())) : undefined,
      ]);
      assert.ok(Date.now() - t0 < NODE_TIMEOUT_MS + 1500, `read ${i} answered in ${Date.now() - t0} ms`);
      assertClaimsOnlyItsEvidence(r);
      assert.equal(manifestOfA(nodeOf(r, 'node-b')), 'fresh', 'node-b, on a member that stays, is read throughout');
      const a = manifestOfA(nodeOf(r, 'node-a'));
      seen.push(`${killedAt === 0 ? 'before' : restartedAt === 0 ? 'down' : 'back'}:${a}`);
      if (killedAt !== 0 && restartedAt === 0 && a === 'fresh') freshWhileDown.push(t0 - killedAt);
      if (killNow) {
        // nothing more this round
      } else if (killedAt !== 0 && restartedAt === 0) {
        for (const s of cluster.servers) if (s !== serverOfA && (await holds(s, CONTROLLER_A))) movedTo = s;
        // Bring the member back once the stale source and the move have both been seen.
        if (movedTo !== undefined && seen.includes('down:stale')) {
          await serverOfA.restart();
          restartedAt = Date.now();
        }
      } else if (restartedAt !== 0 && seen.slice(-3).every((x) => x === 'back:fresh')) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    t.diagnostic(`node-a's manifest, read by read: ${seen.join(' ')}`);
    assert.ok(killedAt !== 0 && restartedAt !== 0, `the loop got through the outage: ${seen.join(' ')}`);
    assert.ok(
      seen.filter((x) => x.startsWith('before')).every((x) => x === 'before:fresh'),
      seen.join(' '),
    );
    assert.ok(movedTo !== undefined, "node-a's controller reconnected to another member");
    assert.equal(controllerA.proc.exitCode, null, 'the same controller process, not a restart');
    assert.ok(
      seen.includes('down:stale'),
      `node-a's manifest went stale while its actor was cut off: ${seen.join(' ')}`,
    );
    // Its last observation predates the kill, so it may read fresh only while that is younger
    // than the stale threshold: never after, however recently the controller itself answered.
    assert.ok(
      freshWhileDown.every((ms) => ms <= STALE_S * 1000),
      `fresh only within the threshold after the kill: ${freshWhileDown.join(', ')} ms`,
    );
    const firstStale = seen.indexOf('down:stale');
    assert.ok(
      !seen.slice(firstStale).includes('down:fresh'),
      'once stale, not fresh again until its publisher is back',
    );
    assert.deepEqual(
      seen.slice(-3),
      ['back:fresh', 'back:fresh', 'back:fresh'],
      `and fresh again once its server was back: ${seen.join(' ')}`,
    );
  });
});
