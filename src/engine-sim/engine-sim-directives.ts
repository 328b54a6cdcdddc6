/**
 * Per-request behaviour of the engine sim, read from the prompt as whitespace-separated
 * `sim:key=value` words, so a test drives the upstream through the router without any side
 * channel (the router forwards the prompt untouched).
 */
export interface Directives {
  ttftMs?: number;
  tokenDelayMs?: number;
  tokens?: number;
  /** Passed through verbatim (the router's finish-reason normalisation is tested with it). */
  finish?: string;
  usageOff?: boolean;
  failAfter?: number;
  status?: number;
  /** A context-length rejection: vLLM's error envelope (0.10.1 on), or its older flat object. */
  rejectContext?: 'nested' | 'flat';
  /** After this many tokens, an in-stream error event (vLLM's shape) then `[DONE]`; buffered: a 200 error body. */
  errorAfter?: number;
  /** Reasoning fragments (`reasoning_content`) before the answer. */
  reasoning?: number;
}

/** Every key the sim understands, for docs and tests. */
export const DIRECTIVE_KEYS = [
  'ttft_ms',
  'token_delay_ms',
  'tokens',
  'finish',
  'usage',
  'fail_after',
  'status',
  'reject',
  'error_after',
  'reasoning',
] as const;

const INT = /^[0-9]{1,9}$/;
const WS = /\s+/;

/** Reads `sim:key=value` words; unknown keys and malformed values are ignored. */
export function parseDirectives(text: string): Directives | undefined {
  // Fast path: almost every benchmark prompt has no directive at all.
  if (!text.includes('sim:')) return undefined;
  const d: Directives = {};
  for (const word of text.split(WS)) {
    if (!word.startsWith('sim:')) continue;
    const eq = word.indexOf('=');
    if (eq < 0) continue;
    const key = word.slice(4, eq);
    const value = word.slice(eq + 1);
    const n = INT.test(value) ? Number(value) : undefined;
    switch (key) {
      case 'ttft_ms':
        if (n !== undefined) d.ttftMs = n;
        break;
      case 'token_delay_ms':
        if (n !== undefined) d.tokenDelayMs = n;
        break;
      case 'tokens':
        if (n !== undefined) d.tokens = n;
        break;
      case 'finish':
        if (value.length > 0 && value.length <= 64) d.finish = value;
        break;
      case 'usage':
        if (value === 'off') d.usageOff = true;
        break;
      case 'fail_after':
        if (n !== undefined) d.failAfter = n;
        break;
      case 'status':
        if (n !== undefined && n >= 400 && n <= 599) d.status = n;
        break;
      case 'reject':
        if (value === 'context') d.rejectContext = 'nested';
        else if (value === 'context_flat') d.rejectContext = 'flat';
        break;
      case 'error_after':
        if (n !== undefined) d.errorAfter = n;
        break;
      case 'reasoning':
        if (n !== undefined) d.reasoning = Math.min(n, 100_000);
        break;
      default:
        break;
    }
  }
  return d;
}

/** Text of a chat message content: a string, or the text parts of a content array. */
function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let out = '';
  for (const part of content) {
    if (part !== null && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string') {
      out = out.length === 0 ? (part as { text: string }).text : `${out} ${(part as { text: string }).text}`;
    }
  }
  return out;
}

/**
 * The directive text (the last user message) and the character count of every message content
 * (the prompt-size estimate). Undefined when `messages` is not a non-empty array of objects.
 */
export function chatPrompt(messages: unknown): { text: string; chars: number } | undefined {
  if (!Array.isArray(messages) || messages.length === 0) return undefined;
  let text = '';
  let chars = 0;
  for (const m of messages) {
    if (m === null || typeof m !== 'object') return undefined;
    const c = contentText((m as { content?: unknown }).content);
    chars += c.length;
    if ((m as { role?: unknown }).role === 'user') text = c;
  }
  return { text, chars };
}

/** `prompt` of /v1/completions: a string, an array of strings, or token-id arrays. */
export function completionPrompt(prompt: unknown): { text: string; chars: number } | undefined {
  if (typeof prompt === 'string') return { text: prompt, chars: prompt.length };
  if (!Array.isArray(prompt) || prompt.length === 0) return undefined;
  let text = '';
  let chars = 0;
  for (const p of prompt) {
    if (typeof p === 'string') {
      text = text.length === 0 ? p : `${text} ${p}`;
      chars += p.length;
    } else if (typeof p === 'number') {
      chars += 4; // one token id is one token
    } else if (Array.isArray(p)) {
      chars += 4 * p.length;
    } else {
      return undefined;
    }
  }
  return { text, chars };
}

/**
 * `input` (and `instructions`) of /v1/responses: the directive text is the input itself when
 * it is a string, else the last user message's; the character count covers the instructions,
 * every message content and every tool result (`output`). Undefined when `input` is neither a
 * string nor a non-empty array of objects.
 */
export function responsesPrompt(input: unknown, instructions: unknown): { text: string; chars: number } | undefined {
  const extra = typeof instructions === 'string' ? instructions.length : 0;
  if (typeof input === 'string') return { text: input, chars: input.length + extra };
  if (!Array.isArray(input) || input.length === 0) return undefined;
  let text = '';
  let chars = extra;
  for (const item of input) {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return undefined;
    const i = item as { role?: unknown; content?: unknown; output?: unknown };
    const c = contentText(i.content);
    chars += c.length + (typeof i.output === 'string' ? i.output.length : 0);
    if (i.role === 'user') text = c;
  }
  return { text, chars };
}
