import { Type, type Static } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { Timestamp, literalUnion } from './primitives.js';

export const ROUTES = ['chat.completions', 'completions', 'embeddings', 'rerank', 'audio.transcriptions'] as const;
export type RouteName = (typeof ROUTES)[number];

export const REQUEST_OUTCOMES = ['success', 'error', 'cancelled', 'timeout', 'rejected', 'disconnected'] as const;
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number];

/** The normalized finish reasons; any other provider string becomes `unknown`, never free text. */
export const FINISH_REASONS = ['stop', 'length', 'tool_calls', 'content_filter', 'error', 'cancelled', 'unknown'] as const;
export type FinishReason = (typeof FINISH_REASONS)[number];

export const USAGE_SOURCES = ['upstream', 'estimated', 'unknown'] as const;
export type UsageSource = (typeof USAGE_SOURCES)[number];

/** Generated request identifiers: `req_` + 32 lowercase hex (reserved namespace). */
export const GENERATED_ID_RE = /^req_[0-9a-f]{32}$/;
/** Caller legacy ids we keep: bounded, printable, no spaces; never of the reserved shape. */
export const LEGACY_ID_RE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;
/** Session, workbench run and task ids: bounded opaque tokens. */
export const OPAQUE_ID_RE = /^[A-Za-z0-9._:@/+=-]{1,128}$/;

const Ms = Type.Union([Type.Number({ minimum: 0 }), Type.Null()]);
const Tokens = Type.Union([Type.Integer({ minimum: 0 }), Type.Null()]);
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
    status_code: Type.Integer({ minimum: 0, maximum: 999 }),
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
