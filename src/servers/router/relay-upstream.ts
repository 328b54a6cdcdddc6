import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../../errors.js';
import type { Exchange, RelayContext, Upstream } from './relay.js';
import { collect, drained, isContextRejection, safeContentType, sendRawProblem, type RelayAbort } from './relay-support.js';

/** Bytes of an upstream error body read to classify it (then discarded). */
const ERROR_BODY_LIMIT = 64 * 1024;
/** Buffered answers up to this size are read before they are relayed (the parse costs microseconds). */
const READ_FIRST_BYTES = 256 * 1024;
/** The start of a JSON error object: `{"error": ...}` or `{"object": "error", ...}`. */
const ERROR_HEAD = /^\s*\{\s*"(?:error"\s*:|object"\s*:\s*"error")/;
/** Longest unfinished SSE line held back for the rest of it; a longer one is relayed as it comes. */
const MAX_HELD_LINE = 1024 * 1024;
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
    if (/^text\/event-stream/i.test(ctype)) {
      x.streaming = true;
      // The status line and headers are written with the first bytes relayed: an engine that
      // fails before its first event still gets the client a plain 502 problem.
      const begin = (): void => {
        if (!res.headersSent) res.writeHead(status, { 'content-type': ctype, 'cache-control': 'no-cache' });
      };
      // The bytes after a chunk's last newline wait for the rest of their line: every SSE line
      // is seen whole by the observer before any byte of it reaches the client, so an engine's
      // error event (raw text) is never relayed, even when it arrives split across reads.
      let carry: Buffer | undefined;
      try {
        for await (const part of upRes.body as AsyncIterable<Buffer>) {
          if (a.phase !== 'streaming') ctx.registry.setPhase(a, 'streaming');
          a.lastUpstreamAt = Date.now();
          const at = performance.now();
          let chunk = carry === undefined ? part : Buffer.concat([carry, part]);
          carry = undefined;
          const nl = chunk.lastIndexOf(0x0a);
          if (nl < chunk.length - 1 && chunk.length - nl - 1 <= MAX_HELD_LINE) {
            carry = chunk.subarray(nl + 1);
            chunk = chunk.subarray(0, nl + 1);
          }
          if (chunk.length === 0) continue;
          x.obs.sseChunk(chunk, at);
          // An error event from the engine ends the stream here: the client gets what came
          // before it, then the router's fixed error event (below), never the engine's words,
          // even if [DONE] followed.
          if (x.obs.failed) {
            if (x.obs.failedAtByte > 0) {
              x.statusCode = status;
              x.answered = true;
              begin();
              res.write(chunk.subarray(0, x.obs.failedAtByte));
              a.estimatedCompletionTokens = x.obs.fragments;
            }
            break;
          }
          x.statusCode = status;
          x.answered = true;
          begin();
          const flowing = res.write(chunk);
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
        // Status stays 0 when nothing was relayed: the client was sent nothing.
        x.outcome = 'disconnected';
        upRes.body.destroy();
        return;
      }
      if (x.obs.done && !x.obs.failed) {
        x.outcome = 'success';
        begin();
      } else if (!res.headersSent) {
        // Nothing was relayed (the engine's first word was an error, it ended or stalled
        // before its first whole line, or the router is stopping): the client gets the plain
        // problem a buffered request gets, with the status that says why.
        upRes.body.destroy();
        x.outcome = timedOut ? 'timeout' : 'error';
        x.statusCode = timedOut ? 504 : ctx.stopping.value ? 503 : 502;
        sendRawProblem(res, timedOut ? ErrorCode.UPSTREAM_TIMEOUT : ctx.stopping.value ? ErrorCode.UNAVAILABLE : ErrorCode.UPSTREAM_FAILED);
        return;
      } else {
        upRes.body.destroy();
        x.outcome = timedOut ? 'timeout' : 'error';
        // Cut by a graceful stop, not failed by the engine: the record's finish says the router
        // cancelled it (diagnosis reads `router_ended`), since its status is the stream's 200.
        if (!timedOut && ctx.stopping.value) x.finishOverride = 'cancelled';
        if (res.writableNeedDrain) {
          // A client that stopped reading cannot be told: the connection is closed, and the
          // request ends now (its admission slot is released), not when the client leaves.
          res.destroy();
          return;
        }
        // The stream's status line goes out with the error event.
        x.statusCode = status;
        begin();
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
    // A 200 whose body is an error object (`{"error": ...}`) is an upstream failure, and its
    // text is the engine's, never passed on: so a body is read before it is relayed when it is
    // small or starts like one. A large answer (embeddings of a big batch) is relayed first and
    // read after, as of when it arrived, so the client does not wait for the parse.
    const observed = x.route === 'chat.completions' || x.route === 'completions' || x.route === 'embeddings' || x.route === 'rerank';
    const readFirst = observed && (whole.byteLength <= READ_FIRST_BYTES || ERROR_HEAD.test(whole.toString('latin1', 0, 256)));
    if (readFirst) x.obs.jsonBody(whole, endAt);
    if (clientGone()) {
      x.outcome = 'disconnected';
      if (observed && !readFirst) x.obs.jsonBody(whole, endAt);
      return;
    }
    if (x.obs.failed) {
      x.outcome = 'error';
      x.statusCode = 502;
      sendRawProblem(res, ErrorCode.UPSTREAM_FAILED);
      return;
    }
    x.statusCode = status;
    res.writeHead(status, { 'content-type': ctype, 'content-length': whole.byteLength });
    res.end(whole);
    x.outcome = 'success';
    if (observed && !readFirst) x.obs.jsonBody(whole, endAt);
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
