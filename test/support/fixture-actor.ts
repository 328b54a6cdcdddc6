/**
 * A stand-in owner authority in its own process, for integration tests: every poll it reads
 * a JSON file of canonical records and publishes them through the real OwnerActor over NATS.
 * Env: NATS_URL, HOST_ID, OWNER, RECORDS_FILE, POLL_MS, STALE_MS, NATS_USER/NATS_PASS (optional),
 * NATS_PIN=1 (optional: stay with the servers of NATS_URL, never move to the cluster members a
 * server announces, so that the actor is cut off for as long as its server is down).
 */
import { readFileSync } from 'node:fs';
import { OwnerActor } from '../../src/actors/owner-actor.js';
import type { Owner } from '../../src/schema/enums.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import type { WorkloadRecord } from '../../src/schema/record.js';
import { connect } from '@nats-io/transport-node';
import { connectNatsBus, NatsBus } from '../../src/streams/nats-bus.js';

const env = (k: string): string => {
  const v = process.env[k];
  if (!v) throw new Error(`fixture-actor: ${k} is required`);
  return v;
};

const credentials = process.env['NATS_USER']
  ? { user: process.env['NATS_USER'], pass: process.env['NATS_PASS'] ?? '' }
  : {};
const bus =
  process.env['NATS_PIN'] === '1'
    ? new NatsBus(
        await connect({
          servers: env('NATS_URL'),
          name: 'fixture-actor',
          ...credentials,
          ignoreClusterUpdates: true,
          maxReconnectAttempts: -1,
          reconnectTimeWait: 250,
        }),
      )
    : await connectNatsBus({ servers: env('NATS_URL'), name: 'fixture-actor', ...credentials });
const actor = new OwnerActor({
  host: env('HOST_ID'),
  owner: env('OWNER') as Owner,
  bus,
  pollMs: Number(process.env['POLL_MS'] ?? 100),
  staleAfterMs: Number(process.env['STALE_MS'] ?? 30_000),
  // A live authority: each read is fresh evidence, so records carry the read time.
  read: () => {
    const at = formatTimestamp(Date.now());
    const records = (JSON.parse(readFileSync(env('RECORDS_FILE'), 'utf8')) as WorkloadRecord[]).map((r) => ({
      ...r,
      source_timestamp: at,
    }));
    return { status: 'complete', records };
  },
});
actor.start();
process.stdout.write(JSON.stringify({ msg: 'listening', url: 'nats-actor' }) + '\n');
process.on('SIGTERM', () => {
  actor.stop();
  void bus.close().finally(() => process.exit(0));
});
