import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import {
  AUTHORITY_OF_OWNER,
  KIND_OF_OWNER,
  KINDS,
  OUTCOMES,
  OUTCOME_STATES,
  OWNERS,
  PHASES,
  PHASES_OF_STATE,
  PROGRESS_UNITS,
  QUALITIES,
  RECIPE_QUALITIES,
  SOURCE_AUTHORITIES,
  STATES,
  STATES_OF_KIND,
} from './enums.js';
import { Count, HostId, RecordId, Timestamp, literalUnion, parseTimestamp } from './primitives.js';

export const SCHEMA_ID = 'svc-workloads/v1';

export const Progress = Type.Object(
  {
    completed: Count,
    total: Type.Union([Count, Type.Null()]),
    unit: literalUnion(PROGRESS_UNITS),
  },
  { additionalProperties: false },
);
export type Progress = Static<typeof Progress>;

/** The workload record: exactly CONTRACT.md's member set, nothing else, never null but progress.total. */
export const WorkloadRecord = Type.Object(
  {
    schema: Type.Literal(SCHEMA_ID),
    id: RecordId,
    host: HostId,
    owner: literalUnion(OWNERS),
    kind: literalUnion(KINDS),
    state: literalUnion(STATES),
    phase: literalUnion(PHASES),
    outcome: Type.Optional(literalUnion(OUTCOMES)),
    progress: Type.Optional(Progress),
    source_authority: literalUnion(SOURCE_AUTHORITIES),
    observation_quality: literalUnion(QUALITIES),
    created_at: Timestamp,
    updated_at: Timestamp,
    source_timestamp: Timestamp,
  },
  { additionalProperties: false },
);
export type WorkloadRecord = Static<typeof WorkloadRecord>;

const checkShape = TypeCompiler.Compile(WorkloadRecord);

/**
 * The rules a well-typed record must also satisfy; returns the first broken rule's name or
 * null. Pure; used by the fold (malformed batches are dropped) and by owner mappings' tests.
 */
export function recordRuleViolation(r: WorkloadRecord): string | null {
  if (KIND_OF_OWNER[r.owner] !== r.kind) return 'owner-kind';
  if (AUTHORITY_OF_OWNER[r.owner] !== r.source_authority) return 'owner-authority';
  if (!STATES_OF_KIND[r.kind].has(r.state)) return 'kind-state';
  if (!PHASES_OF_STATE[r.state].includes(r.phase)) return 'state-phase';
  if (OUTCOME_STATES.has(r.state) !== (r.outcome !== undefined)) return 'outcome-presence';
  if ((r.owner === 'recipe' || r.owner === 'manifest') && !RECIPE_QUALITIES.has(r.observation_quality))
    return 'quality-ceiling';
  if (r.progress && r.progress.total !== null && r.progress.completed > r.progress.total) return 'progress-bounds';
  const created = parseTimestamp(r.created_at);
  const updated = parseTimestamp(r.updated_at);
  if (Number.isNaN(created) || Number.isNaN(updated) || Number.isNaN(parseTimestamp(r.source_timestamp)))
    return 'timestamp';
  if (updated < created) return 'timestamp-order';
  return null;
}

/** True when `v` is a record of the exact shape that also keeps every rule. */
export function isValidRecord(v: unknown): v is WorkloadRecord {
  return checkShape.Check(v) && recordRuleViolation(v) === null;
}

/**
 * The canonical serialization order of a record's members (SPEC.md: NodeResult and fleet
 * result use the same one). Returns a new object with members in contract order.
 */
export function canonicalRecord(r: WorkloadRecord): WorkloadRecord {
  const out: Record<string, unknown> = {
    schema: r.schema,
    id: r.id,
    host: r.host,
    owner: r.owner,
    kind: r.kind,
    state: r.state,
    phase: r.phase,
  };
  if (r.outcome !== undefined) out['outcome'] = r.outcome;
  if (r.progress !== undefined)
    out['progress'] = { completed: r.progress.completed, total: r.progress.total, unit: r.progress.unit };
  out['source_authority'] = r.source_authority;
  out['observation_quality'] = r.observation_quality;
  out['created_at'] = r.created_at;
  out['updated_at'] = r.updated_at;
  out['source_timestamp'] = r.source_timestamp;
  return out as WorkloadRecord;
}
