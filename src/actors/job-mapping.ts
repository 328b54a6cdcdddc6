import {
  AUTHORITY_OF_OWNER,
  KIND_OF_OWNER,
  OUTCOMES,
  type Outcome,
  type Phase,
  type ProgressUnit,
  type State,
} from '../schema/enums.js';
import { MAX_COUNT, formatTimestamp } from '../schema/primitives.js';
import { recordId } from '../schema/record-id.js';
import { SCHEMA_ID, type WorkloadRecord } from '../schema/record.js';
import type { JobRow } from '../stores/job-store.js';

export type JobOwner = 'controller' | 'benchmark' | 'media';

/** The stores' native vocabulary (what runners write), shared by the three job owners. */
export const NATIVE = {
  queued: 'queued',
  awaitingApproval: 'awaiting_approval',
  preparing: 'preparing',
  submitting: 'submitting',
  running: 'running',
  succeeded: 'succeeded',
  failed: 'failed',
  cancelled: 'cancelled',
  expired: 'expired',
  interrupted: 'interrupted',
} as const;

export const NATIVE_TERMINAL: readonly string[] = [
  NATIVE.succeeded,
  NATIVE.failed,
  NATIVE.cancelled,
  NATIVE.expired,
  NATIVE.interrupted,
];
export const NATIVE_ACTIVE: readonly string[] = [
  NATIVE.queued,
  NATIVE.awaitingApproval,
  NATIVE.preparing,
  NATIVE.submitting,
  NATIVE.running,
];

const TABLE: Readonly<Record<string, { state: State; phase: Phase; outcome?: Outcome }>> = {
  queued: { state: 'queued', phase: 'queued' },
  awaiting_approval: { state: 'queued', phase: 'awaiting-approval' },
  preparing: { state: 'running', phase: 'preparing' },
  submitting: { state: 'running', phase: 'submitting' },
  running: { state: 'running', phase: 'running' },
  succeeded: { state: 'terminal', phase: 'completed', outcome: 'success' },
  failed: { state: 'terminal', phase: 'failed', outcome: 'error' },
  cancelled: { state: 'terminal', phase: 'cancelled', outcome: 'cancelled' },
  expired: { state: 'terminal', phase: 'cancelled', outcome: 'timeout' },
  // The runner was gone (e.g. the controller restarted): what the engine did is not known.
  interrupted: { state: 'terminal', phase: 'failed', outcome: 'unknown' },
};

const UNIT: Readonly<Record<JobOwner, ProgressUnit>> = { controller: 'steps', benchmark: 'requests', media: 'items' };
const OUTCOME_SET: ReadonlySet<string> = new Set(OUTCOMES);

/**
 * Pure: a stored job -> its canonical record. An unknown native state becomes `unsupported`
 * (outcome `unknown`) without the raw value. Active jobs carry the runner's heartbeat as
 * their evidence time, so a job whose runner went silent is labelled stale by the reader.
 */
export function mapJob(owner: JobOwner, host: string, row: JobRow): WorkloadRecord {
  const m = TABLE[row.native_state];
  const kind = KIND_OF_OWNER[owner];
  const base = {
    schema: SCHEMA_ID,
    id: recordId(host, owner, kind, row.id),
    host,
    owner,
    kind,
  } as const;
  const times = {
    created_at: formatTimestamp(row.created_at),
    updated_at: formatTimestamp(Math.max(row.updated_at, row.created_at)),
  };
  if (!m) {
    return {
      ...base,
      state: 'unsupported',
      phase: 'unsupported',
      outcome: 'unknown',
      source_authority: AUTHORITY_OF_OWNER[owner],
      observation_quality: 'recorded',
      ...times,
      source_timestamp: times.updated_at,
    };
  }
  const rec: WorkloadRecord = {
    ...base,
    state: m.state,
    phase: m.phase,
    source_authority: AUTHORITY_OF_OWNER[owner],
    observation_quality: 'recorded',
    ...times,
    source_timestamp: formatTimestamp(
      m.state === 'terminal' ? Math.max(row.updated_at, row.created_at) : Math.max(row.heartbeat_at, row.created_at),
    ),
  };
  if (m.outcome) {
    // A failure may say what kind of failure it was, from the fixed outcome vocabulary only.
    const stored = row.outcome !== null && OUTCOME_SET.has(row.outcome) ? (row.outcome as Outcome) : undefined;
    rec.outcome = m.state === 'terminal' && row.native_state === NATIVE.failed && stored ? stored : m.outcome;
  }
  // Progress is a count the contract can carry (a whole number up to MAX_COUNT); a stored
  // value outside that (a row edited by hand, a runaway counter) leaves progress unknown, not
  // the record malformed.
  if (isCount(row.progress_completed)) {
    const total =
      isCount(row.progress_total) && row.progress_total >= row.progress_completed ? row.progress_total : null;
    rec.progress = { completed: row.progress_completed, total, unit: UNIT[owner] };
  }
  return canonicalOrder(rec);
}

function isCount(v: number | null): v is number {
  return v !== null && Number.isSafeInteger(v) && v >= 0 && v <= MAX_COUNT;
}

function canonicalOrder(r: WorkloadRecord): WorkloadRecord {
  const {
    schema,
    id,
    host,
    owner,
    kind,
    state,
    phase,
    outcome,
    progress,
    source_authority,
    observation_quality,
    created_at,
    updated_at,
    source_timestamp,
  } = r;
  return {
    schema,
    id,
    host,
    owner,
    kind,
    state,
    phase,
    ...(outcome ? { outcome } : {}),
    ...(progress ? { progress } : {}),
    source_authority,
    observation_quality,
    created_at,
    updated_at,
    source_timestamp,
  };
}
