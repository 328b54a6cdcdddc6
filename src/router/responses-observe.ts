/**
 * How the router reads an OpenAI Responses API answer (`POST /v1/responses`, as vLLM serves
 * it) going by, without keeping any of its text: first content, fragments and characters (for
 * estimates), the finish reason from the response's `status` and `incomplete_details`, and
 * the usage from `usage.input_tokens` / `usage.output_tokens`. docs/decisions/0055.
 */
import { MAX_RECORD_TOKENS, type FinishReason } from '../schema/terminal-record.js';
import { openAiError, type ErrorCode } from '../errors.js';
import { RESPONSE_ID_RE } from './response-ids.js';

/** The measurements a Responses answer fills in (StreamObserver's members of the same names). */
export interface ObservedAnswer {
  firstContentAt: number | null;
  fragments: number;
  contentChars: number;
  toolChars: number;
  toolCall: boolean;
  finishReason: FinishReason | null;
  promptTokens: number | null;
  completionTokens: number | null;
  done: boolean;
  failed: boolean;
  /**
   * A buffered Response the engine only accepted (`status` `queued` or `in_progress`: a
   * `background` request): its output is yet to be generated, so none is counted or estimated.
   */
  accepted: boolean;
  /**
   * The Response's `id` (a buffered answer's, a stream's from its first event that carries
   * the Response), when it has the shape of one: where a later retrieve must go (decision 0032).
   */
  responseId: string | null;
  /**
   * One past the highest `sequence_number` of the events read before any failure (0 when none
   * had one): the number the router's own `error` event takes when it ends the stream.
   */
  nextSequence: number;
}

/**
 * Deltas of generated text: the answer's own and a reasoning model's thinking (which chat's
 * `reasoning_content` counts as content too, so the two routes measure first content alike).
 */
const TEXT_DELTAS: ReadonlySet<string> = new Set(['response.output_text.delta', 'response.reasoning_text.delta']);

/**
 * The events that end a response: vLLM sends `response.completed` whatever the status (an
 * answer cut at its limit too, with status `incomplete`); OpenAI sends `response.incomplete`
 * for that. Nothing after one of them is part of the answer.
 */
const TERMINAL_EVENTS: ReadonlySet<string> = new Set(['response.completed', 'response.incomplete']);

/** One event of a Responses stream (the JSON object of its `data:` lines), seen at `at`. */
export function observeResponsesEvent(o: ObservedAnswer, v: Record<string, unknown>, at: number): void {
  const type = v['type'];
  if (typeof type !== 'string') return;
  // `response.created` carries the Response first; any later event with it would do.
  if (o.responseId === null && isObject(v['response'])) o.responseId = responseIdOf(v['response']);
  if (TEXT_DELTAS.has(type)) {
    const delta = v['delta'];
    if (typeof delta === 'string' && delta.length > 0) {
      if (o.firstContentAt === null) o.firstContentAt = at;
      o.fragments++;
      o.contentChars += delta.length;
    }
  } else if (type === 'response.function_call_arguments.delta') {
    // As a streamed chat tool call: a fragment of output, not content.
    o.toolCall = true;
    o.fragments++;
  } else if (type === 'response.output_item.added') {
    if (isFunctionCall(v['item'])) o.toolCall = true;
  } else if (TERMINAL_EVENTS.has(type)) {
    const r = v['response'];
    if (isObject(r)) {
      o.finishReason = responsesFinish(r) ?? (type === 'response.completed' ? 'stop' : 'unknown');
      readUsage(o, r['usage']);
    }
    o.done = true;
  } else if (type === 'response.failed' || type === 'error') {
    // The engine failed the answer: its error text is never relayed (the router's fixed error
    // event replaces it) and the record's finish is `error`.
    o.failed = true;
  }
  // Only events the client gets count: the failing one is not relayed.
  const seq = v['sequence_number'];
  if (!o.failed && isSequence(seq) && seq >= o.nextSequence) o.nextSequence = seq + 1;
}

/**
 * The SSE `error` event that ends a Responses stream the router ends in failure (the engine
 * failed, stalled or was cut after some events were relayed): OpenAI's own shape for it
 * (`{"type": "error", "code", "message", "param", "sequence_number"}`), which the OpenAI SDKs
 * yield as an event of type `error`, with the registry's code and fixed message.
 * docs/decisions/0030.
 */
export function responsesErrorEvent(code: ErrorCode, sequence: number): Buffer {
  const e = openAiError(code).error;
  const data = { type: 'error', code: e.code, message: e.message, param: e.param, sequence_number: sequence };
  return Buffer.from(`event: error\ndata: ${JSON.stringify(data)}\n\n`);
}

/** A whole (non-streaming) Response object that arrived at `at`. */
export function observeResponsesBody(o: ObservedAnswer, r: Record<string, unknown>, at: number): void {
  if (r['status'] === 'failed') {
    o.failed = true;
    return;
  }
  o.responseId = responseIdOf(r);
  const output = r['output'];
  if (Array.isArray(output)) {
    for (const item of output) {
      if (!isObject(item)) continue;
      if (isFunctionCall(item)) {
        o.toolCall = true;
        o.toolChars += textLength(item['name']) + textLength(item['arguments']);
      } else if (Array.isArray(item['content'])) {
        // A message's output_text parts, a reasoning item's reasoning_text parts.
        for (const part of item['content']) if (isObject(part)) o.contentChars += textLength(part['text']);
      }
    }
  }
  // A buffered answer shows its content only when the whole of it arrives (as chat's does).
  if (o.contentChars > 0) {
    o.firstContentAt = at;
    o.fragments = 1;
  }
  o.finishReason = responsesFinish(r);
  // Accepted, not answered (decision 0031): an output count would be of work still to come.
  o.accepted = r['status'] === 'queued' || r['status'] === 'in_progress';
  readUsage(o, r['usage'], !o.accepted);
}

/**
 * The record's finish reason of a Response: `completed` is `stop` (`tool_calls` when its
 * output holds a function call, as chat reports it), `incomplete` is `length` for
 * `max_output_tokens` and `content_filter` for `content_filter` (any other reason: `unknown`),
 * `failed` is `error`, `cancelled` is `cancelled`; `queued` and `in_progress` (a background
 * response) have none yet (null); any other status is `unknown`; no status, null.
 */
export function responsesFinish(r: Record<string, unknown>): FinishReason | null {
  const status = r['status'];
  if (status === undefined || status === null) return null;
  switch (status) {
    case 'completed':
      return Array.isArray(r['output']) && r['output'].some(isFunctionCall) ? 'tool_calls' : 'stop';
    case 'incomplete': {
      const details = r['incomplete_details'];
      const reason = isObject(details) ? details['reason'] : undefined;
      return reason === 'max_output_tokens' ? 'length' : reason === 'content_filter' ? 'content_filter' : 'unknown';
    }
    case 'failed':
      return 'error';
    case 'cancelled':
      return 'cancelled';
    case 'queued':
    case 'in_progress':
      return null;
    default:
      return 'unknown';
  }
}

/** Content nested deeper than this is not text a model reads; the estimate stops there. */
const MAX_INPUT_DEPTH = 16;

/**
 * Characters of the text a Responses request sends (`instructions` and `input`: a string, or
 * items whose `content` is a string or parts with `text`, and tool results' `output`), without
 * keeping any of it. Bounded in depth.
 */
export function responsesPromptChars(body: Record<string, unknown>): number {
  let n = textLength(body['instructions']);
  const count = (v: unknown, depth: number): void => {
    if (typeof v === 'string') n += v.length;
    else if (depth >= MAX_INPUT_DEPTH) return;
    else if (Array.isArray(v)) for (const x of v) count(x, depth + 1);
    else if (isObject(v)) {
      if (typeof v['text'] === 'string') n += v['text'].length;
      else if ('content' in v) count(v['content'], depth + 1);
      // A function call's result (`function_call_output`) and a call the model made before.
      n += textLength(v['output']) + textLength(v['arguments']);
    }
  };
  count(body['input'], 0);
  return n;
}

function readUsage(o: ObservedAnswer, u: unknown, output = true): void {
  if (!isObject(u)) return;
  // A count past what a record may hold is no count (the estimate stands).
  if (isTokenCount(u['input_tokens'])) o.promptTokens = u['input_tokens'];
  if (output && isTokenCount(u['output_tokens'])) o.completionTokens = u['output_tokens'];
}

/** A Response's `id`, when it has the shape of one; else null. */
function responseIdOf(r: Record<string, unknown>): string | null {
  const id = r['id'];
  return typeof id === 'string' && RESPONSE_ID_RE.test(id) ? id : null;
}

function isFunctionCall(item: unknown): boolean {
  return isObject(item) && item['type'] === 'function_call';
}

function textLength(v: unknown): number {
  return typeof v === 'string' ? v.length : 0;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A sequence number that one more can follow (a safe non-negative integer below the largest). */
function isSequence(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) < Number.MAX_SAFE_INTEGER;
}

function isTokenCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= MAX_RECORD_TOKENS;
}
