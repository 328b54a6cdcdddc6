/** Request intake: who asks, whether the request is framed, typed and encoded as a route takes it, and where it goes. */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../errors.js';
import {
  GENERATED_ID_RE,
  LEGACY_ID_RE,
  OPAQUE_ID_RE,
  type OutputLimit,
  type RouteName,
} from '../schema/terminal-record.js';
import { REPEATED, repeatedSingleHeaders } from '../http/single-headers.js';
import { badFraming, lacksHost } from '../http/http-app.js';
import { refusedJson } from '../schema/json-duplicates.js';
import { multipartField, replaceMultipartField } from './multipart.js';
import { appendMember, limitApiOf, prepareBody } from './relay-body.js';
import { BodyAborted, BodyTooLarge, UploadsFull, newGatewayId, readBody, refuseUpload } from './relay-support.js';
import type { Caller, RelayContext, Turned, Upstream } from './relay-context.js';
import { requestTrace } from '../telemetry/trace-context.js';

/** A request that may be routed: its alias's upstream and the exact bytes that go to it. */
export interface Routable {
  readonly up: Upstream;
  readonly ct: string;
  /** The JSON body as parsed (undefined for multipart). */
  readonly parsed: Record<string, unknown> | undefined;
  /** The bytes sent upstream (checked as UTF-8 JSON where the route is JSON). */
  readonly outBody: Buffer;
  readonly outputLimit: OutputLimit | null;
  /** Backend entry (performance.now() and Date.now()): the body is here whole. */
  readonly t0: number;
  readonly startedAt: number;
}

function header1(v: string | string[] | undefined): string | undefined {
  return typeof v === 'string' ? v : undefined;
}
function opaque(v: string | string[] | undefined): string | undefined {
  const s = header1(v);
  return s !== undefined && OPAQUE_ID_RE.test(s) ? s : undefined;
}

/** A caller id, or undefined when its value is itself a credential the router knows. */
function uncredential(ctx: RelayContext, v: string | undefined): string | undefined {
  return v !== undefined && ctx.isCredential(v) ? undefined : v;
}

/**
 * The session: `X-Svc-Session-Id`, or `X-Session-Affinity` only when the first is absent (a
 * malformed first header means no session, not the second one).
 */
function sessionOf(h: IncomingMessage['headers']): string | undefined {
  const first = h['x-svc-session-id'];
  return first !== undefined ? opaque(first) : opaque(h['x-session-affinity']);
}

/**
 * Authenticates an inference request and names it: a generated id (`X-Svc-Request-Id`) and
 * the record's request id (`X-Request-Id`: the caller's valid legacy id, else the generated
 * one), set once on the response so every answer to it carries them. Undefined when it was
 * answered already (a repeated or unknown credential: no id, no record).
 */
export function identify(
  req: IncomingMessage,
  res: ServerResponse,
  route: RouteName,
  ctx: RelayContext,
): Caller | undefined {
  const arrivedAt = performance.now();
  // Two credentials cannot authenticate anyone: refused before the key is looked at.
  if ((repeatedSingleHeaders(req.rawHeaders) & REPEATED.authorization) !== 0) {
    refuseUpload(req, res, ErrorCode.INVALID_FRAMING);
    return undefined;
  }
  if (!ctx.keys.accepts(req.headers.authorization)) {
    // A policy client's token is a known credential without data-plane access: 403, not 401.
    const known = ctx.knownCredential(req.headers.authorization);
    refuseUpload(req, res, known ? ErrorCode.FORBIDDEN : ErrorCode.UNAUTHENTICATED);
    return undefined;
  }
  const gid = newGatewayId();
  // Caller-chosen ids are kept in records and logs: one that is a credential is dropped (a
  // client that pasted its key into X-Request-Id must not have it written to the decision log).
  const legacy = header1(req.headers['x-request-id']);
  const requestId =
    legacy !== undefined && LEGACY_ID_RE.test(legacy) && !GENERATED_ID_RE.test(legacy) && !ctx.isCredential(legacy)
      ? legacy
      : gid;
  res.setHeader('x-svc-request-id', gid);
  res.setHeader('x-request-id', requestId);
  return {
    gid,
    requestId,
    route,
    arrivedAt,
    arrivedMs: Date.now(),
    sessionId: uncredential(ctx, sessionOf(req.headers)),
    workbenchRunId: uncredential(ctx, opaque(req.headers['x-svc-workbench-run-id'])),
    taskId: uncredential(ctx, opaque(req.headers['x-svc-task-id'])),
    // Continued whether or not spans are exported: the engine's spans join the caller's trace.
    trace: requestTrace(req.headers, ctx.spanIds, ctx.isCredential),
  };
}

/**
 * What is wrong with a request before its body is read, or undefined: a repeated single
 * header, an HTTP/1.1 request without Host, a transfer coding other than plain chunked (all
 * `invalid_request`), or a content type the route does not take.
 */
export function headerFault(req: IncomingMessage, route: RouteName): Turned | undefined {
  if (repeatedSingleHeaders(req.rawHeaders) !== 0 || lacksHost(req) || badFraming(req))
    return { code: ErrorCode.INVALID_FRAMING, refusal: 'invalid_request' };
  const ct = header1(req.headers['content-type']) ?? '';
  const ok =
    route === 'audio.transcriptions' ? /^multipart\/form-data;/i.test(ct) : /^application\/json\s*(;|$)/i.test(ct);
  return ok ? undefined : { code: ErrorCode.UNSUPPORTED_MEDIA_TYPE, refusal: 'unsupported_media_type' };
}

/**
 * Reads the whole body within the router's limits (its caller awaits it, and turns a failure
 * into its refusal with bodyFault). Until then, a graceful stop's cut answers it (cutUploads).
 */
export function readRequest(req: IncomingMessage, res: ServerResponse, c: Caller, ctx: RelayContext): Promise<Buffer> {
  ctx.uploading.set(res, c);
  return readBody(req, ctx.cfg.maxBodyBytes, ctx.uploadBudget, () => ctx.uploading.delete(res));
}

/** Why a body could not be read (readRequest's failure). */
export function bodyFault(err: unknown): Turned {
  if (err instanceof BodyTooLarge) return { code: ErrorCode.BODY_TOO_LARGE, refusal: 'body_too_large' };
  // The budget for bodies arriving at once is full: the router cannot take this one now.
  if (err instanceof UploadsFull) return { code: ErrorCode.ADMISSION_REFUSED, refusal: 'admission_full' };
  if (err instanceof BodyAborted) return { code: ErrorCode.INVALID_INPUT, refusal: null, gone: true };
  return { code: ErrorCode.INVALID_INPUT, refusal: 'invalid_request' };
}

// Fatal: an overlong form, a surrogate or a truncated sequence is refused, not replaced with
// U+FFFD (which the router would then check while the engine got the original bytes).
// ignoreBOM: a byte-order mark stays in the text, where JSON.parse refuses it as the engine would.
const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** The body as one JSON object, decoded from exactly its bytes; or why not. */
function parseJsonBody(body: Buffer): { readonly json: Record<string, unknown> } | Turned {
  let text: string;
  try {
    text = UTF8.decode(body);
  } catch {
    return { code: ErrorCode.INVALID_ENCODING, refusal: 'invalid_request' };
  }
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return { code: ErrorCode.INVALID_JSON, refusal: 'invalid_request' };
  }
  // A member named twice (`"max_tokens":100000,"max_tokens":5`) is refused, as on every JSON
  // route: JSON.parse keeps the last copy, an engine may keep the first, and the ceiling, the
  // alias and the record would then be about a request the engine never saw. So is a
  // `__proto__` or `constructor.prototype` member, as every other JSON route refuses it.
  if (!v || typeof v !== 'object' || Array.isArray(v) || refusedJson(text, v as Record<string, unknown>) !== undefined)
    return { code: ErrorCode.INVALID_JSON, refusal: 'invalid_request' };
  return { json: v as Record<string, unknown> };
}

/** JSON text of a parsed body, or undefined when it nests deeper than the serializer can go. */
function stringifyBounded(v: unknown): string | undefined {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined;
  }
}

/** Routes a whole body by its alias and prepares the bytes the engine gets; or why it cannot be routed. */
export function routeRequest(
  body: Buffer,
  req: IncomingMessage,
  route: RouteName,
  ctx: RelayContext,
): Routable | Turned {
  const t0 = performance.now();
  const startedAt = Date.now();
  const ct = header1(req.headers['content-type']) ?? '';
  let parsed: Record<string, unknown> | undefined;
  let alias: unknown;
  if (route === 'audio.transcriptions') alias = multipartField(body, ct, 'model');
  else {
    const p = parseJsonBody(body);
    if (!('json' in p)) return p;
    parsed = p.json;
    alias = parsed['model'];
  }
  if (typeof alias !== 'string' || alias.length === 0)
    return { code: ErrorCode.INVALID_MODEL, refusal: 'invalid_request' };
  const up = ctx.upstreams.get(alias);
  // The caller's string is not kept: only a configured alias names a record's model.
  if (!up) return { code: ErrorCode.MODEL_NOT_FOUND, refusal: 'unknown_model' };
  const model = up.route.alias;
  let outputLimit: OutputLimit | null = null;
  let outBody = body;
  if (parsed) {
    const prepared = prepareBody(parsed, up.route, limitApiOf(route));
    if ('invalid' in prepared)
      return { code: ErrorCode.INVALID_OUTPUT_LIMIT, refusal: 'invalid_request', model, param: prepared.invalid };
    outputLimit = prepared.outputLimit;
    // Only a member to add: spliced in before the closing brace, not re-serialized.
    if (!prepared.rewrite && prepared.append !== null) outBody = appendMember(body, prepared.append);
    else if (prepared.rewrite) {
      // A body nested deeper than the serializer's stack can go is not a request any engine takes.
      const json = stringifyBounded(parsed);
      if (json === undefined) return { code: ErrorCode.INVALID_JSON, refusal: 'invalid_request', model };
      outBody = Buffer.from(json);
    }
  } else if (up.route.upstreamModel !== up.route.alias) {
    // Multipart (audio): the engine's model name replaces the alias there too.
    const rewritten = replaceMultipartField(body, ct, 'model', up.route.upstreamModel);
    if (!rewritten) return { code: ErrorCode.INVALID_INPUT, refusal: 'invalid_request', model };
    outBody = rewritten;
  }
  return { up, ct, parsed, outBody, outputLimit, t0, startedAt };
}
