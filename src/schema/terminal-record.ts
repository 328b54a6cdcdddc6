import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Timestamp, literalUnion } from './primitives.js';

export const ROUTES = ['chat.completions', 'completions', 'embeddings', 'rerank', 'audio.transcriptions'] as const;
export type RouteName = (typeof ROUTES)[number];

export const REQUEST_OUTCOMES = ['success', 'error', 'cancelled', 'timeout', 'rejected', 'disconnected'] as const;
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number];

/** The normalized finish reasons; any other provider string becomes `unknown`, never free text. */
export const FINISH_REASONS = [
  'stop',
  'length',
  'tool_calls',
  'content_filter',
  'error',
  'cancelled',
  'unknown',
] as const;
export type FinishReason = (typeof FINISH_REASONS)[number];

export const USAGE_SOURCES = ['upstream', 'estimated', 'unknown'] as const;
export type UsageSource = (typeof USAGE_SOURCES)[number];

/** Generated request identifiers: `req_` + 32 lowercase hex (reserved namespace). */
export const GENERATED_ID_RE = /^req_[0-9a-f]{32}$/;
/** Caller legacy ids we keep: bounded, printable, no spaces; never of the reserved shape. */
export const LEGACY_ID_RE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
/** Session, workbench run and task ids: bounded opaque tokens. */
export const OPAQUE_ID_RE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

/**
 * Bounds no real record reaches (a request lives at most a day upstream plus an hour queued):
 * a value beyond them is a broken or forged record, refused like any other schema breach
 * rather than shown as "total 1e+305 s".
 */
const MAX_RECORD_MS = 604_800_000;
export const MAX_RECORD_TOKENS = 4_294_967_295;
const Ms = Type.Union([Type.Number({ minimum: 0, maximum: MAX_RECORD_MS }), Type.Null()]);
const Tokens = Type.Union([Type.Integer({ minimum: 0, maximum: MAX_RECORD_TOKENS }), Type.Null()]);
const Opaque = Type.String({ pattern: OPAQUE_ID_RE.source });

export const Usage = Type.Object(
  {
    prompt_tokens: Tokens,
    completion_tokens: Tokens,
    prompt_source: literalUnion(USAGE_SOURCES),
    completion_source: literalUnion(USAGE_SOURCES),
  },
  { additionalProperties: false },
);
export type Usage = Static<typeof Usage>;

export const OutputLimit = Type.Object(
  { requested: Tokens, effective: Tokens, clamped: Type.Boolean() },
  { additionalProperties: false },
);
export type OutputLimit = Static<typeof OutputLimit>;

/** The router's terminal decision record (CONTRACT.md): nothing else, no prompt or response. */
export const TerminalRecord = Type.Object(
  {
    // Printable identifier characters only: records are shown on terminals and dashboards.
    request_id: Type.String({ pattern: LEGACY_ID_RE.source, maxLength: 128 }),
    model: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$' }),
    route: literalUnion(ROUTES),
    outcome: literalUnion(REQUEST_OUTCOMES),
    // 0: the client was sent nothing; else an HTTP status code.
    status_code: Type.Union([Type.Literal(0), Type.Integer({ minimum: 100, maximum: 999 })]),
    started_at: Timestamp,
    finished_at: Timestamp,
    latency_ms: Ms,
    readiness_check_ms: Ms,
    admission_wait_ms: Ms,
    upstream_duration_ms: Ms,
    time_to_first_content_ms: Ms,
    finish_reason: Type.Union([literalUnion(FINISH_REASONS), Type.Null()]),
    usage: Usage,
    output_limit: Type.Union([OutputLimit, Type.Null()]),
    // Revision 2 (absent from older records): which of the alias's upstreams answered (index
    // from 0) or null when none was called, and the upstream attempts made.
    upstream_replica: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 255 }), Type.Null()])),
    attempts: Type.Optional(Type.Integer({ minimum: 0, maximum: 255 })),
    session_id: Type.Optional(Opaque),
    workbench_run_id: Type.Optional(Opaque),
    task_id: Type.Optional(Opaque),
    routing_config_hash: Type.Optional(Type.String({ pattern: '^[0-9a-f]{64}$' })),
    package_version: Type.Optional(Type.String({ pattern: '^[0-9A-Za-z.+-]{1,64}$' })),
  },
  { additionalProperties: false },
);
export type TerminalRecord = Static<typeof TerminalRecord>;
export const checkTerminalRecord = TypeCompiler.Compile(TerminalRecord);

const FINISH_SET: ReadonlySet<string> = new Set(FINISH_REASONS);
/** Provider spellings that mean one of ours (llama.cpp, SGLang, older OpenAI). */
const FINISH_ALIASES: Readonly<Record<string, FinishReason>> = {
  function_call: 'tool_calls',
  tool_call: 'tool_calls',
  eos: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  abort: 'cancelled',
};

/** Normalizes a provider finish reason; unknown strings become `unknown`, absent stays null. */
export function normalizeFinishReason(v: unknown): FinishReason | null {
  if (v === null || v === undefined) return null;
  if (typeof v !== 'string') return 'unknown';
  if (FINISH_SET.has(v)) return v as FinishReason;
  // hasOwn: provider strings like `constructor` must not reach inherited members.
  return Object.hasOwn(FINISH_ALIASES, v) ? FINISH_ALIASES[v]! : 'unknown';
}

/** Characters a JSON string holds as they are (printable ASCII but `"` and `\`). */
const PLAIN_JSON_TEXT = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;
const jsonText = (s: string): string => (PLAIN_JSON_TEXT.test(s) ? `"${s}"` : JSON.stringify(s));
const jsonNumber = (v: number | null): string => (v !== null && Number.isFinite(v) ? `${v}` : 'null');
const jsonName = (v: string | null): string => (v === null ? 'null' : jsonText(v));

/**
 * A terminal record's JSON text: `JSON.stringify(record)` bit for bit for a record whose
 * members are in the schema's order (as the router builds them), at about half the cost
 * (the router writes one per request). Members in another order come out in the schema's;
 * members the schema does not have are left out.
 */
export function terminalRecordJson(r: TerminalRecord): string {
  const u = r.usage;
  const o = r.output_limit;
  const limit =
    o === null
      ? 'null'
      : `{"requested":${jsonNumber(o.requested)},"effective":${jsonNumber(o.effective)},"clamped":${o.clamped === true}}`;
  let s =
    `{"request_id":${jsonText(r.request_id)},"model":${jsonText(r.model)},"route":${jsonText(r.route)},"outcome":${jsonText(r.outcome)},` +
    `"status_code":${jsonNumber(r.status_code)},"started_at":${jsonText(r.started_at)},"finished_at":${jsonText(r.finished_at)},` +
    `"latency_ms":${jsonNumber(r.latency_ms)},"readiness_check_ms":${jsonNumber(r.readiness_check_ms)},"admission_wait_ms":${jsonNumber(r.admission_wait_ms)},` +
    `"upstream_duration_ms":${jsonNumber(r.upstream_duration_ms)},"time_to_first_content_ms":${jsonNumber(r.time_to_first_content_ms)},` +
    `"finish_reason":${jsonName(r.finish_reason)},"usage":{"prompt_tokens":${jsonNumber(u.prompt_tokens)},"completion_tokens":${jsonNumber(u.completion_tokens)},` +
    `"prompt_source":${jsonText(u.prompt_source)},"completion_source":${jsonText(u.completion_source)}},"output_limit":${limit}`;
  if (r.upstream_replica !== undefined) s += `,"upstream_replica":${jsonNumber(r.upstream_replica)}`;
  if (r.attempts !== undefined) s += `,"attempts":${jsonNumber(r.attempts)}`;
  if (r.session_id !== undefined) s += `,"session_id":${jsonText(r.session_id)}`;
  if (r.workbench_run_id !== undefined) s += `,"workbench_run_id":${jsonText(r.workbench_run_id)}`;
  if (r.task_id !== undefined) s += `,"task_id":${jsonText(r.task_id)}`;
  if (r.routing_config_hash !== undefined) s += `,"routing_config_hash":${jsonText(r.routing_config_hash)}`;
  if (r.package_version !== undefined) s += `,"package_version":${jsonText(r.package_version)}`;
  return `${s}}`;
}
