/**
 * Requests turned away before routing (by the relay, or by node:http before the relay saw
 * them): their answer, their one terminal record, their log line; and the record of a relay
 * that failed unexpectedly.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../errors.js';
import type { Caller, RelayContext, Turned } from './relay-context.js';
import { refusalRecord } from './relay-record.js';
import { refuseUpload, sendRawError } from './relay-support.js';
import { identify } from './relay-intake.js';
import { lacksHost } from '../http/http-app.js';
import type { RouteName } from '../schema/terminal-record.js';
import type { ActiveRequest } from './records/router-registry.js';

/**
 * Answers a request refused before routing with its error object and leaves its one terminal
 * record (outcome rejected, `model` null unless it named a configured alias) and one
 * `request refused` line an operator finds by its id (a client gone during its upload:
 * outcome disconnected, or error once a graceful stop's cut has come, as relay.ts
 * endExchange records a routed request). `req` when its upload may still be
 * arriving: it is read and dropped so its client sees the answer, except after a framing
 * fault, whose body cannot be trusted to end where it says: then the connection closes.
 */
export function turnAway(
  ctx: RelayContext,
  c: Caller,
  res: ServerResponse,
  t: Turned,
  req: IncomingMessage | undefined,
): void {
  if (t.code === ErrorCode.INVALID_FRAMING) {
    // `Connection: close`, and the socket ends once the answer is written (docs/api.md).
    res.shouldKeepAlive = false;
    sendRawError(res, t.code);
  } else if (req !== undefined) refuseUpload(req, res, t.code, t.param);
  else sendRawError(res, t.code, t.param === undefined ? undefined : { param: t.param });
  const finishedMs = Date.now();
  const record = refusalRecord(c, t, res.statusCode, ctx, finishedMs);
  // Its upload cut by a graceful stop (the router closed its connection): the router ended it,
  // not its client, as for a routed request (relay.ts endExchange).
  if (t.gone && ctx.stopping.value) record.outcome = 'error';
  ctx.registry.refused(c.gid, record, finishedMs, c.trace);
  if (ctx.failureLines.take(finishedMs))
    ctx.logger.info(
      { gateway_request_id: c.gid, status: record.status_code, refusal: record.refusal ?? null },
      'request refused',
    );
}

/**
 * A graceful stop's cut: each request whose body is still arriving gets the 503 error (with
 * its id) now, rather than a connection closed without a word, and its terminal record
 * (outcome error: the router, not the request, ended it).
 */
export function cutUploads(ctx: RelayContext): void {
  for (const [res, c] of ctx.uploading) {
    if (!res.headersSent) turnAway(ctx, c, res, { code: ErrorCode.UNAVAILABLE, refusal: null }, res.req);
  }
  ctx.uploading.clear();
}

/**
 * The last resort after a relay threw where nothing expected it (router.ts relayCrashed,
 * once `res` is answered): a request that has its ids but no terminal record gets one,
 * outcome `error` with the status its client was sent. In flight already, it is ended with
 * its alias and lineage (and leaves the in-flight list); uploading, with its lineage;
 * between the two (its body whole, not yet routed), with its ids only, its start and
 * latency unknown (started when recorded, `latency_ms` null).
 */
export function recordCrash(ctx: RelayContext, res: ServerResponse, route: RouteName): void {
  const gid = res.getHeader('x-svc-request-id');
  // Never identified: no id, so no record.
  if (typeof gid !== 'string') return;
  const a = ctx.registry.active.get(gid);
  // Recorded already (the throw came after its record).
  if (a === undefined && ctx.registry.ring.slotOf(gid) !== undefined) return;
  const finishedMs = Date.now();
  const c = ctx.uploading.get(res) ?? crashedCaller(gid, res, route, a, finishedMs);
  const t: Turned = { code: ErrorCode.INTERNAL, refusal: null, ...(a !== undefined ? { model: a.model } : {}) };
  const record = refusalRecord(c, t, res.statusCode, ctx, finishedMs);
  if (a === undefined && !ctx.uploading.has(res)) record.latency_ms = null;
  if (a !== undefined) ctx.registry.finish(a, record, finishedMs);
  else ctx.registry.refused(gid, record, finishedMs, c.trace);
}

/** The caller of a crashed request, from its in-flight entry, else from the ids its answer carries. */
function crashedCaller(
  gid: string,
  res: ServerResponse,
  route: RouteName,
  a: ActiveRequest | undefined,
  nowMs: number,
): Caller {
  const legacy = res.getHeader('x-request-id');
  const requestId = a?.requestId ?? (typeof legacy === 'string' ? legacy : gid);
  const startedMs = a?.startedAt ?? nowMs;
  return {
    gid,
    requestId,
    route: a?.route ?? route,
    arrivedAt: performance.now() - (nowMs - startedMs),
    arrivedMs: startedMs,
    sessionId: a?.sessionId,
    workbenchRunId: a?.workbenchRunId,
    taskId: a?.taskId,
    trace: a?.trace,
  };
}

/**
 * An inference request with an `Expect` other than 100-continue (node:http answers it outside
 * the relay: http-app's answerExpectation): 400 `invalid_expectation`, the connection closing
 * after it. An authenticated one gets its ids and its terminal record (outcome rejected,
 * refusal `invalid_request`); an unauthenticated one is only answered.
 */
export function refuseExpectation(
  req: IncomingMessage,
  res: ServerResponse,
  route: RouteName,
  ctx: RelayContext,
): void {
  res.shouldKeepAlive = false;
  if (!ctx.keys.accepts(req.headers.authorization)) {
    sendRawError(res, ErrorCode.INVALID_EXPECTATION);
    return;
  }
  const c = identify(req, res, route, ctx);
  if (c !== undefined)
    turnAway(ctx, c, res, { code: ErrorCode.INVALID_EXPECTATION, refusal: 'invalid_request' }, undefined);
}

/**
 * A connection fault while `res`, not yet begun, answers an identified inference request
 * (http-app's answerFault). While its body arrives, the fault is its own: answered here, 400
 * `incomplete_body` when the body did not arrive whole in time, else `invalid_framing` (a
 * malformed chunked body), and recorded rejected (`invalid_request`); the relay, which
 * then sees its upload cut, finds it answered and records nothing more. Once its body is
 * whole, the fault is a later request's on the same connection (which has no id): this
 * request's exchange answers and records it, and the connection closes after. False for
 * any other answer.
 */
export function answerConnectionFault(ctx: RelayContext, res: ServerResponse, err: { code?: string }): boolean {
  if (res.headersSent) return false;
  const c = ctx.uploading.get(res);
  // Not uploading: identified (its id is set) means its body is whole and its exchange runs.
  if (c === undefined && !res.hasHeader('x-svc-request-id')) return false;
  res.shouldKeepAlive = false;
  // The body may be whole with its end not yet seen by the relay (the fault's bytes came with it).
  if (c === undefined || res.req.complete) return true;
  const code = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? ErrorCode.INCOMPLETE_BODY : ErrorCode.INVALID_FRAMING;
  turnAway(ctx, c, res, { code, refusal: 'invalid_request' }, undefined);
  return true;
}

/**
 * An inference path asked with another method than POST: 405 with `Allow: POST` (400 without
 * Host). An authenticated one gets its ids and its terminal record, as every request with an
 * `X-Svc-Request-Id` does; an unauthenticated one is only answered.
 */
export function refuseMethod(req: IncomingMessage, res: ServerResponse, route: RouteName, ctx: RelayContext): void {
  const t: Turned = lacksHost(req)
    ? { code: ErrorCode.INVALID_FRAMING, refusal: 'invalid_request' }
    : { code: ErrorCode.METHOD_NOT_ALLOWED, refusal: 'invalid_request' };
  if (t.code === ErrorCode.METHOD_NOT_ALLOWED) res.setHeader('allow', 'POST');
  if (!ctx.keys.accepts(req.headers.authorization)) {
    refuseUpload(req, res, t.code);
    return;
  }
  const c = identify(req, res, route, ctx);
  if (c !== undefined) turnAway(ctx, c, res, t, req);
}
