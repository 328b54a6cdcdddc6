/**
 * A misbehaving node for fleet tests, in its own process: it answers `node_workloads` on its
 * own subject either with a NodeResult that speaks for another host (MODE=forge, FORGE_AS)
 * or with bytes that are not a NodeResult (MODE=malformed).
 * Env: NATS_URL, NATS_USER, NATS_PASS, HOST_ID, MODE, FORGE_AS.
 */
import { connectNatsBus } from '../../src/streams/nats-bus.js';
import { createNodeSnapshot } from '../../src/streams/node-snapshot.js';
import { CONTROLLER_OWNERS, queryNode } from '../../src/streams/query-node.js';
import { resolveFilters } from '../../src/schema/filters.js';
import { workloadsSubject } from '../../src/schema/subjects.js';

const env = (k: string): string => process.env[k] ?? '';
const bus = await connectNatsBus({
  servers: env('NATS_URL'),
  user: env('NATS_USER'),
  pass: env('NATS_PASS'),
  name: 'fixture-responder',
});
const enc = new TextEncoder();
bus.serve(workloadsSubject(env('HOST_ID')), () => {
  if (env('MODE') === 'malformed') return enc.encode('{"schema":"svc-workloads/v1","expected_host":');
  const forged = queryNode(createNodeSnapshot(env('FORGE_AS')), resolveFilters({}), Date.now(), {
    staleAfterMs: 30_000,
    owners: CONTROLLER_OWNERS,
  });
  return enc.encode(JSON.stringify(forged));
});
await bus.flush();
process.stdout.write(JSON.stringify({ msg: 'listening', url: 'nats-responder' }) + '\n');
process.on('SIGTERM', () => void bus.close().finally(() => process.exit(0)));
