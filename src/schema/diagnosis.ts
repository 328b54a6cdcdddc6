import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Truncation } from './envelopes.js';
import { HostId, Timestamp, literalUnion, parseTimestamp } from './primitives.js';
import { GENERATED_ID_RE, OPAQUE_ID_RE, ROUTES, TerminalRecord } from './terminal-record.js';

export const DIAGNOSIS_SCHEMA_ID = 'svc-router-diagnosis/v1' as const;
/** The lineage members a history lookup selects by (docs/api.md, Router): one of them, exactly. */
export const LINEAGE_KEYS = ['session_id', 'task_id', 'workbench_run_id'] as const;
export type LineageKey = (typeof LINEAGE_KEYS)[number];

/** CONTRACT.md: at most 50 records per `/v1/requests` answer. */
export const MAX_LOOKUP_RECORDS = 50;

/**
 * The fixed interpretation codes, in the order `interpret` emits them. Timing codes describe
 * where the recorded time went; they are not root causes.
 */
export const INTERPRETATION_CODES = [
  'startup_dominated', // time_to_first_content_ms > half of latency_ms
  'completion_dominated', // both measured and the first content came at or before the half
  'length_finish', // finish_reason length: look at the output ceiling and reasoning budget
  'refused_before_routing', // outcome rejected before any alias was chosen or any engine called (refusal: unknown_model, invalid_request, body_too_large, unsupported_media_type; admission_full naming no alias)
  'context_rejected', // refusal context_length_exceeded (older records: outcome rejected with status 400)
  'upstream_rejected', // refusal upstream_rejected: the engine refused the request as invalid (its 4xx relayed)
  'client_cancelled', // outcome disconnected or cancelled
  'tool_call_transition', // finish_reason tool_calls: a protocol transition, not tool success
  'usage_estimated', // prompt or completion count estimated by the router
  'usage_unknown', // prompt or completion count of unknown provenance
  'output_clamped', // the router lowered the requested output limit
  'admission_rejected', // status 429 with no upstream time: admission refused (queue full or queue timeout)
  'upstream_rate_limited', // status 429 after the engine was called (upstream time recorded): the engine's own 429
  'upstream_not_ready', // outcome rejected with status 502: the readiness check failed, nothing was sent
  'upstream_failed', // outcome error, not one the router caused (below)
  'router_ended', // outcome error with status 0 or 503, or finish cancelled: the router stopped or was killed, not the engine
  'upstream_timeout', // outcome timeout
  'latency_unmeasured', // embeddings/rerank: the legacy latency 0 is not a measurement
  'not_found_maybe_active_or_evicted', // no record: active, evicted, outside history, or no lookup
] as const;
export type InterpretationCode = (typeof INTERPRETATION_CODES)[number];

/** What `/v1/router/status` answers (CONTRACT.md). */
export const RouterStatus = Type.Object(
  {
    host: HostId,
    package_version: Type.String({ maxLength: 64 }),
    routing_config_hash: Type.String({ pattern: '^[0-9a-f]{64}$' }),
    started_at: Timestamp,
    models: Type.Array(Type.String({ maxLength: 128 }), { maxItems: 1000 }),
  },
  { additionalProperties: false },
);
export type RouterStatus = Static<typeof RouterStatus>;

const Ms = Type.Union([Type.Number({ minimum: 0 }), Type.Null()]);
const Tokens = Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]);

/** One entry of `/v1/requests?active=1` (docs/api.md, Router): estimates apart from engine counts. */
export const ActiveRequest = Type.Object(
  {
    request_id: Type.String({ maxLength: 128 }),
    model: Type.String({ maxLength: 128 }),
    route: literalUnion(ROUTES),
    phase: literalUnion(['checking', 'admitted', 'dispatched', 'streaming'] as const),
    started_at: Timestamp,
    elapsed_ms: Type.Number({ minimum: 0 }),
    since_upstream_activity_ms: Ms,
    admission_wait_ms: Ms,
    tokens: Type.Object(
      { prompt_estimated: Tokens, completion_estimated: Tokens, prompt_upstream: Tokens, completion_upstream: Tokens },
      { additionalProperties: false },
    ),
    session_id: Type.Optional(Type.String({ pattern: OPAQUE_ID_RE.source })),
  },
  { additionalProperties: false },
);
export type ActiveRequest = Static<typeof ActiveRequest>;

export const checkRouterStatus = TypeCompiler.Compile(RouterStatus);
/** What `/v1/requests/{id}` answers. */
export const LookupBody = Type.Object({ request: TerminalRecord }, { additionalProperties: false });
/** What `/v1/requests?active=1` answers: the requests in flight, oldest first. */
export const ActiveBody = Type.Object(
  { requests: Type.Array(ActiveRequest, { maxItems: MAX_LOOKUP_RECORDS }), truncation: Truncation },
  { additionalProperties: false },
);
/**
 * What `/v1/requests?history=1&session_id=...` (or task_id, workbench_run_id) answers, and
 * `/v1/requests?recent=1` (decision 0090): newest first.
 */
export const SessionBody = Type.Object(
  { requests: Type.Array(TerminalRecord, { maxItems: MAX_LOOKUP_RECORDS }), truncation: Truncation },
  { additionalProperties: false },
);
export const checkLookupBody = TypeCompiler.Compile(LookupBody);
export const checkActiveBody = TypeCompiler.Compile(ActiveBody);
export const checkSessionBody = TypeCompiler.Compile(SessionBody);

/** A session entry of the envelope: the evidence and its own interpretation. */
export interface SessionEntry {
  readonly request: TerminalRecord;
  readonly interpretation: InterpretationCode[];
}

/**
 * The `svc-router-diagnosis/v1` envelope. `requests` and `truncation` (this project's
 * extension, so `omitted: null` is never lost) are present only for `--active` and
 * `--session-id`.
 */
export interface DiagnosisEnvelope {
  readonly schema: typeof DIAGNOSIS_SCHEMA_ID;
  readonly request: TerminalRecord | null;
  readonly requests?: ActiveRequest[] | SessionEntry[];
  readonly truncation?: Truncation;
  readonly current_router: RouterStatus | { unavailable: true };
  readonly interpretation: InterpretationCode[];
}

const UNMEASURED_LATENCY_ROUTES: ReadonlySet<string> = new Set(['embeddings', 'rerank']);

/**
 * The allowlisted evidence of a validated terminal record, members in contract order. The
 * legacy latency 0 of embeddings and rerank records is reported as null (SPEC.md).
 */
export function terminalEvidence(r: TerminalRecord): TerminalRecord {
  const out: Record<string, unknown> = {
    request_id: r.request_id,
    model: r.model,
    route: r.route,
    outcome: r.outcome,
    status_code: r.status_code,
    started_at: r.started_at,
    finished_at: r.finished_at,
    latency_ms: UNMEASURED_LATENCY_ROUTES.has(r.route) && r.latency_ms === 0 ? null : r.latency_ms,
    readiness_check_ms: r.readiness_check_ms,
    admission_wait_ms: r.admission_wait_ms,
    upstream_duration_ms: r.upstream_duration_ms,
    time_to_first_content_ms: r.time_to_first_content_ms,
    finish_reason: r.finish_reason,
    usage: {
      prompt_tokens: r.usage.prompt_tokens,
      completion_tokens: r.usage.completion_tokens,
      prompt_source: r.usage.prompt_source,
      completion_source: r.usage.completion_source,
    },
    output_limit:
      r.output_limit === null
        ? null
        : { requested: r.output_limit.requested, effective: r.output_limit.effective, clamped: r.output_limit.clamped },
  };
  // Revision 2 members: absent from older records (unknown), never made up here.
  for (const k of [
    'upstream_status',
    'upstream_replica',
    'attempts',
    'refusal',
    'session_id',
    'workbench_run_id',
    'task_id',
    'routing_config_hash',
    'package_version',
  ] as const) {
    if (r[k] !== undefined) out[k] = r[k];
  }
  return out as TerminalRecord;
}

/**
 * The fixed interpretation of one terminal record's evidence (pure). Pass the evidence from
 * `terminalEvidence`, so an embeddings latency of 0 already reads as unmeasured.
 */
export function interpret(r: TerminalRecord): InterpretationCode[] {
  const codes = new Set<InterpretationCode>();
  const { latency_ms: total, time_to_first_content_ms: first } = r;
  if (total !== null && first !== null) codes.add(first > total / 2 ? 'startup_dominated' : 'completion_dominated');
  if (r.finish_reason === 'length') codes.add('length_finish');
  // Older records (before revision 2) have no `refusal`: their rejected 400 was a context rejection.
  const refusal = r.outcome === 'rejected' ? r.refusal : undefined;
  if (refusal !== undefined && BEFORE_ROUTING.has(refusal)) codes.add('refused_before_routing');
  if (refusal === 'admission_full' && r.model === null) codes.add('refused_before_routing');
  if (
    refusal === 'context_length_exceeded' ||
    (r.outcome === 'rejected' && r.refusal === undefined && r.status_code === 400)
  )
    codes.add('context_rejected');
  if (refusal === 'upstream_rejected') codes.add('upstream_rejected');
  if (r.outcome === 'disconnected' || r.outcome === 'cancelled') codes.add('client_cancelled');
  if (r.finish_reason === 'tool_calls') codes.add('tool_call_transition');
  if (r.usage.prompt_source === 'estimated' || r.usage.completion_source === 'estimated') codes.add('usage_estimated');
  if (r.usage.prompt_source === 'unknown' || r.usage.completion_source === 'unknown') codes.add('usage_unknown');
  if (r.output_limit?.clamped === true) codes.add('output_clamped');
  // A 429 the router answered itself (nothing sent: no upstream time) or the engine's own,
  // relayed: on chat and completions the upstream time tells them apart. Embeddings, rerank
  // and audio record no upstream time, so theirs read as admission (the text says so).
  if (refusal === 'rate_limited') codes.add('upstream_rate_limited');
  else if (refusal === 'admission_full') codes.add('admission_rejected');
  else if (r.status_code === 429 && r.refusal === undefined)
    codes.add(r.upstream_duration_ms !== null ? 'upstream_rate_limited' : 'admission_rejected');
  if (r.outcome === 'rejected' && r.status_code === 502) codes.add('upstream_not_ready');
  // Status 503 is only the router's own "stopping"; status 0 with an error is a request the
  // router cut while stopping before anything was sent, or recorded at its next start after a
  // kill; a stream it cut while stopping (status 200) finished `cancelled`.
  if (r.outcome === 'error') {
    codes.add(
      r.status_code === 0 || r.status_code === 503 || r.finish_reason === 'cancelled'
        ? 'router_ended'
        : 'upstream_failed',
    );
  }
  if (r.outcome === 'timeout') codes.add('upstream_timeout');
  if (UNMEASURED_LATENCY_ROUTES.has(r.route) && total === null) codes.add('latency_unmeasured');
  return INTERPRETATION_CODES.filter((c) => codes.has(c));
}

/** Refusals of a request the router turned away before choosing an alias or calling an engine. */
const BEFORE_ROUTING: ReadonlySet<string> = new Set([
  'unknown_model',
  'invalid_request',
  'body_too_large',
  'unsupported_media_type',
]);

/** The interpretation of a lookup that found no record. */
export const NOT_FOUND_INTERPRETATION: InterpretationCode[] = ['not_found_maybe_active_or_evicted'];

/** Why a lookup body cannot be diagnosed: not the expected shape, or another request's or session's records. */
export type LookupFault = 'malformed' | 'identity';

/**
 * The diagnosis of a request lookup's body (`{"request": TerminalRecord}`), pure: the same for
 * `router diagnose`, the fleet and the controller. The record must be the one asked for: its
 * own id, or, asked by generated id, a caller's legacy id (a generated id answers for the
 * request that carried it); another request's record is never diagnosed under this id.
 */
export function diagnoseLookup(
  askedId: string,
  body: unknown,
): { request: TerminalRecord; interpretation: InterpretationCode[] } | LookupFault {
  if (!checkLookupBody.Check(body)) return 'malformed';
  const rid = body.request.request_id;
  if (rid !== askedId && !(GENERATED_ID_RE.test(askedId) && !GENERATED_ID_RE.test(rid))) return 'identity';
  const request = terminalEvidence(body.request);
  return { request, interpretation: interpret(request) };
}

/**
 * The diagnosis of a history lookup's body (`{"requests": [...], "truncation": ...}`), pure:
 * every record must carry `key` = `value`; entries newest first, each with its interpretation.
 */
export function diagnoseHistory(
  key: LineageKey,
  value: string,
  body: unknown,
): { requests: SessionEntry[]; truncation: Truncation } | LookupFault {
  if (!checkSessionBody.Check(body)) return 'malformed';
  if (body.requests.some((r) => r[key] !== value)) return 'identity';
  return diagnoseRecent(body);
}

/**
 * The diagnosis of a recent list's body (`/v1/requests?recent=1`: any requests, newest
 * first), pure: entries newest first, each with its interpretation.
 */
export function diagnoseRecent(body: unknown): { requests: SessionEntry[]; truncation: Truncation } | 'malformed' {
  if (!checkSessionBody.Check(body)) return 'malformed';
  const requests = body.requests
    .map((r) => terminalEvidence(r))
    .sort((a, b) => parseTimestamp(b.finished_at) - parseTimestamp(a.finished_at))
    .map((request) => ({ request, interpretation: interpret(request) }));
  return { requests, truncation: { returned: body.truncation.returned, omitted: body.truncation.omitted } };
}
