import type { IncomingMessage, ServerResponse } from 'node:http';

/** Larger bodies get 413, like an engine behind a body-size limit. */
export const MAX_BODY_BYTES = 8 * 1024 * 1024;

export const JSON_TYPE = 'application/json';

/**
 * Per-request state kept on the response object itself: the one shared `close` listener reads
 * it, so no closure is allocated per request on the hot path.
 */
export interface SimResponse extends ServerResponse {
  simTimer?: NodeJS.Timeout | undefined;
  simInterval?: NodeJS.Timeout | undefined;
  /** Set when the sim itself cut the connection (fail_after), so it is not counted as a client abort. */
  simCut?: boolean;
}

/** Stops whatever generation timers a response still has; safe to call twice. */
export function clearSimTimers(res: SimResponse): void {
  if (res.simTimer !== undefined) {
    clearTimeout(res.simTimer);
    res.simTimer = undefined;
  }
  if (res.simInterval !== undefined) {
    clearInterval(res.simInterval);
    res.simInterval = undefined;
  }
}

/**
 * Engines echo the caller's request id (the router sends its generated one); nothing else
 * about request headers is kept. Only an id of the bounded identifier shape is echoed.
 */
export function requestId(req: IncomingMessage): string | undefined {
  const rid = req.headers['x-request-id'];
  return typeof rid === 'string' && /^[A-Za-z0-9._:@/+=-]{1,128}$/.test(rid) ? rid : undefined;
}

/** Writes a complete response with a content-length (keep-alive friendly). */
export function sendBody(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  contentType: string,
  body: string,
): void {
  if (res.headersSent || res.destroyed) return;
  const rid = requestId(req);
  const len = String(Buffer.byteLength(body));
  res.writeHead(
    status,
    rid === undefined
      ? ['content-type', contentType, 'content-length', len]
      : ['content-type', contentType, 'content-length', len, 'x-request-id', rid],
  );
  res.end(body);
}

export function sendJson(req: IncomingMessage, res: ServerResponse, status: number, body: string): void {
  sendBody(req, res, status, JSON_TYPE, body);
}

/** Headers of an SSE stream; sent at once, before the first token, as engines do. */
export function startSse(req: IncomingMessage, res: ServerResponse): void {
  const rid = requestId(req);
  res.writeHead(
    200,
    rid === undefined
      ? ['content-type', 'text/event-stream; charset=utf-8', 'cache-control', 'no-cache']
      : ['content-type', 'text/event-stream; charset=utf-8', 'cache-control', 'no-cache', 'x-request-id', rid],
  );
  res.flushHeaders();
}

/** OpenAI's error envelope. */
export function openAiError(
  message: string,
  type: string,
  code: string | number | null,
  param: string | null = null,
): string {
  return JSON.stringify({ error: { message, type, param, code } });
}

export function sendError(
  req: IncomingMessage,
  res: ServerResponse,
  status: number,
  message: string,
  type = 'invalid_request_error',
  code: string | number | null = null,
  param: string | null = null,
): void {
  sendJson(req, res, status, openAiError(message, type, code, param));
}

export function isJsonRequest(req: IncomingMessage): boolean {
  const ct = req.headers['content-type'];
  return ct !== undefined && ct.length >= 16 && ct.slice(0, 16).toLowerCase() === JSON_TYPE;
}

/**
 * Collects a request body up to MAX_BODY_BYTES and hands it to `onBody`; a larger body is
 * answered 413 at once and the rest is drained and dropped (the connection stays usable).
 * Callback style on purpose: no promise per request.
 */
export function readBody(req: IncomingMessage, res: ServerResponse, onBody: (body: Buffer) => void): void {
  const declared = req.headers['content-length'];
  if (declared !== undefined && Number(declared) > MAX_BODY_BYTES) {
    tooLarge(req, res);
    return;
  }
  let first: Buffer | undefined;
  let chunks: Buffer[] | undefined;
  let size = 0;
  let over = false;
  req.on('data', (c: Buffer) => {
    if (over) return;
    size += c.length;
    if (size > MAX_BODY_BYTES) {
      over = true;
      first = undefined;
      chunks = undefined;
      tooLarge(req, res);
      return;
    }
    if (first === undefined) first = c;
    else (chunks ??= [first]).push(c);
  });
  req.on('end', () => {
    if (over || res.destroyed) return;
    onBody(chunks !== undefined ? Buffer.concat(chunks, size) : (first ?? EMPTY));
  });
}

const EMPTY = Buffer.alloc(0);

function tooLarge(req: IncomingMessage, res: ServerResponse): void {
  sendError(req, res, 413, 'Request body too large', 'invalid_request_error', 413);
}

/** Parses a JSON object body; undefined for bad JSON or a non-object (the caller answers 400). */
export function parseJsonObject(body: Buffer): Record<string, unknown> | undefined {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
}

/** ceil(chars / 4), at least 1: a deterministic stand-in for a tokenizer. */
export function estimateTokens(chars: number): number {
  return Math.max(1, Math.ceil(chars / 4));
}
