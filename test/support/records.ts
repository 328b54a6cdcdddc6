import { AUTHORITY_OF_OWNER, KIND_OF_OWNER, type Owner } from '../../src/schema/enums.js';
import type { ObservationBatch } from '../../src/schema/envelopes.js';
import { formatTimestamp } from '../../src/schema/primitives.js';
import { recordId } from '../../src/schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../../src/schema/record.js';

export const T0 = Date.parse('2026-11-25T12:00:00.000Z');

/** A valid record; override any member. Times are epoch ms offsets from T0 unless given. */
export function rec(
  host: string,
  owner: Owner,
  native: string,
  over: Partial<WorkloadRecord> & { at?: number } = {},
): WorkloadRecord {
  const at = over.at ?? T0;
  const { at: _at, ...rest } = over;
  const kind = KIND_OF_OWNER[owner];
  const base: WorkloadRecord = {
    schema: SCHEMA_ID,
    id: recordId(host, owner, kind, native),
    host,
    owner,
    kind,
    state: owner === 'recipe' || owner === 'manifest' ? 'configured' : 'running',
    phase: owner === 'recipe' || owner === 'manifest' ? 'configured' : 'running',
    source_authority: AUTHORITY_OF_OWNER[owner],
    observation_quality: owner === 'recipe' || owner === 'manifest' ? 'configured' : 'recorded',
    created_at: formatTimestamp(at),
    updated_at: formatTimestamp(at),
    source_timestamp: formatTimestamp(at),
  };
  if (owner === 'router' && rest.state === undefined) {
    base.state = 'streaming';
    base.phase = 'streaming';
  }
  return { ...base, ...rest };
}

/** A terminal record (success) at `at`. */
export function done(
  host: string,
  owner: Owner,
  native: string,
  at: number,
  outcome: WorkloadRecord['outcome'] = 'success',
): WorkloadRecord {
  return rec(host, owner, native, {
    at,
    state: 'terminal',
    phase: outcome === 'success' ? 'completed' : 'failed',
    outcome,
  });
}

let seqs = new Map<string, number>();
export function resetSeqs(): void {
  seqs = new Map();
}

/** A batch for `owner` on `host`; `seq` counts up per host/owner unless given. */
export function batch(
  host: string,
  owner: Owner,
  over: Partial<ObservationBatch> & { at?: number } = {},
): ObservationBatch {
  const key = `${host}/${owner}`;
  const seq = over.seq ?? (seqs.get(key) ?? 0) + 1;
  seqs.set(key, seq);
  const { at, ...rest } = over;
  return {
    schema: SCHEMA_ID,
    host,
    owner,
    seq,
    source_timestamp: formatTimestamp(at ?? T0),
    status: 'complete',
    full: true,
    upserts: [],
    removals: [],
    omitted: 0,
    ...rest,
  };
}

export const enc = (v: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(v));
