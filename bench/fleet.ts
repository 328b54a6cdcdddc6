/**
 * bench/fleet: fleet_workloads over 100 simulated nodes on one real nats-server, each node
 * with its own NATS connection answering `svc.v1.<host>.workloads` with a NodeResult of six
 * sources (PER_OWNER records each; 2 by default, 20 with `--heavy`). Then again with 10 nodes dead: closed (no responders) and frozen
 * (subscribed, never answering: each would cost a full node timeout if asked in series).
 * Run: npm run build && node build/bench/fleet.js
 */
import { performance } from 'node:perf_hooks';
import { resolveFilters } from '../src/schema/filters.js';
import type { Owner } from '../src/schema/enums.js';
import { fleetWorkloads } from '../src/servers/fleet.js';
import { workloadsSubject } from '../src/servers/workloads-responder.js';
import { foldBatch } from '../src/streams/fold-node.js';
import { connectNatsBus, type NatsBus } from '../src/streams/nats-bus.js';
import { createNodeSnapshot } from '../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../src/streams/query-node.js';
import { startNatsServer } from '../test/support/nats-server.js';
import { batch, rec } from '../test/support/records.js';

const NODES = 100;
const DEAD = 10;
const TIMEOUT_MS = 500;
const ITER = 200;
const PER_OWNER = process.argv.includes('--heavy') ? 20 : 2;
const OWNERS: Owner[] = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];

function nodeReply(host: string): Uint8Array {
  const s = createNodeSnapshot(host);
  const now = Date.now();
  for (const owner of OWNERS) {
    const ups = Array.from({ length: PER_OWNER }, (_, i) => rec(host, owner, `n${i}`, { at: now - i * 1000 }));
    foldBatch(s, batch(host, owner, { seq: 1, at: now, upserts: ups }));
  }
  return new TextEncoder().encode(JSON.stringify(queryNode(s, resolveFilters({}), now, { staleAfterMs: 3_600_000, owners: CONTROLLER_OWNERS })));
}

function pct(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

async function measure(fleet: NatsBus, declared: { hostId: string }[], n: number): Promise<{ p50: number; p99: number; max: number; status: string }> {
  const times: number[] = [];
  let status = '';
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await fleetWorkloads(fleet, declared, {}, TIMEOUT_MS);
    times.push(performance.now() - t0);
    status = `${r.status}, ${r.nodes.filter((x) => x.condition).length} failed, ${r.truncation.returned} records`;
  }
  return { p50: pct(times, 0.5), p99: pct(times, 0.99), max: Math.max(...times), status };
}

const server = await startNatsServer();
const nodes: NatsBus[] = [];
const declared = Array.from({ length: NODES }, (_, i) => ({ hostId: `node-${String(i).padStart(3, '0')}` }));
const services = new Map<string, { stop(): void }>();
try {
  for (const d of declared) {
    const bus = await connectNatsBus({ servers: server.url, name: d.hostId });
    const reply = nodeReply(d.hostId);
    services.set(d.hostId, bus.serve(workloadsSubject(d.hostId), () => reply));
    nodes.push(bus);
  }
  const fleet = await connectNatsBus({ servers: server.url, name: 'fleet' });
  await measure(fleet, declared, 20); // warm-up
  const alive = await measure(fleet, declared, ITER);

  // Closed: 10 nodes gone (no responders: NATS says so at once).
  for (let i = 0; i < DEAD; i++) services.get(declared[i]!.hostId)!.stop();
  for (const b of nodes) await b.flush();
  const closed = await measure(fleet, declared, 50);

  // Frozen: 10 nodes subscribed but never answering: each costs the node timeout if asked in series.
  for (let i = 0; i < DEAD; i++) services.set(declared[i]!.hostId, nodes[i]!.serve(workloadsSubject(declared[i]!.hostId), () => new Promise<Uint8Array>(() => undefined)));
  for (const b of nodes) await b.flush();
  const frozen = await measure(fleet, declared, 20);

  const row = (name: string, m: { p50: number; p99: number; max: number; status: string }, target: string, pass: boolean) =>
    console.log(`| ${name.padEnd(34)} | ${m.p50.toFixed(1).padStart(8)} | ${m.p99.toFixed(1).padStart(8)} | ${m.max.toFixed(1).padStart(8)} | ${target.padEnd(30)} | ${pass ? 'PASS' : 'MISS'} | ${m.status}`);
  console.log(`\nfleet_workloads over ${NODES} nodes (one NATS connection each, ${PER_OWNER * 6} records per node), node timeout ${TIMEOUT_MS} ms, ${ITER} iterations alive`);
  console.log('| case                               | p50 ms   | p99 ms   | max ms   | target                         |      | result');
  console.log('|------------------------------------|----------|----------|----------|--------------------------------|------|-------');
  row('all alive', alive, 'p99 <= 100 ms', alive.p99 <= 100);
  row(`${DEAD} closed (no responders)`, closed, 'p99 <= 100 ms', closed.p99 <= 100);
  row(`${DEAD} frozen (never answer)`, frozen, `max < 2 x timeout (${2 * TIMEOUT_MS} ms)`, frozen.max < 2 * TIMEOUT_MS);
  console.log(`\nfrozen p50 / node timeout = ${(frozen.p50 / TIMEOUT_MS).toFixed(2)} (1.0 = one timeout; asking in series would be ${DEAD}.0)`);
  await fleet.close();
} finally {
  for (const b of nodes) await b.close().catch(() => undefined);
  await server.stop();
}
