import type { IncomingMessage } from 'node:http';
import { parseDirectives } from './engine-sim-directives.js';
import {
  DONE,
  checkModel,
  inputContextError,
  runStream,
  simulatedFailure,
  type Script,
  type SimContext,
} from './engine-sim-generate.js';
import { estimateTokens, sendBody, sendError, sendJson, startSse, type SimResponse } from './engine-sim-http.js';

const DIMENSIONS = 8;

/** POST /v1/embeddings: a deterministic 8-float vector per input (float or base64, as the SDK asks). */
export function handleEmbeddings(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  body: Record<string, unknown>,
): void {
  if (!checkModel(ctx, req, res, body['model'])) return;
  const inputs = embeddingInputs(body['input']);
  if (inputs === undefined) {
    sendError(
      req,
      res,
      400,
      "'input' must be a non-empty string, array of strings or array of token arrays",
      'invalid_request_error',
      null,
      'input',
    );
    return;
  }
  const format = body['encoding_format'] ?? 'float';
  if (format !== 'float' && format !== 'base64') {
    sendError(
      req,
      res,
      400,
      "encoding_format must be 'float' or 'base64'",
      'invalid_request_error',
      null,
      'encoding_format',
    );
    return;
  }
  // Each input is one sequence: one longer than the context is refused, as vLLM refuses it.
  const counts = inputs.map((input) =>
    typeof input === 'string' ? estimateTokens(input.length) : Math.max(1, input.length),
  );
  const longest = counts.reduce((m, n) => Math.max(m, n), 0);
  if (longest > ctx.opts.maxModelLen) {
    sendJson(req, res, 400, inputContextError(ctx.opts.maxModelLen, longest, 'embedding generation'));
    return;
  }
  let tokens = 0;
  const data = inputs.map((input, index) => {
    tokens += counts[index]!;
    const vec = vectorOf(typeof input === 'string' ? input : input.join(','));
    // The openai SDK asks for base64 by default: little-endian float32, as OpenAI sends it.
    const embedding =
      format === 'base64'
        ? Buffer.from(vec.buffer, vec.byteOffset, vec.byteLength).toString('base64')
        : Array.from(vec);
    return { object: 'embedding', index, embedding };
  });
  sendJson(
    req,
    res,
    200,
    JSON.stringify({
      object: 'list',
      data,
      model: ctx.opts.model,
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    }),
  );
}

function embeddingInputs(input: unknown): Array<string | number[]> | undefined {
  if (typeof input === 'string') return input.length > 0 ? [input] : undefined;
  if (!Array.isArray(input) || input.length === 0) return undefined;
  if (input.every((x) => typeof x === 'number')) return [input as number[]];
  for (const x of input) {
    if (typeof x === 'string') continue;
    if (!Array.isArray(x) || x.length === 0 || !x.every((t) => typeof t === 'number')) return undefined;
  }
  return input as Array<string | number[]>;
}

/** Unit-length vector seeded by an FNV-1a hash of the text: same text, same vector. */
function vectorOf(text: string): Float32Array {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  const v = new Float32Array(DIMENSIONS);
  let norm = 0;
  for (let i = 0; i < DIMENSIONS; i++) {
    h = (Math.imul(h ^ (h >>> 15), 0x2c1b3c6d) + 0x9e3779b9) >>> 0;
    const x = h / 0xffffffff - 0.5;
    v[i] = x;
    norm += x * x;
  }
  const scale = norm > 0 ? 1 / Math.sqrt(norm) : 1;
  for (let i = 0; i < DIMENSIONS; i++) v[i] = v[i]! * scale;
  return v;
}

/** POST /v1/rerank (vLLM / Jina shape): relevance = share of query words found in the document. */
export function handleRerank(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  body: Record<string, unknown>,
): void {
  if (!checkModel(ctx, req, res, body['model'])) return;
  const query = body['query'];
  const docs = rerankDocuments(body['documents']);
  const topN = body['top_n'];
  if (typeof query !== 'string' || query.length === 0) {
    sendError(req, res, 400, "'query' must be a non-empty string", 'invalid_request_error', null, 'query');
    return;
  }
  if (docs === undefined) {
    sendError(req, res, 400, "'documents' must be an array of strings", 'invalid_request_error', null, 'documents');
    return;
  }
  if (topN !== undefined && topN !== null && (typeof topN !== 'number' || !Number.isInteger(topN) || topN < 0)) {
    sendError(req, res, 400, "'top_n' must be a non-negative integer", 'invalid_request_error', null, 'top_n');
    return;
  }
  // Each query and document pair is one sequence, bounded by the context as in vLLM.
  const longest = docs.reduce((m, text) => Math.max(m, estimateTokens(query.length) + estimateTokens(text.length)), 0);
  if (longest > ctx.opts.maxModelLen) {
    sendJson(req, res, 400, inputContextError(ctx.opts.maxModelLen, longest, 'score'));
    return;
  }
  const words = new Set(
    query
      .toLowerCase()
      .split(/\W+/)
      .filter((w) => w.length > 0),
  );
  let tokens = 0;
  const scored = docs.map((text, index) => {
    tokens += estimateTokens(query.length) + estimateTokens(text.length);
    const docWords = new Set(text.toLowerCase().split(/\W+/));
    let hits = 0;
    for (const w of words) if (docWords.has(w)) hits++;
    // A small, index-based tail keeps scores distinct and the order deterministic.
    const score = (words.size > 0 ? hits / words.size : 0) * 0.98 + 0.01 / (index + 1);
    return { index, relevance_score: Math.round(score * 1e6) / 1e6, document: { text } };
  });
  scored.sort((a, b) => b.relevance_score - a.relevance_score || a.index - b.index);
  const results = typeof topN === 'number' && topN > 0 ? scored.slice(0, topN) : scored;
  if (body['return_documents'] === false) for (const r of results) delete (r as { document?: unknown }).document;
  sendJson(
    req,
    res,
    200,
    JSON.stringify({ id: `rerank-${ctx.nextId()}`, model: ctx.opts.model, usage: { total_tokens: tokens }, results }),
  );
}

function rerankDocuments(docs: unknown): string[] | undefined {
  if (!Array.isArray(docs)) return undefined;
  const out: string[] = [];
  for (const d of docs) {
    if (typeof d === 'string') out.push(d);
    else if (d !== null && typeof d === 'object' && typeof (d as { text?: unknown }).text === 'string')
      out.push((d as { text: string }).text);
    else return undefined;
  }
  return out;
}

const TRANSCRIPT = 'The quick brown fox jumps over the lazy dog.';
/** 16 kHz, 16-bit mono: how the sim turns file bytes into a duration. */
const BYTES_PER_SECOND = 32_000;

/** POST /v1/audio/transcriptions: multipart with a `file` part; the text is fixed. */
export function handleTranscription(ctx: SimContext, req: IncomingMessage, res: SimResponse, body: Buffer): void {
  const boundary = multipartBoundary(req.headers['content-type']);
  const parts = boundary === undefined ? undefined : parseMultipart(body, boundary);
  if (parts === undefined) {
    sendError(req, res, 400, 'the body must be multipart/form-data', 'invalid_request_error');
    return;
  }
  const file = parts.get('file');
  if (file === undefined || file.data.length === 0) {
    sendError(req, res, 400, "a non-empty 'file' part is required", 'invalid_request_error', null, 'file');
    return;
  }
  const model = parts.get('model');
  if (!checkModel(ctx, req, res, model === undefined ? undefined : model.data.toString('utf8'))) return;
  const format = parts.get('response_format')?.data.toString('utf8') ?? 'json';
  const duration = Math.round((file.data.length / BYTES_PER_SECOND) * 100) / 100;
  const stream = formBoolean(parts.get('stream'));
  if (stream === undefined) {
    sendError(req, res, 400, 'stream must be a boolean', 'invalid_request_error', null, 'stream');
    return;
  }
  if (stream && FORMATS.has(format)) {
    streamTranscription(ctx, req, res, parts, duration);
    return;
  }
  switch (format) {
    case 'json':
      sendJson(req, res, 200, JSON.stringify({ text: TRANSCRIPT }));
      return;
    case 'verbose_json':
      sendJson(req, res, 200, JSON.stringify({ task: 'transcribe', language: 'english', duration, text: TRANSCRIPT }));
      return;
    case 'text':
      sendBody(req, res, 200, 'text/plain; charset=utf-8', `${TRANSCRIPT}\n`);
      return;
    default:
      sendError(
        req,
        res,
        400,
        "response_format must be 'json', 'verbose_json' or 'text'",
        'invalid_request_error',
        null,
        'response_format',
      );
  }
}

const FORMATS: ReadonlySet<string> = new Set(['json', 'verbose_json', 'text']);
const WORDS = TRANSCRIPT.split(' ');
/** Whisper's encoder reads 50 frames a second of audio: the sim's prompt tokens for a clip. */
const AUDIO_TOKENS_PER_SECOND = 50;

const FORM_TRUE: ReadonlySet<string> = new Set(['true', '1', 'yes', 'on', 't', 'y']);
const FORM_FALSE: ReadonlySet<string> = new Set(['false', '0', 'no', 'off', 'f', 'n']);

/**
 * A form field that holds a boolean, read as vLLM's form model (pydantic) reads one: true,
 * 1, yes, on, t, y and their opposites, in any case; absent is false, anything else undefined.
 */
function formBoolean(part: FormPart | undefined): boolean | undefined {
  if (part === undefined) return false;
  const v = part.data.toString('utf8').trim().toLowerCase();
  return FORM_TRUE.has(v) ? true : FORM_FALSE.has(v) ? false : undefined;
}

/**
 * `stream=true`: vLLM's streamed transcription, one `transcription.chunk` event per word of the
 * fixed text (`delta.content`), a last chunk with the finish reason, a usage chunk when the form
 * asks for it (`stream_include_usage=true`), then `[DONE]`. Sim directives in the form's
 * `prompt` field (ttft_ms, token_delay_ms, tokens, fail_after, error_after, usage=off) drive it
 * as they drive a chat stream.
 */
function streamTranscription(
  ctx: SimContext,
  req: IncomingMessage,
  res: SimResponse,
  parts: Map<string, FormPart>,
  duration: number,
): void {
  const d = parseDirectives(parts.get('prompt')?.data.toString('utf8') ?? '');
  const wantUsage = formBoolean(parts.get('stream_include_usage')) === true && d?.usageOff !== true;
  const n = Math.min(d?.tokens ?? WORDS.length, 100_000);
  const id = `trsc-${ctx.nextId()}`;
  const head = `data: {"id":"${id}","object":"transcription.chunk","created":${Math.floor(Date.now() / 1000)},"model":${ctx.modelJson},"choices":`;
  const promptTokens = Math.max(1, Math.round(duration * AUDIO_TOKENS_PER_SECOND));
  const usage = wantUsage
    ? `${head}[],"usage":{"prompt_tokens":${promptTokens},"completion_tokens":${n},"total_tokens":${promptTokens + n}}}\n\n`
    : '';
  // Word i of the text, the text over again past its end: every word after the first one
  // comes with its leading space.
  const chunk = (text: string): string =>
    `${head}[{"delta":{"content":${JSON.stringify(text)}},"finish_reason":null,"stop_reason":null}]}\n\n`;
  const first = chunk(WORDS[0]!);
  const later = WORDS.map((w) => chunk(` ${w}`));
  const errorAfter = d?.errorAfter ?? -1;
  const failed = errorAfter >= 0 && errorAfter < n;
  const script: Script = {
    pre: '',
    tok: (i) => (i === 0 ? first : later[i % later.length]!),
    end: failed
      ? `data: ${simulatedFailure(500)}\n\n${DONE}`
      : `${head}[{"delta":{},"finish_reason":"stop","stop_reason":null}]}\n\n${usage}${DONE}`,
  };
  startSse(req, res);
  runStream(
    res,
    script,
    failed ? errorAfter : n,
    d?.failAfter ?? -1,
    d?.ttftMs ?? ctx.opts.ttftMs,
    d?.tokenDelayMs ?? ctx.opts.tokenDelayMs,
  );
}

export function multipartBoundary(contentType: string | undefined): string | undefined {
  if (contentType === undefined || !contentType.toLowerCase().startsWith('multipart/form-data')) return undefined;
  const m = /;\s*boundary=(?:"([^"]{1,70})"|([^;\s]{1,70}))/i.exec(contentType);
  return m ? (m[1] ?? m[2]) : undefined;
}

export interface FormPart {
  filename: string | undefined;
  data: Buffer;
}

/**
 * RFC 7578 body -> parts by name (the first of a repeated name wins). Undefined when the
 * delimiters or part headers are malformed. Part data are views into `body`, never copies.
 */
export function parseMultipart(body: Buffer, boundary: string): Map<string, FormPart> | undefined {
  const delim = Buffer.from(`--${boundary}`);
  const next = Buffer.from(`\r\n--${boundary}`);
  let pos = body.indexOf(delim);
  if (pos < 0) return undefined;
  pos += delim.length;
  const parts = new Map<string, FormPart>();
  for (;;) {
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) return parts; // closing `--boundary--`
    if (body[pos] !== 0x0d || body[pos + 1] !== 0x0a) return undefined;
    const headersEnd = body.indexOf('\r\n\r\n', pos + 2);
    if (headersEnd < 0) return undefined;
    const headers = body.toString('latin1', pos + 2, headersEnd);
    const end = body.indexOf(next, headersEnd + 4);
    if (end < 0) return undefined;
    const disposition = /content-disposition:\s*form-data\s*;([^\r\n]*)/i.exec(headers);
    const name = disposition ? /(?:^|;)\s*name="([^"]*)"/i.exec(disposition[1]!) : null;
    if (!name) return undefined;
    const filename = /(?:^|;)\s*filename="([^"]*)"/i.exec(disposition![1]!)?.[1];
    if (!parts.has(name[1]!)) parts.set(name[1]!, { filename, data: body.subarray(headersEnd + 4, end) });
    pos = end + next.length;
  }
}
