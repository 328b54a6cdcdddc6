import type { IncomingMessage, ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import type { ActiveRequest } from './records/router-registry.js';
import { ErrorCode } from '../errors.js';
import { isGenerationRoute, type RouteName } from '../schema/terminal-record.js';
import { AdmissionRefused } from './admission.js';
import { RelayAbort, ms, sendRawError, whenSocketCloses } from './relay-support.js';
import { pipeUpstream } from './relay-upstream.js';
import { StreamObserver, estimateTokens, promptChars } from './stream-observer.js';
import { responsesPromptChars } from './responses-observe.js';
import { terminalRecord } from './relay-record.js';
import { bodyFault, headerFault, identify, readRequest, routeRequest, type Routable } from './relay-intake.js';
import { turnAway } from './relay-refusal.js';
import type { Caller, Exchange, RelayContext } from './relay-context.js';
import { upstreamTraceparent } from '../telemetry/trace-context.js';

export { cutUploads } from './relay-refusal.js';

const UPSTREAM_PATH: Readonly<Record<RouteName, string>> = {
  'chat.completions': '/chat/completions',
  completions: '/completions',
  embeddings: '/embeddings',
  rerank: '/rerank',
  'audio.transcriptions': '/audio/transcriptions',
  responses: '/responses',
};

const monotonicNow = (): number => performance.now();

/**
 * One inference request through the router: authenticate, identify, route by alias, check
 * readiness, admit, relay to the upstream (streaming chunk by chunk), and leave exactly one
 * terminal record, whatever happens, a refusal before routing included. Never stores prompt
 * or response text.
 */
export async function relayInference(
  req: IncomingMessage,
  res: ServerResponse,
  route: RouteName,
  ctx: RelayContext,
): Promise<void> {
  const c = identify(req, res, route, ctx);
  if (c === undefined) return;
  const fault = headerFault(req, route);
  if (fault !== undefined) return turnAway(ctx, c, res, fault, req);
  let body: Buffer;
  try {
    body = await readRequest(req, res, c, ctx);
  } catch (err) {
    // Answered (and recorded) already when a graceful stop cut the upload (cutUploads).
    if (res.headersSent) return;
    return turnAway(ctx, c, res, bodyFault(err), req);
  }
  if (res.headersSent) return;
  const r = routeRequest(body, req, route, ctx);
  if ('code' in r) return turnAway(ctx, c, res, r, undefined);
  const x = beginExchange(c, r, ctx);
  const abort = new RelayAbort();
  x.a.stop = abort;
  // Arrived after a graceful stop cut the others: cut too, before any engine work.
  if (ctx.stopping.value) abort.abort();
  const clientGone = watchClient(req, res, abort);
  let admitted = false;
  try {
    // Ready (cached) and a free slot: admitted without a promise or a turn of the event loop.
    const admission = admitNow(x, r, res, abort, ctx, clientGone);
    admitted = typeof admission === 'boolean' ? admission : await admission;
    if (admitted) {
      const relaying = dispatch(x, r, res, abort, ctx, clientGone);
      if (relaying !== undefined) await relaying;
    }
  } catch (err) {
    ctx.logger.error({ gateway_request_id: c.gid, err }, 'relay failed');
    x.outcome = clientGone() ? 'disconnected' : 'error';
    if (!res.headersSent) {
      // The record says what the client was sent.
      if (!clientGone()) x.statusCode = 502;
      sendRawError(res, ErrorCode.UPSTREAM_FAILED);
    } else res.end();
  } finally {
    endExchange(x, r, admitted, ctx);
  }
}

/** The request in router memory (its in-flight entry) and the exchange that measures it. */
function beginExchange(c: Caller, r: Routable, ctx: RelayContext): Exchange {
  const isText = isGenerationRoute(c.route);
  const a: ActiveRequest = {
    gid: c.gid,
    requestId: c.requestId,
    model: r.up.route.alias,
    route: c.route,
    startedAt: r.startedAt,
    phase: 'checking',
    phaseAt: r.startedAt,
    lastUpstreamAt: null,
    admissionWaitMs: null,
    // No text or token id to go by (an image-only message, an empty prompt): the engine still
    // read a prompt (a chat template at least), so its size is unknown, not an estimated 0.
    estimatedPromptTokens:
      r.parsed && isText
        ? estimateTokens(c.route === 'responses' ? responsesPromptChars(r.parsed) : promptChars(r.parsed)) || null
        : null,
    estimatedCompletionTokens: 0,
    upstreamPromptTokens: null,
    upstreamCompletionTokens: null,
    sessionId: c.sessionId,
    workbenchRunId: c.workbenchRunId,
    taskId: c.taskId,
    queuedAt: null,
    stop: undefined,
    trace: c.trace,
    routingConfigHash: r.up.routingConfigHash,
  };
  ctx.registry.begin(a);
  return {
    a,
    route: c.route,
    t0: r.t0,
    obs: new StreamObserver(monotonicNow, c.route === 'responses'),
    readinessMs: null,
    admissionWaitMs: null,
    dispatchAt: null,
    upstreamEndAt: null,
    statusCode: 0,
    outcome: 'error',
    outputLimit: r.outputLimit,
    promptEstimate: a.estimatedPromptTokens,
    streaming: r.parsed?.['stream'] === true,
    finishOverride: null,
    answered: false,
    upstreamStatus: null,
    upstreamReplica: null,
    attempts: 0,
    routingConfigHash: r.up.routingConfigHash,
    refusal: undefined,
  };
}

/** Aborts the exchange when its client leaves; returns whether it has. */
function watchClient(req: IncomingMessage, res: ServerResponse, abort: RelayAbort): () => boolean {
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
  return () => clientGone;
}

/**
 * The readiness check and the alias's admission queue: true once admitted; else the exchange
 * has its outcome and its client its answer (when it is still there). Synchronous when the
 * readiness answer is cached and a slot is free (most requests); a promise when either waits.
 */
function admitNow(
  x: Exchange,
  r: Routable,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): boolean | Promise<boolean> {
  const r0 = performance.now();
  const check = r.up.replicas.ready();
  if (typeof check !== 'boolean') return admitLater(check, r0, x, r, res, abort, ctx, clientGone);
  x.readinessMs = performance.now() - r0;
  return queue(check, x, r, res, abort, ctx, clientGone);
}

/** admitNow, once a readiness probe that had to run has answered. */
async function admitLater(
  check: Promise<boolean>,
  r0: number,
  x: Exchange,
  r: Routable,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): Promise<boolean> {
  const ready = await check;
  x.readinessMs = performance.now() - r0;
  return queue(ready, x, r, res, abort, ctx, clientGone);
}

/** After the readiness check: a slot of the alias now, or a wait in its queue (a promise). */
function queue(
  ready: boolean,
  x: Exchange,
  r: Routable,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): boolean | Promise<boolean> {
  // Left while the check ran: it was sent nothing, whatever the check found.
  if (clientGone()) return ended(x, 'disconnected', 0);
  // Refused before dispatch (outcome rejected), but for the client an upstream failure.
  if (!ready) return ended(x, 'rejected', 502, res, ErrorCode.UPSTREAM_FAILED);
  const q0 = performance.now();
  if (r.up.admission.tryAcquire()) return admitted(x, q0, ctx);
  return waitInQueue(q0, x, r, res, abort, ctx, clientGone);
}

/** Waiting in the alias's queue: `?active=1` shows the wait as it grows. */
async function waitInQueue(
  q0: number,
  x: Exchange,
  r: Routable,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): Promise<boolean> {
  try {
    x.a.queuedAt = Date.now();
    await r.up.admission.acquire(abort);
  } catch (err) {
    x.admissionWaitMs = performance.now() - q0;
    const reason = err instanceof AdmissionRefused ? err.reason : 'full';
    if (reason === 'aborted' && ctx.stopping.value && !clientGone())
      return ended(x, 'error', 503, res, ErrorCode.UNAVAILABLE);
    // A client that left (even when the queue was full when it did) was sent nothing.
    if (reason === 'aborted' || clientGone()) return ended(x, 'disconnected', 0);
    x.refusal = 'admission_full';
    return ended(x, 'rejected', 429, res, ErrorCode.ADMISSION_REFUSED);
  }
  return admitted(x, q0, ctx);
}

/** Holds a slot since `q0`'s wait began. Returns true. */
function admitted(x: Exchange, q0: number, ctx: RelayContext): true {
  x.admissionWaitMs = performance.now() - q0;
  x.a.admissionWaitMs = ms(x.admissionWaitMs);
  ctx.registry.setPhase(x.a, 'admitted');
  return true;
}

/** Ends an exchange before dispatch: its outcome and status, and its answer when it gets one. Returns false. */
function ended(
  x: Exchange,
  outcome: Exchange['outcome'],
  status: number,
  res?: ServerResponse,
  code?: ErrorCode,
): false {
  x.outcome = outcome;
  x.statusCode = status;
  if (res !== undefined && code !== undefined) sendRawError(res, code);
  return false;
}

/** An admitted exchange to its upstream (unless its client left or the router is stopping meanwhile). */
function dispatch(
  x: Exchange,
  r: Routable,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): Promise<void> | undefined {
  // Admitted, the exchange holds its slot (released in endExchange) whatever happens next.
  if (clientGone()) {
    ended(x, 'disconnected', 0);
    return undefined;
  }
  // The router is stopping: nothing more goes to the engine.
  if (ctx.stopping.value) {
    ended(x, 'error', 503, res, ErrorCode.UNAVAILABLE);
    return undefined;
  }
  const { up } = r;
  const headers: Record<string, string> = { 'content-type': r.ct, 'x-request-id': x.a.gid };
  if (up.apiKey) headers['authorization'] = `Bearer ${up.apiKey}`;
  // The one caller header that goes upstream (besides the content type): its trace, continued.
  const trace = x.a.trace;
  if (trace !== undefined) {
    headers['traceparent'] = upstreamTraceparent(trace);
    if (trace.traceState !== undefined) headers['tracestate'] = trace.traceState;
  }
  return pipeUpstream(up, UPSTREAM_PATH[x.route], headers, r.outBody, x, res, abort, ctx, clientGone);
}

/** Releases the admission slot, writes the one terminal record, and the line of a request that did not succeed. */
function endExchange(x: Exchange, r: Routable, admitted: boolean, ctx: RelayContext): void {
  const a = x.a;
  // Cut by a graceful stop: the router ended it, the client did not cancel it.
  if (ctx.stopping.value && x.outcome === 'disconnected') x.outcome = 'error';
  if (admitted) r.up.admission.release();
  // A Responses answer's id: where a later retrieve or cancel of it goes (decision 0032).
  if (x.obs.responseId !== null && x.upstreamReplica !== null)
    ctx.responseIds?.learn(x.obs.responseId, r.up.route, x.upstreamReplica);
  const finishedMs = Math.max(Date.now(), a.startedAt);
  ctx.registry.finish(a, terminalRecord(x, ctx, finishedMs), finishedMs);
  // Every request that did not succeed leaves one line an operator can search by id.
  const lineAt = x.outcome === 'success' ? (ctx.logger.isLevelEnabled('debug') ? 'debug' : undefined) : 'info';
  if (lineAt === undefined || (lineAt === 'info' && !ctx.failureLines.take(finishedMs))) return;
  ctx.logger[lineAt](
    { gateway_request_id: a.gid, model: a.model, outcome: x.outcome, status: x.statusCode },
    'request finished',
  );
}
