/**
 * A child process of bench/fleet.ts that hosts some of the simulated nodes, so that the
 * nodes' work does not run on the thread that measures the fleet. Each node is what a real
 * node controller is on the bus: its own NATS connection, a node snapshot folded from the
 * JSON bytes of real observation batches (the production decode path, so records have the
 * canonical member order), and `serveNodeWorkloads` answering `svc.v1.<host>.workloads`
 * with `queryNode` over that snapshot. Only the owner actors are missing: the snapshot does
 * not change during the run, which a read cannot tell from a quiet node.
 *
 * Started with `fork` (an IPC channel): argv is the NATS URL, records per node and the host
 * IDs. Messages in: `{cmd: 'close', hosts}` (those nodes' connections close: a controller that
 * died), `{cmd: 'freeze', hosts}` (each connects again and subscribes without ever answering:
 * a controller that hangs), `{cmd: 'stats', reset?}`. Out: `{ready}`, `{stats}`, `{done}`.
 */
import type { Owner } from '../src/schema/enums.js';
import { nodeResultJson } from '../src/schema/result-json.js';
import { resolveFilters } from '../src/schema/filters.js';
import { serveNodeWorkloads } from '../src/controller/workloads-responder.js';
import { observationSubject, workloadsSubject } from '../src/schema/subjects.js';
import { foldNode } from '../src/streams/fold-node.js';
import { connectNatsBus, type NatsBus } from '../src/streams/nats-bus.js';
import { createNodeSnapshot, type NodeSnapshot } from '../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../src/streams/query-node.js';
import { batch, rec } from '../test/support/records.js';

export interface HostStats {
  /** node_workloads answers served since the last reset. */
  readonly answers: number;
  /** This process's CPU time since the last reset, in ms (user + system, all threads). */
  readonly cpuMs: number;
  /** Bytes of one node's default answer (`{}`), as sent. */
  readonly answerBytes: number;
  readonly rssBytes: number;
}

export type HostCommand = { cmd: 'close' | 'freeze'; hosts: string[] } | { cmd: 'stats'; reset?: boolean };
export type HostEvent = { ready: true } | { stats: HostStats } | { done: string };

const OWNERS: Owner[] = ['router', 'controller', 'benchmark', 'media', 'recipe', 'manifest'];
/**
 * The snapshot never ages during a run (no actors publish), so sources are judged against a
 * threshold longer than any run: every read sees the same healthy node, as a live one is.
 */
const STALE_AFTER_MS = 24 * 3_600_000;
/** Connections opened at once: a thousand SYNs at the same instant only measure the backlog. */
const CONNECT_BATCH = 25;

const [url, perNodeArg, ...hosts] = process.argv.slice(2);
const perNode = Number(perNodeArg);
const enc = new TextEncoder();

/** A node's snapshot: `perNode` records spread evenly over the six owners, folded from JSON bytes. */
function snapshotOf(host: string, index: number, now: number): NodeSnapshot {
  const s = createNodeSnapshot(host);
  OWNERS.forEach((owner, o) => {
    const n = Math.floor(perNode / OWNERS.length) + (o < perNode % OWNERS.length ? 1 : 0);
    // Distinct times across nodes, so the fleet's newest-first cut has something to decide.
    const upserts = Array.from({ length: n }, (_, i) =>
      rec(host, owner, `w${i}`, { at: now - 60_000 - i * 997 - index * 13 - o }),
    );
    const data = enc.encode(JSON.stringify(batch(host, owner, { seq: 1, at: now, upserts })));
    foldNode(s, { type: 'message', subject: observationSubject(host, owner), data }, now);
  });
  const dropped = Object.values(s.dropped).reduce((a, b) => a + b, 0);
  if (dropped > 0) throw new Error(`${host}: ${dropped} setup batches dropped`);
  return s;
}

const buses = new Map<string, NatsBus>();
const snaps = new Map<string, NodeSnapshot>();
let answers = 0;
let cpuBase = process.cpuUsage();
const opts = { staleAfterMs: STALE_AFTER_MS, owners: CONTROLLER_OWNERS };

async function startNode(host: string, now: number): Promise<void> {
  // The host's number (`node-0042`) spreads record times across nodes.
  const snap = snapshotOf(host, Number(/\d+$/.exec(host)?.[0] ?? 0), now);
  snaps.set(host, snap);
  const bus = await connectNatsBus({ servers: url!, name: host });
  serveNodeWorkloads(bus, host, (f) => {
    answers++;
    return queryNode(snap, f, Date.now(), opts);
  });
  await bus.flush();
  buses.set(host, bus);
}

const send = (m: HostEvent): void => void process.send!(m);

process.on('message', (m: HostCommand) => {
  void (async () => {
    if (m.cmd === 'stats') {
      const cpu = process.cpuUsage(cpuBase);
      const first = snaps.values().next().value as NodeSnapshot;
      const answerBytes = enc.encode(nodeResultJson(queryNode(first, resolveFilters({}), Date.now(), opts))).byteLength;
      send({
        stats: { answers, cpuMs: (cpu.user + cpu.system) / 1000, answerBytes, rssBytes: process.memoryUsage.rss() },
      });
      if (m.reset) {
        answers = 0;
        cpuBase = process.cpuUsage();
      }
      return;
    }
    for (const h of m.hosts) {
      await buses.get(h)?.close();
      buses.delete(h);
      if (m.cmd === 'freeze') {
        const frozen = await connectNatsBus({ servers: url!, name: `${h}-frozen` });
        frozen.serve(workloadsSubject(h), () => new Promise<Uint8Array>(() => undefined));
        await frozen.flush();
        buses.set(h, frozen);
      }
    }
    send({ done: m.cmd });
  })().catch((err: unknown) => {
    process.stderr.write(`fleet-node-host: ${(err as Error)?.message ?? String(err)}\n`);
    process.exit(1);
  });
});
// The parent gone (finished or killed): nothing here is worth keeping.
process.on('disconnect', () => process.exit(0));

const now = Date.now();
for (let i = 0; i < hosts.length; i += CONNECT_BATCH)
  await Promise.all(hosts.slice(i, i + CONNECT_BATCH).map((h) => startNode(h, now)));
send({ ready: true });
