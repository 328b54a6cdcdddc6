import type { Phase, State } from '../schema/enums.js';
import { formatTimestamp } from '../schema/primitives.js';
import { recordId } from '../schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';
import type { RequestOutcome, TerminalRecord } from '../schema/terminal-record.js';

export const REQUEST_PHASES = ['checking', 'admitted', 'dispatched', 'streaming'] as const;
export type RequestPhase = (typeof REQUEST_PHASES)[number];

/** What the router actor sees of one request in flight (no prompt, no content). */
export interface ActiveView {
  readonly gid: string;
  readonly phase: string;
  readonly startedAt: number;
  readonly phaseAt: number;
}

const TERMINAL_PHASE: Readonly<Record<RequestOutcome, Phase>> = {
  success: 'completed',
  error: 'failed',
  timeout: 'failed',
  rejected: 'failed',
  cancelled: 'cancelled',
  disconnected: 'cancelled',
};

/**
 * Pure: an active request -> its canonical record. A phase this mapping does not know is
 * reported as `unsupported` (outcome `unknown`), never with its raw value. Records are built
 * as literals in canonical member order (no spreads): one hidden class, cheap to build and
 * to query, and this runs for every request the router sees.
 */
export function mapActiveRequest(host: string, a: ActiveView, now: number): WorkloadRecord {
  const id = recordId(host, 'router', 'router-request', a.gid);
  const created = formatTimestamp(a.startedAt);
  const updated = formatTimestamp(Math.max(a.phaseAt, a.startedAt));
  if (!(REQUEST_PHASES as readonly string[]).includes(a.phase)) {
    return {
      schema: SCHEMA_ID,
      id,
      host,
      owner: 'router',
      kind: 'router-request',
      state: 'unsupported',
      phase: 'unsupported',
      outcome: 'unknown',
      source_authority: 'router-memory',
      observation_quality: 'recorded',
      created_at: created,
      updated_at: updated,
      source_timestamp: formatTimestamp(now),
    };
  }
  return {
    schema: SCHEMA_ID,
    id,
    host,
    owner: 'router',
    kind: 'router-request',
    state: a.phase as State,
    phase: a.phase as Phase,
    source_authority: 'router-memory',
    observation_quality: 'recorded',
    created_at: created,
    updated_at: updated,
    source_timestamp: formatTimestamp(now),
  };
}

/** Pure: a terminal decision -> its canonical record; the record's own times are kept. */
export function mapTerminalRequest(host: string, gid: string, r: TerminalRecord): WorkloadRecord {
  return {
    schema: SCHEMA_ID,
    id: recordId(host, 'router', 'router-request', gid),
    host,
    owner: 'router',
    kind: 'router-request',
    state: 'terminal',
    phase: TERMINAL_PHASE[r.outcome] ?? 'failed',
    outcome: r.outcome,
    source_authority: 'router-memory',
    observation_quality: 'recorded',
    created_at: r.started_at,
    updated_at: r.finished_at,
    source_timestamp: r.finished_at,
  };
}
