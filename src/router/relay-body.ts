/** The JSON body a relay sends upstream: the output limit bounded, the engine's model name filled in. */
import type { ModelRoute } from '../config/router-config.js';
import type { OutputLimit, RouteName } from '../schema/terminal-record.js';

/**
 * Validates and bounds the output limit. Returns the member's name for a malformed limit. The
 * alias's `max_output_tokens` is the ceiling: a larger request is clamped, an absent one is
 * set to the ceiling (not counted as clamped), and the engine's model name is filled in.
 * `text`: the generation API the body is for, whose limit member the engine reads (chat:
 * `max_completion_tokens`, else `max_tokens`; completions: `max_tokens` only, as vLLM and
 * OpenAI's completions API read it; responses: `max_output_tokens` only), or undefined for
 * other routes (no output limit).
 */
export function prepareBody(
  b: Record<string, unknown>,
  m: ModelRoute,
  text: LimitApi | undefined,
): PreparedBody | InvalidLimit {
  let rewrite = false;
  let append: string | null = null;
  if (m.upstreamModel !== m.alias) {
    b['model'] = m.upstreamModel;
    rewrite = true;
  }
  if (text === undefined) return { outputLimit: null, rewrite, append };
  const field =
    text === 'responses'
      ? 'max_output_tokens'
      : text === 'chat' && b['max_completion_tokens'] !== undefined && b['max_completion_tokens'] !== null
        ? 'max_completion_tokens'
        : 'max_tokens';
  const raw = b[field];
  if (raw !== undefined && raw !== null && (!Number.isSafeInteger(raw) || (raw as number) < 0))
    return { invalid: field };
  const requested = raw === undefined || raw === null ? null : (raw as number);
  const effective = requested === null ? m.maxOutputTokens : Math.min(requested, m.maxOutputTokens);
  const clamped = requested !== null && requested > m.maxOutputTokens;
  if (requested === null || clamped) {
    // Absent altogether: one member to add (the body's text is otherwise what the client sent).
    if (raw === undefined && !(field in b)) append = `"${field}":${effective}`;
    else rewrite = true;
    b[field] = effective;
  }
  if (text === 'responses') return { outputLimit: { requested, effective, clamped }, rewrite, append };
  // The other spelling, when sent too, may not carry more than the ceiling to the engine either.
  const other = field === 'max_tokens' ? 'max_completion_tokens' : 'max_tokens';
  const second = b[other];
  if (second !== undefined && second !== null) {
    if (!Number.isSafeInteger(second) || (second as number) < 0) return { invalid: other };
    if ((second as number) > m.maxOutputTokens) {
      b[other] = m.maxOutputTokens;
      rewrite = true;
    }
  }
  return { outputLimit: { requested, effective, clamped }, rewrite, append };
}

/** The generation APIs whose output limit the router bounds. */
export type LimitApi = 'chat' | 'completions' | 'responses';

/** The API of a route whose body carries an output limit, or undefined. */
export function limitApiOf(route: RouteName): LimitApi | undefined {
  return route === 'chat.completions'
    ? 'chat'
    : route === 'completions'
      ? 'completions'
      : route === 'responses'
        ? 'responses'
        : undefined;
}

/** A malformed output limit: the member that carries it. */
export interface InvalidLimit {
  readonly invalid: 'max_tokens' | 'max_completion_tokens' | 'max_output_tokens';
}

/** What the relay sends for a JSON body: `rewrite` re-serializes it; else `append` (one member) is spliced in. */
export interface PreparedBody {
  readonly outputLimit: OutputLimit | null;
  readonly rewrite: boolean;
  readonly append: string | null;
}

/**
 * The body with one member added before its closing brace. The body parsed as a JSON object
 * with a `model` member, so its last non-blank byte is `}` and it has a member before it.
 */
export function appendMember(body: Buffer, member: string): Buffer {
  let end = body.length - 1;
  while (end > 0 && (body[end] === 0x20 || body[end] === 0x0a || body[end] === 0x0d || body[end] === 0x09)) end--;
  return Buffer.concat([body.subarray(0, end), Buffer.from(`,${member}}`)]);
}
