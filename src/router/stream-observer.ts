import { StringDecoder } from 'node:string_decoder';
import {
  FINISH_REASONS,
  MAX_RECORD_TOKENS,
  normalizeFinishReason,
  type FinishReason,
} from '../schema/terminal-record.js';
import { observeResponsesBody, observeResponsesEvent } from './responses-observe.js';

/** Longest SSE line kept while waiting for its end; longer lines are skipped, not buffered. */
const MAX_LINE = 1024 * 1024;
/**
 * Longest SSE event read (its lines, in characters): a longer one fails the stream however it
 * arrived, whole in one read or in many (the router holds no longer event back; docs/api.md).
 */
const MAX_EVENT = 1024 * 1024;

/**
 * Watches an OpenAI-style response go by without keeping any of its text: it notes when
 * the first nonempty content fragment passed, counts fragments and characters (for
 * estimates), and keeps the normalized finish reason and reported usage.
 */
export class StreamObserver {
  firstContentAt: number | null = null;
  fragments = 0;
  contentChars = 0;
  /** Characters of tool-call names and arguments in a buffered answer (output, not content). */
  toolChars = 0;
  toolCall = false;
  finishReason: FinishReason | null = null;
  promptTokens: number | null = null;
  completionTokens: number | null = null;
  done = false;
  /**
   * The engine did not answer: it sent an error object (`{"error": ...}` or `"object":
   * "error"`), an `error` event, an event whose data is not a JSON object (its own text), a
   * line that is no SSE field, or a buffered body that is not a JSON object.
   */
  failed = false;
  /**
   * Once failed: the bytes of the last chunk before the event that carried the failure (what
   * may still be relayed); 0 when that event began in an earlier chunk.
   */
  failedAtByte = 0;
  /**
   * Once done: the bytes of the last chunk up to the end of the `[DONE]` event, or of a
   * Responses stream's terminal event (what is relayed of it; nothing after it is read or relayed).
   */
  doneAtByte = 0;
  /** A buffered Response only accepted (`queued`, `in_progress`): no output yet (responses-observe.ts). */
  accepted = false;
  /** A Responses answer's id, where a retrieve of it must go (responses-observe.ts). */
  responseId: string | null = null;
  /** A Responses stream: one past the highest `sequence_number` relayed (responses-observe.ts). */
  nextSequence = 0;
  private pending = '';
  private skipping = false;
  /** The previous chunk ended with CR: an LF first in this one completes that CRLF. */
  private afterCr = false;
  private started = false;
  // The event being read: its data lines (joined by LF) and its type.
  private data: string | undefined;
  private eventType = '';
  /** A line of an event was read and its ending empty line was not, yet. */
  private inEvent = false;
  /** Where the event being read began in the current chunk's text; -2: in an earlier chunk; -1: none. */
  private eventStart = -1;
  /** Characters of the event being read so far (its lines and their endings). */
  private eventChars = 0;
  // Made on the first SSE chunk: a buffered (non-streaming) answer never needs one.
  private decoder: StringDecoder | undefined;

  /**
   * `responses`: the answer is an OpenAI Responses API one (`POST /v1/responses`): its events
   * are read by responses-observe.ts, and its terminal event (`response.completed`) ends it as
   * `[DONE]` ends a chat stream.
   */
  constructor(
    private readonly now: () => number,
    private readonly responses = false,
  ) {}

  /**
   * Feeds one chunk of an SSE body that arrived at `at`. Events are read as the SSE grammar
   * says: lines end at LF, CR or CRLF; `data:` lines join; an empty line ends the event.
   */
  sseChunk(chunk: Buffer, at?: number): void {
    if (this.failed || this.done) return;
    let text = (this.decoder ??= new StringDecoder('utf8')).write(chunk);
    if (!this.started && text.length > 0) {
      this.started = true;
      // A byte order mark opens the stream, as stream readers allow: not part of the first line.
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    }
    let start = 0;
    if (this.afterCr && text.charCodeAt(0) === 10) start = 1;
    this.afterCr = false;
    this.eventStart = this.inEvent ? -2 : -1;
    // The next CR is looked up again only once passed: one scan of the text for the usual
    // engine that sends LF alone.
    let cr = text.indexOf('\r');
    for (;;) {
      if (cr >= 0 && cr < start) cr = text.indexOf('\r', start);
      const lf = text.indexOf('\n', start);
      const nl = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      if (nl < 0) break;
      const lineStart = this.pending.length === 0 && !this.skipping ? start : -1;
      const line = this.skipping ? undefined : this.pending + text.slice(start, nl);
      this.pending = '';
      this.skipping = false;
      let next = nl + 1;
      if (nl === cr) {
        if (nl + 1 === text.length) this.afterCr = true;
        else if (text.charCodeAt(nl + 1) === 10) next = nl + 2;
      }
      if (line !== undefined) this.line(line, lineStart, at);
      if (this.failed) {
        // Nothing from the failed event on counts; what came before it in this chunk may be relayed.
        // (A byte order mark alone before it is not worth relaying.)
        this.failedAtByte = this.eventStart <= 0 ? 0 : byteAfterLineEnds(chunk, text, this.eventStart);
        return;
      }
      if (this.done) {
        this.doneAtByte = next >= text.length ? chunk.length : byteAfterLineEnds(chunk, text, next);
        return;
      }
      start = next;
    }
    if (!this.skipping) {
      this.pending += text.slice(start);
      if (this.pending.length > MAX_LINE) {
        this.pending = '';
        this.skipping = true;
      }
    }
  }

  /**
   * The SSE body ended: a last line or event the engine left unterminated is read as if it
   * were (lenient: an engine that ends with `data: [DONE]` and no empty line is not failed).
   */
  sseEnd(at?: number): void {
    if (this.failed || this.done) return;
    const rest = (this.decoder?.end() ?? '') + (this.skipping ? '' : this.pending);
    this.pending = '';
    this.eventStart = -1;
    if (rest.length > 0) this.line(rest, -1, at);
    if (!this.failed) this.line('', -1, at);
  }

  /** Observes a whole JSON response body (non-streaming) that arrived at `at`; one that is not a JSON object fails. */
  jsonBody(body: Buffer, at = this.now()): void {
    let v: unknown;
    let text = body.toString('utf8');
    // A byte order mark before the JSON text is ignored, as JSON parsers may (RFC 8259 8.1).
    if (text.charCodeAt(0) === 0xfeff) text = text.slice(1);
    try {
      v = JSON.parse(text);
    } catch {
      this.failed = true;
      return;
    }
    if (!isObject(v)) {
      this.failed = true;
      return;
    }
    this.event(v, false, at);
  }

  /** Marks the answer failed from outside (a line too long to read before relaying it). */
  fail(): void {
    this.failed = true;
  }

  /** One SSE line; `lineStart` is where it began in the current chunk's text (-1: earlier). */
  private line(line: string, lineStart: number, at: number | undefined): void {
    if (line.length === 0) {
      // The event ends.
      if (!this.inEvent) return;
      const data = this.data;
      const type = this.eventType;
      this.data = undefined;
      this.eventType = '';
      this.inEvent = false;
      if (type === 'error') this.failed = true;
      else if (data !== undefined) this.dispatch(data, at);
      if (!this.failed) this.eventStart = -1;
      return;
    }
    if (!this.inEvent) {
      this.inEvent = true;
      this.eventStart = lineStart < 0 ? -2 : lineStart;
      this.eventChars = 0;
    }
    this.eventChars += line.length + 1;
    if (this.eventChars > MAX_EVENT) {
      this.failed = true;
      return;
    }
    if (line.charCodeAt(0) === 58) return; // `:` a comment (keep-alive)
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.charCodeAt(0) === 32) value = value.slice(1);
    if (name === 'data') this.data = this.data === undefined ? value : `${this.data}\n${value}`;
    else if (name === 'event') this.eventType = value;
    else if (name !== 'id' && name !== 'retry') {
      // No SSE field: text of the engine's own (a traceback, an error page), never relayed.
      this.failed = true;
    }
  }

  /** One event's data: `[DONE]`, or a JSON object; anything else is the engine's text. */
  private dispatch(data: string, at: number | undefined): void {
    const trimmed = data.trim();
    if (trimmed === '[DONE]') {
      this.done = true;
      return;
    }
    let v: unknown;
    try {
      v = JSON.parse(trimmed);
    } catch {
      this.failed = true;
      return;
    }
    if (!isObject(v)) {
      this.failed = true;
      return;
    }
    this.event(v, true, at);
  }

  private event(v: object, streaming: boolean, at?: number): void {
    const o = v as { choices?: unknown; usage?: unknown; error?: unknown; object?: unknown };
    // vLLM and others report a failure during generation as an error object in the stream
    // (then often `[DONE]`); some answer a buffered request with one and status 200.
    if ((o.error !== undefined && o.error !== null) || o.object === 'error') {
      this.failed = true;
      return;
    }
    if (this.responses) {
      const r = v as Record<string, unknown>;
      if (streaming) observeResponsesEvent(this, r, at ?? this.now());
      else observeResponsesBody(this, r, at ?? this.now());
      return;
    }
    if (Array.isArray(o.choices)) {
      for (const c of o.choices) {
        if (!c || typeof c !== 'object') continue;
        const choice = c as {
          delta?: Record<string, unknown>;
          message?: Record<string, unknown>;
          text?: unknown;
          finish_reason?: unknown;
        };
        const part = streaming ? choice.delta : choice.message;
        const content = part?.['content'] ?? choice.text;
        // A reasoning model's thinking (`reasoning_content`, or `reasoning`) is output the
        // engine generated: it counts as content for the first-content time and the estimate.
        const reasoning = part?.['reasoning_content'] ?? part?.['reasoning'];
        const chars =
          (typeof content === 'string' ? content.length : 0) + (typeof reasoning === 'string' ? reasoning.length : 0);
        if (chars > 0) {
          if (this.firstContentAt === null) this.firstContentAt = at ?? this.now();
          this.fragments++;
          this.contentChars += chars;
        }
        const tools = part?.['tool_calls'];
        if (Array.isArray(tools) && tools.length > 0) {
          this.toolCall = true;
          if (streaming) this.fragments++;
          else this.toolChars += toolCallChars(tools);
        }
        if (choice.finish_reason !== undefined && choice.finish_reason !== null)
          this.finishReason = finishReasonOf(choice.finish_reason);
      }
    }
    const u = o.usage as { prompt_tokens?: unknown; completion_tokens?: unknown } | null | undefined;
    if (u && typeof u === 'object') {
      // A count past what a record may hold is no count (the estimate stands), never a record
      // the router's own schema would refuse at the next read.
      if (isTokenCount(u.prompt_tokens)) this.promptTokens = u.prompt_tokens;
      if (isTokenCount(u.completion_tokens)) this.completionTokens = u.completion_tokens;
    }
  }
}

/**
 * The byte offset in `chunk` of text index `at`, where `at` is just after a line ending (or
 * 0). Counted in line endings, not characters: CR and LF are single bytes that no UTF-8
 * sequence holds, while the decoded text can differ in length from the bytes (an invalid byte
 * decodes to U+FFFD, three bytes; a leading byte order mark is left out).
 */
function byteAfterLineEnds(chunk: Buffer, text: string, at: number): number {
  let ends = 0;
  for (let i = 0; i < at; i++) {
    const c = text.charCodeAt(i);
    if (c === 10 || c === 13) ends++;
  }
  if (ends === 0) return 0;
  for (let j = 0; j < chunk.length; j++) {
    const b = chunk[j];
    if ((b === 10 || b === 13) && --ends === 0) return j + 1;
  }
  return chunk.length;
}

const FINISH_SET: ReadonlySet<string> = new Set(FINISH_REASONS);

function isObject(v: unknown): v is object {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * normalizeFinishReason, guarded: its alias table is a plain object, so a provider string
 * that names an inherited member (`constructor`, `__proto__`, `toString`) would come back as
 * that member instead of `unknown`.
 */
export function finishReasonOf(v: unknown): FinishReason | null {
  const n: unknown = normalizeFinishReason(v);
  return n === null || (typeof n === 'string' && FINISH_SET.has(n)) ? (n as FinishReason | null) : 'unknown';
}

/** A rough local token estimate from characters (about four per token). */
export function estimateTokens(chars: number): number {
  return Math.ceil(chars / 4);
}

/** Content nested deeper than this is not text a model reads; the estimate stops there. */
const MAX_CONTENT_DEPTH = 16;

/**
 * Characters of the text a chat or completion request sends, without keeping any of it.
 * Bounded in depth: a body nested thousands deep costs no stack.
 */
export function promptChars(body: Record<string, unknown>): number {
  let n = 0;
  // `ids`: inside `prompt`, where a number is a token id (`[101, 2023]`, or lists of them):
  // one token, counted as the 4 characters the estimate takes for one.
  const count = (v: unknown, depth: number, ids = false): void => {
    if (typeof v === 'string') n += v.length;
    else if (ids && typeof v === 'number' && depth > 0) n += 4;
    else if (depth >= MAX_CONTENT_DEPTH) return;
    else if (Array.isArray(v)) for (const x of v) count(x, depth + 1, ids);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (typeof o['text'] === 'string') n += (o['text'] as string).length;
      else if ('content' in o) count(o['content'], depth + 1);
    }
  };
  if (Array.isArray(body['messages']))
    for (const m of body['messages']) count((m as Record<string, unknown>)?.['content'], 0);
  count(body['prompt'], 0, true);
  return n;
}

function isTokenCount(v: unknown): v is number {
  return Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= MAX_RECORD_TOKENS;
}

/** Characters of the names and arguments of a buffered answer's tool calls (never kept). */
function toolCallChars(tools: readonly unknown[]): number {
  let n = 0;
  for (const t of tools) {
    const f = (t as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
    if (typeof f?.name === 'string') n += f.name.length;
    if (typeof f?.arguments === 'string') n += f.arguments.length;
  }
  return n;
}

/**
 * Index just past the last empty line of `b` (the end of its last whole SSE event), or 0 when
 * it has none. Lines end at LF, CR or CRLF. `b` starts where an event may start. With `from`,
 * only empty lines that end at or after it are looked for (`b` before it held no event end).
 */
export function lastEventEnd(b: Buffer, from = 0): number {
  for (let i = b.length - 1; i >= from; i--) {
    const c = b[i];
    if (c !== 0x0a && c !== 0x0d) continue;
    // Where this line ending starts (CRLF is one).
    const t = c === 0x0a && i > 0 && b[i - 1] === 0x0d ? i - 1 : i;
    if (t === 0) return i + 1;
    const p = b[t - 1];
    if (p === 0x0a || p === 0x0d) return i + 1;
    i = t;
  }
  return 0;
}
