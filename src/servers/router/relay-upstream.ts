import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../../errors.js';
import type { Exchange, RelayContext, Upstream } from './relay.js';
import { drained, isContextRejection, safeContentType, sendRawProblem, type RelayAbort } from './relay-support.js';
import { UpstreamCall, type UpstreamAnswer, type UpstreamCallOptions } from './upstream-call.js';
import { lastEventEnd } from './stream-observer.js';

/** Bytes of an upstream error body read to classify it (then discarded). */
const ERROR_BODY_LIMIT = 64 * 1024;
/** Buffered answers up to this size are read before they are relayed (the parse costs microseconds). */
const READ_FIRST_BYTES = 256 * 1024;
/** The start of a JSON object. */
const OBJECT_HEAD = /^\s*\{/;
/** The start of a JSON error object: `{"error": ...}` or `{"object": "error", ...}`. */
const ERROR_HEAD = /^\s*\{\s*"(?:error"\s*:|object"\s*:\s*"error")/;
/**
 * Longest unfinished SSE event held back for the rest of it. A longer one cannot be read
 * before it is relayed (it could be the engine's error text), so it ends the stream as a
 * failure: no engine sends a delta of a megabyte in one event.
 */
const MAX_HELD_EVENT = 1024 * 1024;
const LF = Buffer.from('\n');

/** How long an engine may take to close its stream after `[DONE]` before it is cut. */
const DONE_GRACE_MS = 1_000;
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
  const a = x.a;
  const call = new UpstreamCall(CALL_OPTIONS, a);
  // The deadline, the client leaving and a graceful stop all end the upstream request too.
  // The link is the call itself (no closure over this scope), dropped when the exchange ends.
  abort.upstream = call;
  if (abort.aborted) call.cancel();
  const deadline = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, up.route.upstreamTimeoutMs);
  try {
    x.dispatchAt = performance.now();
    ctx.registry.setPhase(a, 'dispatched');
    up.pool.dispatch({ method: 'POST', path, headers, body, headersTimeout: up.route.upstreamTimeoutMs, bodyTimeout: up.route.upstreamTimeoutMs }, call);
    let answer: UpstreamAnswer;
    try {
      answer = await call.answer;
    } catch (err) {
      x.upstreamEndAt = performance.now();
      if (call.status === 0) {
        // No connection was made: the engine never saw the request (no prompt went to it, no
        // finish reason of its, no upstream time).
        if (NOT_CONNECTED.has((err as { code?: string })?.code ?? '')) {
          x.dispatchAt = null;
          x.upstreamEndAt = null;
        }
        if (clientGone()) x.outcome = 'disconnected';
        else {
          // A graceful stop can cut the wait for the engine's first answer too.
          let cut = cutOf(timedOut, ctx.stopping.value);
          if (cut === 'failed' && (err as Error)?.name === 'HeadersTimeoutError') cut = 'timeout';
          if (cut === 'failed') ctx.readiness.invalidate(up.route.alias);
          refuse(x, res, cut);
        }
        return;
      }
      if (call.status >= 400 && !clientGone() && !timedOut && !ctx.stopping.value) {
        // An error answer whose body failed or ran long: classified without its text.
        answer = { kind: 'whole', status: call.status, contentType: undefined, encoded: false, body: Buffer.alloc(0) };
      } else {
        // The answer's body failed, ran past its deadline or its limit, or the exchange was cut.
        if (clientGone()) x.outcome = 'disconnected';
        else refuse(x, res, cutOf(timedOut, ctx.stopping.value));
        return;
      }
    }
    const status = answer.status;
    if (status >= 400) {
      // Never a stream (CALL_OPTIONS streams 2xx answers only).
      const errBody = answer.kind === 'whole' ? answer.body : Buffer.alloc(0);
      x.upstreamEndAt = performance.now();
      if (isContextRejection(status, errBody)) {
        x.outcome = 'rejected';
        x.statusCode = 400;
        sendRawProblem(res, ErrorCode.CONTEXT_LENGTH);
      } else if (status === 429) {
        x.outcome = 'rejected';
        x.statusCode = 429;
        sendRawProblem(res, ErrorCode.ADMISSION_REFUSED);
      } else refuse(x, res, 'failed');
      return;
    }
    if (status < 200 || status > 299 || status === 204 || status === 205) {
      // A redirect or a bodiless answer is not an answer to an inference request: never
      // passed on (its Location and body are the upstream's), recorded as an upstream error.
      x.upstreamEndAt = performance.now();
      refuse(x, res, 'failed');
      return;
    }
    const ctype = safeContentType(answer.contentType, 'application/json');
    if (answer.encoded) {
      // Compressed (the router asks for no encoding): it cannot be read before it is relayed.
      if (answer.kind === 'stream') answer.body.destroy();
      x.upstreamEndAt = performance.now();
      refuse(x, res, 'failed');
      return;
    }
    if (answer.kind === 'stream') {
      const upBody = answer.body;
      x.streaming = true;
      // The status line and headers are written with the first bytes relayed: an engine that
      // fails before its first event still gets the client a plain 502 problem.
      const begin = (): void => {
        if (!res.headersSent) res.writeHead(status, { 'content-type': ctype, 'cache-control': 'no-cache' });
      };
      /** Writes bytes the observer has read to the client; false when its buffer is full. */
      const relayed = (bytes: Buffer): boolean => {
        x.statusCode = status;
        x.answered = true;
        begin();
        const flowing = res.write(bytes);
        a.estimatedCompletionTokens = x.obs.fragments;
        return flowing;
      };
      // Whole SSE events only: the bytes after a chunk's last event wait for the rest of it, so
      // every event is read by the observer before any byte of it reaches the client, and an
      // engine's error (raw text) is never relayed, even when it arrives split across reads or
      // lines.
      // The bytes of an unfinished event, in a buffer that grows by doubling (a large event that
      // arrives in many small reads is copied O(n) times in all, not once per read), and only
      // the new bytes are searched for its end. Never written again once any of it is relayed.
      let held: Buffer | undefined;
      let heldLen = 0;
      try {
        // Leaving the loop does not destroy the body: every way out but `[DONE]` destroys it
        // below; after `[DONE]` the rest of it is drained.
        for await (const part of upBody.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
          if (a.phase !== 'streaming') ctx.registry.setPhase(a, 'streaming');
          a.lastUpstreamAt = Date.now();
          const at = performance.now();
          let chunk = part;
          let from = 0;
          if (heldLen > 0) {
            if (held!.length < heldLen + part.length) {
              const grown = Buffer.allocUnsafe(Math.max(heldLen + part.length, held!.length * 2));
              held!.copy(grown, 0, 0, heldLen);
              held = grown;
            }
            part.copy(held!, heldLen);
            from = heldLen;
            heldLen += part.length;
            chunk = held!.subarray(0, heldLen);
          }
          let overlong = false;
          const end = lastEventEnd(chunk, from);
          if (end < chunk.length) {
            overlong = chunk.length - end > MAX_HELD_EVENT;
            if (overlong) heldLen = 0;
            else if (end === 0) {
              // Still no whole event: all of it is held (where it already is, when it was held).
              if (from === 0) held = chunk;
              heldLen = chunk.length;
            } else {
              // What comes before is relayed from this buffer: the rest moves to a new one.
              held = Buffer.from(chunk.subarray(end));
              heldLen = held.length;
            }
            chunk = chunk.subarray(0, end);
          } else heldLen = 0;
          if (chunk.length > 0) x.obs.sseChunk(chunk, at);
          // What came before the overlong event is relayed (when nothing before it failed), then
          // the stream ends as the engine's failure.
          if (overlong && !x.obs.failed) {
            if (chunk.length > 0) relayed(chunk);
            x.obs.fail();
            break;
          }
          if (chunk.length === 0) continue;
          // An error from the engine ends the stream here: the client gets what came before it,
          // then the router's fixed error event (below), never the engine's words, even if
          // [DONE] followed.
          if (x.obs.failed) {
            if (x.obs.failedAtByte > 0) relayed(chunk.subarray(0, x.obs.failedAtByte));
            break;
          }
          // Up to the end of `[DONE]`: what an engine sends after it is not relayed.
          const flowing = relayed(x.obs.done ? chunk.subarray(0, x.obs.doneAtByte) : chunk);
          if (x.obs.done) {
            // A CRLF stream's `[DONE]` may have its last LF in a read that is not awaited: the
            // LF is added, so the stream ends in CRLF as framed (a CR-only stream stays so).
            const d = x.obs.doneAtByte;
            if (d >= 2 && chunk[d - 1] === 0x0d && chunk[d - 2] === 0x0a) res.write(LF);
            // The answer is complete: the client's response ends, and the exchange is recorded,
            // now, not when the engine closes its stream (drained; cut after a grace).
            x.upstreamEndAt = performance.now();
            res.end();
            if (call.ended) upBody.destroy();
            else drainAfterDone(upBody);
            break;
          }
          if (!flowing) await drained(res, abort);
          if (clientGone() || abort.aborted) break;
        }
      } catch {
        // upstream failed, timed out, or we aborted it because the client left
      }
      if (!x.obs.done) {
        // The engine's stream ended (not cut, failed or left by the client) with an event it did
        // not close (`data: [DONE]` and no empty line): read as if it had, and relayed when it
        // is the end of the answer (anything else is not an answer that ended well: the stream
        // fails, and the client never gets half an event run into the router's error event).
        const ended = upBody.readableEnded;
        const carry = heldLen > 0 ? held!.subarray(0, heldLen) : undefined;
        if (ended && carry !== undefined && !clientGone() && !abort.aborted) {
          // What the unclosed event holds counts only when it is relayed (its content then
          // reached the client; else nothing of it did: no first content, no fragment).
          const before = { first: x.obs.firstContentAt, fragments: x.obs.fragments, chars: x.obs.contentChars };
          x.obs.sseChunk(carry, performance.now());
          const doneWithin = x.obs.done;
          x.obs.sseEnd();
          if (x.obs.done) relayed(doneWithin ? carry.subarray(0, x.obs.doneAtByte) : carry);
          else {
            x.obs.firstContentAt = before.first;
            x.obs.fragments = before.fragments;
            x.obs.contentChars = before.chars;
          }
        } else if (ended) x.obs.sseEnd();
        x.upstreamEndAt = performance.now();
      }
      a.upstreamPromptTokens = x.obs.promptTokens;
      a.upstreamCompletionTokens = x.obs.completionTokens;
      // (The observer reads nothing after `[DONE]` or a failure: done means the answer is whole.)
      if (x.obs.done) {
        x.outcome = 'success';
        // Ended at `[DONE]` in the loop already, or now after an unclosed last `[DONE]`.
        if (!res.writableEnded) {
          begin();
          res.end();
        }
        return;
      }
      if (clientGone()) {
        // Status stays 0 when nothing was relayed: the client was sent nothing.
        x.outcome = 'disconnected';
        upBody.destroy();
        return;
      }
      if (!res.headersSent) {
        // Nothing was relayed (the engine's first word was an error, it ended or stalled
        // before its first whole event, or the router is stopping): the client gets the plain
        // problem a buffered request gets, with the status that says why.
        upBody.destroy();
        refuse(x, res, cutOf(timedOut, ctx.stopping.value));
        return;
      }
      upBody.destroy();
      x.outcome = timedOut ? 'timeout' : 'error';
      // Cut by a graceful stop, not failed by the engine: the record's finish says the router
      // cancelled it (diagnosis reads `router_ended`), since its status is the stream's 200.
      if (!timedOut && ctx.stopping.value) x.finishOverride = 'cancelled';
      // A large last write fills the client's buffer even when it is reading: it gets a short
      // grace to take it, so what came before the failure and the error event reach it.
      if (res.writableNeedDrain) await drained(res, undefined, CLIENT_DRAIN_GRACE_MS);
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
      res.end();
      return;
    }
    const whole = answer.body;
    const endAt = performance.now();
    x.upstreamEndAt = endAt;
    x.answered = true;
    // A 200 whose body is an error object (`{"error": ...}`) or no JSON object at all (an error
    // page, a traceback, nothing) is an upstream failure, and its text is the engine's, never
    // passed on: so a body is read before it is relayed when it is small or does not start
    // like an answer. A large answer (embeddings of a big batch) is relayed first and read
    // after, as of when it arrived, so the client does not wait for the parse.
    const observed = x.route === 'chat.completions' || x.route === 'completions' || x.route === 'embeddings' || x.route === 'rerank';
    let readFirst = observed && whole.byteLength <= READ_FIRST_BYTES;
    if (observed && !readFirst) {
      const head = whole.toString('latin1', 0, 256);
      readFirst = !OBJECT_HEAD.test(head) || ERROR_HEAD.test(head);
    }
    if (readFirst) x.obs.jsonBody(whole, endAt);
    if (clientGone()) {
      x.outcome = 'disconnected';
      if (observed && !readFirst) x.obs.jsonBody(whole, endAt);
      return;
    }
    if (x.obs.failed) {
      refuse(x, res, 'failed');
      return;
    }
    x.statusCode = status;
    res.writeHead(status, { 'content-type': ctype, 'content-length': whole.byteLength });
    res.end(whole);
    x.outcome = 'success';
    if (observed && !readFirst) {
      x.obs.jsonBody(whole, endAt);
      // Relayed before it was read, and it was no answer: recorded as the engine's failure.
      if (x.obs.failed) x.outcome = 'error';
    }
  } finally {
    clearTimeout(deadline);
    abort.upstream = undefined;
  }
}

/**
 * The rest of an engine's stream after `[DONE]`: read and dropped, and cut when it is still
 * open after the grace. Holds the stream only (no closure over an exchange).
 */
function drainAfterDone(body: Readable): void {
  const cut = setTimeout(() => body.destroy(), DONE_GRACE_MS);
  // A graceful stop does not wait for it.
  cut.unref();
  const settle = (): void => clearTimeout(cut);
  // A cut or failed rest is expected and of no consequence: the answer was whole.
  body.on('error', settle);
  body.on('close', settle);
  // A data listener, not resume(): the loop that left the body still held it paused.
  body.on('data', discard);
}

function discard(): void {
  // read and dropped
}

/** Errors of a connection that was never made (undici passes the socket's code through). */
const NOT_CONNECTED: ReadonlySet<string> = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT']);

/** Why an exchange ends with nothing relayed to its client. */
type Cut = 'timeout' | 'stopping' | 'failed';

/** A missed deadline first, then a graceful stop's cut, else the upstream failed. */
function cutOf(timedOut: boolean, stopping: boolean): Cut {
  return timedOut ? 'timeout' : stopping ? 'stopping' : 'failed';
}

/**
 * Ends an exchange whose client was sent nothing with the plain problem, and records the
 * same: 504 at the deadline (outcome timeout), 503 when a graceful stop cut it (the router,
 * not an upstream, stopped), else 502 (outcome error).
 */
function refuse(x: Exchange, res: ServerResponse, cut: Cut): void {
  x.outcome = cut === 'timeout' ? 'timeout' : 'error';
  x.statusCode = cut === 'timeout' ? 504 : cut === 'stopping' ? 503 : 502;
  sendRawProblem(res, cut === 'timeout' ? ErrorCode.UPSTREAM_TIMEOUT : cut === 'stopping' ? ErrorCode.UNAVAILABLE : ErrorCode.UPSTREAM_FAILED);
}

/** An answer relayed as an event stream (by its content type, once made safe). */
const SSE = /^text\/event-stream/i;

/** How every upstream answer is read: only a 2xx event stream is relayed as it comes; anything else whole, bounded. */
const CALL_OPTIONS: UpstreamCallOptions = {
  streams: (status, ct) => status >= 200 && status <= 299 && status !== 204 && status !== 205 && SSE.test(safeContentType(ct, 'application/json')),
  wholeLimit: (status) => (status >= 200 && status <= 299 ? BUFFERED_LIMIT : ERROR_BODY_LIMIT),
};

/** How long a failed stream waits for a client still reading to take what it was sent. */
const CLIENT_DRAIN_GRACE_MS = 2_000;
