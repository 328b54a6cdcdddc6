import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { NODE_CONDITIONS, OWNERS, RESULT_STATUSES, SOURCE_REASONS } from './enums.js';
import { Count, HostId, RecordId, Timestamp, literalUnion } from './primitives.js';
import { SCHEMA_ID, WorkloadRecord } from './record.js';

/** Records per source result (SPEC.md Limits). */
export const MAX_RECORDS_PER_SOURCE = 200;
/** Records per node or fleet result (SPEC.md Limits). */
export const MAX_RECORDS_PER_RESULT = 1000;

export const Truncation = Type.Object(
  { returned: Count, omitted: Type.Union([Count, Type.Null()]) },
  { additionalProperties: false },
);
export type Truncation = Static<typeof Truncation>;

export const SourceResult = Type.Object(
  {
    owner: literalUnion(OWNERS),
    status: literalUnion(RESULT_STATUSES),
    reason: Type.Optional(literalUnion(SOURCE_REASONS)),
    records: Type.Array(WorkloadRecord, { maxItems: MAX_RECORDS_PER_SOURCE }),
    truncation: Truncation,
  },
  { additionalProperties: false },
);
export type SourceResult = Static<typeof SourceResult>;

export const NodeResult = Type.Object(
  {
    schema: Type.Literal(SCHEMA_ID),
    expected_host: HostId,
    status: literalUnion(RESULT_STATUSES),
    collected_at: Timestamp,
    sources: Type.Array(SourceResult, { maxItems: OWNERS.length }),
    truncation: Truncation,
    condition: Type.Optional(literalUnion(NODE_CONDITIONS)),
  },
  { additionalProperties: false },
);
export type NodeResult = Static<typeof NodeResult>;

export const FleetResult = Type.Object(
  {
    schema: Type.Literal(SCHEMA_ID),
    status: literalUnion(RESULT_STATUSES),
    collected_at: Timestamp,
    nodes: Type.Array(NodeResult),
    truncation: Truncation,
  },
  { additionalProperties: false },
);
export type FleetResult = Static<typeof FleetResult>;

/** Most parts one split window may have. */
export const MAX_SNAPSHOT_PARTS = 10_000;

/** Parts of a full window split to fit the server's max payload (CONTRACT.md). */
export const SnapshotPart = Type.Object(
  {
    id: Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$' }),
    part: Type.Integer({ minimum: 1, maximum: MAX_SNAPSHOT_PARTS }),
    parts: Type.Integer({ minimum: 1, maximum: MAX_SNAPSHOT_PARTS }),
  },
  { additionalProperties: false },
);
export type SnapshotPart = Static<typeof SnapshotPart>;

/**
 * What an owner actor publishes on its observation subject (subjects.ts). `reason` is this project's
 * optional extension (docs/api.md): why an owner reports itself partial or unavailable.
 */
export const ObservationBatch = Type.Object(
  {
    schema: Type.Literal(SCHEMA_ID),
    host: HostId,
    owner: literalUnion(OWNERS),
    seq: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }),
    source_timestamp: Timestamp,
    status: literalUnion(RESULT_STATUSES),
    reason: Type.Optional(literalUnion(SOURCE_REASONS)),
    full: Type.Boolean(),
    snapshot: Type.Optional(SnapshotPart),
    upserts: Type.Array(WorkloadRecord, { maxItems: 100_000 }),
    removals: Type.Array(RecordId, { maxItems: 100_000 }),
    omitted: Type.Union([Count, Type.Null()]),
  },
  { additionalProperties: false },
);
export type ObservationBatch = Static<typeof ObservationBatch>;

export const checkNodeResult = TypeCompiler.Compile(NodeResult);
export const checkFleetResult = TypeCompiler.Compile(FleetResult);
export const checkBatch = TypeCompiler.Compile(ObservationBatch);
