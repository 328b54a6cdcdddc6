import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { ActiveRequest } from './records/router-registry.js';
import { ErrorCode } from '../errors.js';
import {
  GENERATED_ID_RE,
  LEGACY_ID_RE,
  OPAQUE_ID_RE,
  type OutputLimit,
  type RouteName,
} from '../schema/terminal-record.js';
import { AdmissionRefused } from './admission.js';
import { multipartField, replaceMultipartField } from './multipart.js';
import {
  BodyTooLarge,
  RelayAbort,
  UploadsFull,
  ms,
  newGatewayId,
  readBody,
  refuseUpload,
  sendRawProblem,
  whenSocketCloses,
} from './relay-support.js';
import { appendMember, prepareBody } from './relay-body.js';
import { pipeUpstream } from './relay-upstream.js';
import { REPEATED, repeatedSingleHeaders } from '../http/single-headers.js';
import { badFraming, lacksHost } from '../http/http-app.js';
import { refusedJson } from '../schema/json-duplicates.js';
import { StreamObserver, estimateTokens, promptChars } from './stream-observer.js';
import { terminalRecord } from './relay-record.js';
import type { Exchange, RelayContext } from './relay-context.js';

const UPSTREAM_PATH: Readonly<Record<RouteName, string>> = {
  'chat.completions': '/chat/completions',
  completions: '/completions',
  embeddings: '/embeddings',
  rerank: '/rerank',
  'audio.transcriptions': '/audio/transcriptions',
};

const monotonicNow = (): number => performance.now();

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

/** JSON text of a parsed body, or undefined when it nests deeper than the serializer can go. */
function stringifyBounded(v: unknown): string | undefined {
  try {
    return JSON.stringify(v);
  } catch {
    return undefined;
  }
}

/**
 * One inference request through the router: authenticate, identify, route by alias, check
 * readiness, admit, relay to the upstream (streaming chunk by chunk), and leave exactly one
 * terminal record, whatever happens. Never stores prompt or response text.
 */
export async function relayInference(
  req: IncomingMessage,
  res: ServerResponse,
  route: RouteName,
  ctx: RelayContext,
): Promise<void> {
  // Two credentials cannot authenticate anyone: refused before the key is looked at.
  const repeated = repeatedSingleHeaders(req.rawHeaders);
  if ((repeated & REPEATED.authorization) !== 0) return refuseUpload(req, res, ErrorCode.INVALID_INPUT);
  if (!ctx.keys.accepts(req.headers.authorization)) {
    // A policy client's token is a known credential without data-plane access: 403, not 401.
    return refuseUpload(
      req,
      res,
      ctx.knownCredential(req.headers.authorization) ? ErrorCode.FORBIDDEN : ErrorCode.UNAUTHENTICATED,
    );
  }
  const gid = newGatewayId();
  // Set once here: every answer to this request, errors and successes alike, carries it.
  res.setHeader('x-svc-request-id', gid);
  // A repeated single header, an HTTP/1.1 request without Host, or a transfer coding other
  // than plain chunked: the fixed 400, with the id.
  if (repeated !== 0 || lacksHost(req) || badFraming(req))
    return turnedAway(ctx, gid, req, res, ErrorCode.INVALID_INPUT);
  const isAudio = route === 'audio.transcriptions';
  const ct = header1(req.headers['content-type']) ?? '';
  if (isAudio ? !/^multipart\/form-data;/i.test(ct) : !/^application\/json\s*(;|$)/i.test(ct)) {
    return turnedAway(ctx, gid, req, res, ErrorCode.UNSUPPORTED_MEDIA_TYPE);
  }
  let body: Buffer;
  ctx.uploading.add(res);
  try {
    body = await readBody(req, ctx.cfg.maxBodyBytes, ctx.uploadBudget);
  } catch (err) {
    // Answered already when a graceful stop cut the upload (cutUploads).
    if (res.headersSent) return;
    const code =
      err instanceof BodyTooLarge
        ? ErrorCode.BODY_TOO_LARGE
        : err instanceof UploadsFull
          ? ErrorCode.ADMISSION_REFUSED
          : ErrorCode.INVALID_INPUT;
    return turnedAway(ctx, gid, req, res, code);
  } finally {
    ctx.uploading.delete(res);
  }
  if (res.headersSent) return;
  // Backend entry: the request is here whole. The client's upload time is not the router's.
  const t0 = performance.now();
  const startedAt = Date.now();
  let parsed: Record<string, unknown> | undefined;
  let alias: unknown;
  if (isAudio) alias = multipartField(body, ct, 'model');
  else {
    const text = body.toString('utf8');
    try {
      const v: unknown = JSON.parse(text);
      if (v && typeof v === 'object' && !Array.isArray(v)) parsed = v as Record<string, unknown>;
    } catch {
      // malformed JSON: answered below
    }
    // A member named twice (`"max_tokens":100000,"max_tokens":5`) is refused, as on every JSON
    // route: JSON.parse keeps the last copy, an engine may keep the first, and the ceiling,
    // the alias and the record would then be about a request the engine never saw. So is a
    // `__proto__` or `constructor.prototype` member, as every other JSON route refuses it.
    if (!parsed || refusedJson(text, parsed) !== undefined)
      return turnedAway(ctx, gid, undefined, res, ErrorCode.INVALID_INPUT);
    alias = parsed['model'];
  }
  if (typeof alias !== 'string' || alias.length === 0)
    return turnedAway(ctx, gid, undefined, res, ErrorCode.INVALID_INPUT);
  const up = ctx.upstreams.get(alias);
  if (!up) return turnedAway(ctx, gid, undefined, res, ErrorCode.NOT_FOUND);

  const isText = route === 'chat.completions' || route === 'completions';
  let outputLimit: OutputLimit | null = null;
  let outBody = body;
  if (parsed) {
    const prepared = prepareBody(
      parsed,
      up.route,
      route === 'chat.completions' ? 'chat' : route === 'completions' ? 'completions' : undefined,
    );
    if (!prepared) return turnedAway(ctx, gid, undefined, res, ErrorCode.INVALID_INPUT);
    outputLimit = prepared.outputLimit;
    if (!prepared.rewrite && prepared.append !== null) {
      // Only a member to add: spliced in before the closing brace, not re-serialized.
      outBody = appendMember(body, prepared.append);
    } else if (prepared.rewrite) {
      // A body nested deeper than the serializer's stack can go is not a request any engine takes.
      const text = stringifyBounded(parsed);
      if (text === undefined) return turnedAway(ctx, gid, undefined, res, ErrorCode.INVALID_INPUT);
      outBody = Buffer.from(text);
    }
  } else if (up.route.upstreamModel !== up.route.alias) {
    // Multipart (audio): the engine's model name replaces the alias there too.
    const rewritten = replaceMultipartField(body, ct, 'model', up.route.upstreamModel);
    if (!rewritten) return turnedAway(ctx, gid, undefined, res, ErrorCode.INVALID_INPUT);
    outBody = rewritten;
  }
  // Caller-chosen ids are kept in records and logs: one that is a credential is dropped (a
  // client that pasted its key into X-Request-Id must not have it written to the decision log).
  // Checked after the format (a malformed value is dropped anyway), one hash each.
  const legacy = header1(req.headers['x-request-id']);
  const a: ActiveRequest = {
    gid,
    requestId:
      legacy !== undefined && LEGACY_ID_RE.test(legacy) && !GENERATED_ID_RE.test(legacy) && !ctx.isCredential(legacy)
        ? legacy
        : gid,
    model: up.route.alias,
    route,
    startedAt,
    phase: 'checking',
    phaseAt: startedAt,
    lastUpstreamAt: null,
    admissionWaitMs: null,
    // No text or token id to go by (an image-only message, an empty prompt): the engine still
    // read a prompt (a chat template at least), so its size is unknown, not an estimated 0.
    estimatedPromptTokens: parsed && isText ? estimateTokens(promptChars(parsed)) || null : null,
    estimatedCompletionTokens: 0,
    upstreamPromptTokens: null,
    upstreamCompletionTokens: null,
    sessionId: uncredential(ctx, sessionOf(req.headers)),
    workbenchRunId: uncredential(ctx, opaque(req.headers['x-svc-workbench-run-id'])),
    taskId: uncredential(ctx, opaque(req.headers['x-svc-task-id'])),
    queuedAt: null,
    stop: undefined,
  };
  const x: Exchange = {
    a,
    route,
    t0,
    obs: new StreamObserver(monotonicNow),
    readinessMs: null,
    admissionWaitMs: null,
    dispatchAt: null,
    upstreamEndAt: null,
    statusCode: 0,
    outcome: 'error',
    outputLimit,
    promptEstimate: a.estimatedPromptTokens,
    streaming: parsed?.['stream'] === true,
    finishOverride: null,
    answered: false,
    upstreamReplica: null,
    attempts: 0,
    routingConfigHash: up.routingConfigHash,
  };
  ctx.registry.begin(a);

  const abort = new RelayAbort();
  a.stop = abort;
  // Arrived after a graceful stop cut the others: cut too, before any engine work.
  if (ctx.stopping.value) abort.abort();
  let clientGone = false;
  const gone = (): void => {
    if (!res.writableFinished && !clientGone) {
      clientGone = true;
      abort.abort();
    }
  };
  res.on('close', gone);
  // A pipelined request (one sent before the answer to the one ahead of it on the connection)
  // has no socket of its own answer yet: its 'close' comes only when that answer gets one, so
  // the connection's own close is what says its client left.
  if (res.socket === null) {
    const socket = req.socket;
    if (socket.destroyed) gone();
    else {
      const forget = whenSocketCloses(socket, gone);
      res.once('close', forget);
    }
  }
  let admitted = false;
  try {
    const r0 = performance.now();
    // A cached answer comes back synchronously: no await (and no turn of the event loop) for it.
    const check = up.replicas.ready();
    const ready = typeof check === 'boolean' ? check : await check;
    x.readinessMs = performance.now() - r0;
    // Left while the check ran: it was sent nothing, whatever the check found.
    if (clientGone) {
      x.outcome = 'disconnected';
      return;
    }
    if (!ready) {
      // Refused before dispatch (outcome rejected), but for the client an upstream failure.
      x.outcome = 'rejected';
      x.statusCode = 502;
      return sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
    }
    const q0 = performance.now();
    try {
      if (!up.admission.tryAcquire()) {
        // Waiting in the alias's queue: `?active=1` shows the wait as it grows.
        a.queuedAt = Date.now();
        await up.admission.acquire(abort);
      }
      admitted = true;
    } catch (err) {
      x.admissionWaitMs = performance.now() - q0;
      const reason = err instanceof AdmissionRefused ? err.reason : 'full';
      if (reason === 'aborted' && ctx.stopping.value && !clientGone) {
        x.outcome = 'error';
        x.statusCode = 503;
        return sendRawProblem(res, ErrorCode.UNAVAILABLE);
      }
      // A client that left is sent nothing, even when the queue was full when it did.
      x.outcome = reason === 'aborted' || clientGone ? 'disconnected' : 'rejected';
      // A client that left while queued was sent nothing (as when it leaves once admitted).
      if (clientGone) return;
      x.statusCode = reason === 'aborted' ? 0 : 429;
      return sendRawProblem(res, ErrorCode.ADMISSION_REFUSED);
    }
    x.admissionWaitMs = performance.now() - q0;
    a.admissionWaitMs = ms(x.admissionWaitMs);
    ctx.registry.setPhase(a, 'admitted');
    if (clientGone) {
      x.outcome = 'disconnected';
      return;
    }
    if (ctx.stopping.value) {
      // The router is stopping: nothing more goes to the engine.
      x.outcome = 'error';
      x.statusCode = 503;
      return sendRawProblem(res, ErrorCode.UNAVAILABLE);
    }
    const headers: Record<string, string> = { 'content-type': ct, 'x-request-id': gid };
    if (up.apiKey) headers['authorization'] = `Bearer ${up.apiKey}`;
    await pipeUpstream(up, UPSTREAM_PATH[route], headers, outBody, x, res, abort, ctx, () => clientGone);
  } catch (err) {
    ctx.logger.error({ gateway_request_id: gid, err }, 'relay failed');
    x.outcome = clientGone ? 'disconnected' : 'error';
    if (!res.headersSent) {
      // The record says what the client was sent.
      if (!clientGone) x.statusCode = 502;
      sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
    } else res.end();
  } finally {
    // Cut by a graceful stop: the router ended it, the client did not cancel it.
    if (ctx.stopping.value && x.outcome === 'disconnected') x.outcome = 'error';
    if (admitted) up.admission.release();
    const finishedMs = Math.max(Date.now(), a.startedAt);
    ctx.registry.finish(a, terminalRecord(x, ctx, finishedMs), finishedMs);
    // Every request that did not succeed leaves one line an operator can search by id.
    if (x.outcome === 'success')
      ctx.logger.debug(
        { gateway_request_id: gid, model: a.model, outcome: x.outcome, status: x.statusCode },
        'request finished',
      );
    else if (ctx.failureLines.take(finishedMs))
      ctx.logger.info(
        { gateway_request_id: gid, model: a.model, outcome: x.outcome, status: x.statusCode },
        'request finished',
      );
  }
}

/**
 * An authenticated request refused before routing (bad framing, content type, body or alias):
 * the fixed problem, and one `request refused` line an operator can find by its id (no
 * terminal record: it never reached an alias). `req` when its upload may still be arriving.
 */
/**
 * A graceful stop's cut: each request whose body is still arriving gets the 503 problem (with
 * its id) now, rather than a connection closed without a word. It is refused before routing
 * (no alias known, no terminal record), like any request turned away at the door.
 */
export function cutUploads(ctx: RelayContext): void {
  for (const res of ctx.uploading) {
    const gid = res.getHeader('x-svc-request-id');
    if (!res.headersSent && typeof gid === 'string') turnedAway(ctx, gid, res.req, res, ErrorCode.UNAVAILABLE);
  }
  ctx.uploading.clear();
}

function turnedAway(
  ctx: RelayContext,
  gid: string,
  req: IncomingMessage | undefined,
  res: ServerResponse,
  code: ErrorCode,
): void {
  if (req !== undefined) refuseUpload(req, res, code);
  else sendRawProblem(res, code);
  if (ctx.failureLines.take(Date.now()))
    ctx.logger.info({ gateway_request_id: gid, status: res.statusCode }, 'request refused');
}
