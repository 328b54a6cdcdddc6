import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../../errors.js';
import type { Exchange, RelayContext, Upstream } from './relay.js';
import { collect, drained, isContextRejection, safeContentType, sendRawProblem, type RelayAbort } from './relay-support.js';

/** Bytes of an upstream error body read to classify it (then discarded). */
const ERROR_BODY_LIMIT = 64 * 1024;
/** Largest non-streaming upstream body relayed. */
const BUFFERED_LIMIT = 64 * 1024 * 1024;

// The SSE event a client gets when the upstream fails mid-stream: fixed text, never [DONE].
const STREAM_ERROR = Buffer.from('event: error\ndata: {"error":{"type":"upstream_failed","message":"The upstream stream ended before completion"}}\n\n');
const STREAM_TIMEOUT = Buffer.from('event: error\ndata: {"error":{"type":"upstream_timeout","message":"The upstream did not finish in time"}}\n\n');
const STREAM_STOPPING = Buffer.from('event: error\ndata: {"error":{"type":"router_stopping","message":"The router stopped before the answer was complete"}}\n\n');

/**
 * Sends the request to the upstream and relays its answer: SSE chunk by chunk with
 * backpressure, other bodies whole. Fills the exchange's measurements and outcome; the
 * upstream's own error text never reaches the client or the record.
 */
export async function pipeUpstream(
  up: Upstream,
  path: string,
  headers: Record<string, string>,
  body: Buffer,
  x: Exchange,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
): Promise<void> {
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, up.route.upstreamTimeoutMs);
  const a = x.a;
  try {
    x.dispatchAt = performance.now();
    ctx.registry.setPhase(a, 'dispatched');
    let upRes;
    try {
      upRes = await up.pool.request({
        method: 'POST', path, headers, body, signal: abort,
        headersTimeout: up.route.upstreamTimeoutMs, bodyTimeout: up.route.upstreamTimeoutMs,
      });
    } catch (err) {
      x.upstreamEndAt = performance.now();
      // No connection was made: the engine never saw the request (no prompt went to it, no
      // finish reason of its, no upstream time).
      if (NOT_CONNECTED.has((err as { code?: string })?.code ?? '')) {
        x.dispatchAt = null;
        x.upstreamEndAt = null;
      }
      if (clientGone()) x.outcome = 'disconnected';
      else if (ctx.stopping.value && !timedOut) {
        // Waiting for the engine's first answer when a graceful stop cut it.
        x.outcome = 'error';
        x.statusCode = 503;
        sendRawProblem(res, ErrorCode.UNAVAILABLE);
      } else if (timedOut || (err as Error)?.name === 'HeadersTimeoutError') {
        x.outcome = 'timeout';
        x.statusCode = 504;
        sendRawProblem(res, ErrorCode.UPSTREAM_TIMEOUT);
      } else {
        ctx.readiness.invalidate(up.route.alias);
        x.outcome = 'error';
        x.statusCode = 502;
        sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
      }
      return;
    }
    a.lastUpstreamAt = Date.now();
    const status = upRes.statusCode;
    if (status >= 400) {
      const errBody = await readBounded(upRes.body, ERROR_BODY_LIMIT).catch(() => Buffer.alloc(0));
      x.upstreamEndAt = performance.now();
      if (isContextRejection(status, errBody)) {
        x.outcome = 'rejected';
        x.statusCode = 400;
        sendRawProblem(res, ErrorCode.CONTEXT_LENGTH);
      } else if (status === 429) {
        x.outcome = 'rejected';
        x.statusCode = 429;
        sendRawProblem(res, ErrorCode.ADMISSION_REFUSED);
      } else {
        x.outcome = 'error';
        x.statusCode = 502;
        sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
      }
      return;
    }
    if (status < 200 || status > 299 || status === 204 || status === 205) {
      // A redirect or a bodiless answer is not an answer to an inference request: never
      // passed on (its Location and body are the upstream's), recorded as an upstream error.
      await readBounded(upRes.body, ERROR_BODY_LIMIT).catch(() => undefined);
      x.upstreamEndAt = performance.now();
      x.outcome = 'error';
      x.statusCode = 502;
      sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
      return;
    }
    const ctype = safeContentType(upRes.headers['content-type'], 'application/json');
    x.statusCode = status;
    if (/^text\/event-stream/i.test(ctype)) {
      x.streaming = true;
      x.answered = true;
      res.writeHead(status, { 'content-type': ctype, 'cache-control': 'no-cache' });
      try {
        for await (const chunk of upRes.body as AsyncIterable<Buffer>) {
          if (a.phase !== 'streaming') ctx.registry.setPhase(a, 'streaming');
          a.lastUpstreamAt = Date.now();
          // Relayed first, observed after (as of its arrival): parsing never delays a chunk.
          const at = performance.now();
          const flowing = res.write(chunk);
          x.obs.sseChunk(chunk, at);
          a.estimatedCompletionTokens = x.obs.fragments;
          if (!flowing) await drained(res, abort);
          if (clientGone() || abort.aborted) break;
        }
      } catch {
        // upstream failed, timed out, or we aborted it because the client left
      }
      x.upstreamEndAt = performance.now();
      a.upstreamPromptTokens = x.obs.promptTokens;
      a.upstreamCompletionTokens = x.obs.completionTokens;
      if (clientGone()) {
        x.outcome = 'disconnected';
        upRes.body.destroy();
        return;
      }
      if (x.obs.done) x.outcome = 'success';
      else {
        x.outcome = timedOut ? 'timeout' : 'error';
        // Cut by a graceful stop, not failed by the engine: the record's finish says the router
        // cancelled it (diagnosis reads `router_ended`), since its status is the stream's 200.
        if (!timedOut && ctx.stopping.value) x.finishOverride = 'cancelled';
        if (res.writableNeedDrain) {
          // A client that stopped reading cannot be told: the connection is closed, and the
          // request ends now (its admission slot is released), not when the client leaves.
          upRes.body.destroy();
          res.destroy();
          return;
        }
        res.write(timedOut ? STREAM_TIMEOUT : ctx.stopping.value ? STREAM_STOPPING : STREAM_ERROR);
      }
      res.end();
      return;
    }
    let whole: Buffer;
    try {
      whole = await readBounded(upRes.body, BUFFERED_LIMIT);
    } catch {
      x.upstreamEndAt = performance.now();
      if (clientGone()) x.outcome = 'disconnected';
      else if (ctx.stopping.value && !timedOut) {
        x.outcome = 'error';
        x.statusCode = 503;
        sendRawProblem(res, ErrorCode.UNAVAILABLE);
      } else {
        x.outcome = timedOut ? 'timeout' : 'error';
        x.statusCode = timedOut ? 504 : 502;
        sendRawProblem(res, timedOut ? ErrorCode.UPSTREAM_TIMEOUT : ErrorCode.UPSTREAM_FAILED);
      }
      return;
    }
    const endAt = performance.now();
    x.upstreamEndAt = endAt;
    x.answered = true;
    // The answer goes to the client first; what the record needs from it is read afterwards,
    // as of when it arrived.
    const observed = x.route === 'chat.completions' || x.route === 'completions' || x.route === 'embeddings' || x.route === 'rerank';
    if (clientGone()) {
      x.outcome = 'disconnected';
      if (observed) x.obs.jsonBody(whole, endAt);
      return;
    }
    res.writeHead(status, { 'content-type': ctype, 'content-length': whole.byteLength });
    res.end(whole);
    x.outcome = 'success';
    if (observed) x.obs.jsonBody(whole, endAt);
  } finally {
    clearTimeout(deadline);
  }
}

/** Errors of a connection that was never made (undici passes the socket's code through). */
const NOT_CONNECTED: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

/** Reads an upstream body up to `limit` bytes; a larger one is cut off. Thrown when: larger, aborted, or failed. */
function readBounded(body: Readable, limit: number): Promise<Buffer> {
  return collect(body, limit, (b) => b.destroy());
}
