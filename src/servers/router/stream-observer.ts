import { StringDecoder } from 'node:string_decoder';
import { FINISH_REASONS, normalizeFinishReason, type FinishReason } from '../../schema/terminal-record.js';

/** Longest SSE line kept while waiting for its end; longer lines are skipped, not buffered. */
const MAX_LINE = 1024 * 1024;

/**
 * Watches an OpenAI-style response go by without keeping any of its text: it notes when
 * the first nonempty content fragment passed, counts fragments and characters (for
 * estimates), and keeps the normalized finish reason and reported usage.
 */
export class StreamObserver {
  firstContentAt: number | null = null;
  fragments = 0;
  contentChars = 0;
  toolCall = false;
  finishReason: FinishReason | null = null;
  promptTokens: number | null = null;
  completionTokens: number | null = null;
  done = false;
  /** The engine sent an error object (`{"error": ...}` or `"object": "error"`) instead of an answer. */
  failed = false;
  /**
   * Once failed: the bytes of the last chunk before the line that carried the error (what may
   * still be relayed); 0 when that line began in an earlier chunk.
   */
  failedAtByte = 0;
  private lineStart = -1;
  private pending = '';
  private skipping = false;
  // Made on the first SSE chunk: a buffered (non-streaming) answer never needs one.
  private decoder: StringDecoder | undefined;

  constructor(private readonly now: () => number) {}

  /** Feeds one chunk of an SSE body that arrived at `at`. */
  sseChunk(chunk: Buffer, at?: number): void {
    if (this.failed) return;
    const text = (this.decoder ??= new StringDecoder('utf8')).write(chunk);
    let start = 0;
    // A line ends at LF, CR or CRLF (the SSE grammar). CRLF reads as a line and an empty one,
    // which carries nothing. The next CR is looked up again only once passed: one scan of the
    // text for the usual engine that sends LF alone.
    let cr = text.indexOf('\r');
    for (;;) {
      if (cr >= 0 && cr < start) cr = text.indexOf('\r', start);
      const lf = text.indexOf('\n', start);
      const nl = cr < 0 ? lf : lf < 0 ? cr : Math.min(cr, lf);
      if (nl < 0) break;
      this.lineStart = this.pending.length === 0 && !this.skipping ? start : 0;
      const line = this.skipping ? '' : this.pending + text.slice(start, nl);
      this.pending = '';
      this.skipping = false;
      this.line(line, at);
      if (this.failed) {
        // Nothing after the error counts; what came before it in this chunk may be relayed.
        this.failedAtByte = this.lineStart === 0 ? 0 : Buffer.byteLength(text.slice(0, this.lineStart));
        return;
      }
      start = nl + 1;
    }
    if (!this.skipping) {
      this.pending += text.slice(start);
      if (this.pending.length > MAX_LINE) {
        this.pending = '';
        this.skipping = true;
      }
    }
  }

  /** Observes a whole JSON response body (non-streaming) that arrived at `at`. */
  jsonBody(body: Buffer, at = this.now()): void {
    let v: unknown;
    try {
      v = JSON.parse(body.toString('utf8'));
    } catch {
      return;
    }
    this.event(v, false, at);
  }

  /** Marks the answer failed from outside (a line too long to read before relaying it). */
  fail(): void {
    this.failed = true;
  }

  private line(line: string, at: number | undefined): void {
    if (!line.startsWith('data:')) return;
    const data = line.charCodeAt(5) === 32 ? line.slice(6) : line.slice(5);
    const trimmed = data.trimEnd();
    if (trimmed === '[DONE]') {
      this.done = true;
      return;
    }
    let v: unknown;
    try {
      v = JSON.parse(trimmed);
    } catch {
      return;
    }
    this.event(v, true, at);
  }

  private event(v: unknown, streaming: boolean, at?: number): void {
    if (!v || typeof v !== 'object') return;
    const o = v as { choices?: unknown; usage?: unknown; error?: unknown; object?: unknown };
    // vLLM and others report a failure during generation as an error object in the stream
    // (then often `[DONE]`); some answer a buffered request with one and status 200.
    if ((o.error !== undefined && o.error !== null) || o.object === 'error') {
      this.failed = true;
      return;
    }
    if (Array.isArray(o.choices)) {
      for (const c of o.choices) {
        if (!c || typeof c !== 'object') continue;
        const choice = c as { delta?: Record<string, unknown>; message?: Record<string, unknown>; text?: unknown; finish_reason?: unknown };
        const part = streaming ? choice.delta : choice.message;
        const content = part?.['content'] ?? choice.text;
        // A reasoning model's thinking (`reasoning_content`, or `reasoning`) is output the
        // engine generated: it counts as content for the first-content time and the estimate.
        const reasoning = part?.['reasoning_content'] ?? part?.['reasoning'];
        const chars = (typeof content === 'string' ? content.length : 0) + (typeof reasoning === 'string' ? reasoning.length : 0);
        if (chars > 0) {
          if (this.firstContentAt === null) this.firstContentAt = at ?? this.now();
          this.fragments++;
          this.contentChars += chars;
        }
        const tools = part?.['tool_calls'];
        if (Array.isArray(tools) && tools.length > 0) {
          this.toolCall = true;
          if (streaming) this.fragments++;
        }
        if (choice.finish_reason !== undefined && choice.finish_reason !== null) this.finishReason = finishReasonOf(choice.finish_reason);
      }
    }
    const u = o.usage as { prompt_tokens?: unknown; completion_tokens?: unknown } | null | undefined;
    if (u && typeof u === 'object') {
      if (Number.isSafeInteger(u.prompt_tokens) && (u.prompt_tokens as number) >= 0) this.promptTokens = u.prompt_tokens as number;
      if (Number.isSafeInteger(u.completion_tokens) && (u.completion_tokens as number) >= 0) this.completionTokens = u.completion_tokens as number;
    }
  }
}

const FINISH_SET: ReadonlySet<string> = new Set(FINISH_REASONS);

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
  const count = (v: unknown, depth: number): void => {
    if (typeof v === 'string') n += v.length;
    else if (depth >= MAX_CONTENT_DEPTH) return;
    else if (Array.isArray(v)) for (const x of v) count(x, depth + 1);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (typeof o['text'] === 'string') n += (o['text'] as string).length;
      else if ('content' in o) count(o['content'], depth + 1);
    }
  };
  if (Array.isArray(body['messages'])) for (const m of body['messages']) count((m as Record<string, unknown>)?.['content'], 0);
  count(body['prompt'], 0);
  return n;
}
