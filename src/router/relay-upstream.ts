import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ErrorCode } from '../errors.js';
import type { Exchange, RelayContext, Upstream } from './relay-context.js';
import {
  cutOf,
  isContextRejection,
  refuse,
  safeContentType,
  sendRawProblem,
  type RelayAbort,
} from './relay-support.js';
import { relayStream } from './relay-stream.js';
import { UpstreamCall, type UpstreamAnswer, type UpstreamCallOptions } from './upstream-call.js';

/** Bytes of an upstream error body read to classify it (then discarded). */
const ERROR_BODY_LIMIT = 64 * 1024;
/** Buffered answers up to this size are read before they are relayed (the parse costs microseconds). */
const READ_FIRST_BYTES = 256 * 1024;
/** The start of a JSON object. */
const OBJECT_HEAD = /^\s*\{/;
/** The start of a JSON error object: `{"error": ...}` or `{"object": "error", ...}`. */
const ERROR_HEAD = /^\s*\{\s*"(?:error"\s*:|object"\s*:\s*"error")/;
/** Largest non-streaming upstream body relayed. */
const BUFFERED_LIMIT = 64 * 1024 * 1024;

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
  // The deadline, the client leaving and a graceful stop all end the upstream request too.
  // The link is the call itself (no closure over this scope), dropped when the exchange ends;
  // the replica set links each call it makes in turn (failover).
  const deadline = setTimeout(() => {
    timedOut = true;
    abort.abort();
  }, up.route.upstreamTimeoutMs);
  try {
    x.dispatchAt = performance.now();
    ctx.registry.setPhase(a, 'dispatched');
    const call = await up.replicas.dispatch(
      {
        method: 'POST',
        path,
        headers,
        body,
        headersTimeout: up.route.upstreamTimeoutMs,
        bodyTimeout: up.route.upstreamTimeoutMs,
      },
      () => new UpstreamCall(CALL_OPTIONS, a),
      abort,
      x,
    );
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
      await relayStream(answer.body, status, ctype, call, x, res, abort, ctx, clientGone, () => timedOut);
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
    const observed =
      x.route === 'chat.completions' || x.route === 'completions' || x.route === 'embeddings' || x.route === 'rerank';
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

/** Errors of a connection that was never made (undici passes the socket's code through). */
const NOT_CONNECTED: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/** An answer relayed as an event stream (by its content type, once made safe). */
const SSE = /^text\/event-stream/i;

/** How every upstream answer is read: only a 2xx event stream is relayed as it comes; anything else whole, bounded. */
const CALL_OPTIONS: UpstreamCallOptions = {
  streams: (status, ct) =>
    status >= 200 &&
    status <= 299 &&
    status !== 204 &&
    status !== 205 &&
    SSE.test(safeContentType(ct, 'application/json')),
  wholeLimit: (status) => (status >= 200 && status <= 299 ? BUFFERED_LIMIT : ERROR_BODY_LIMIT),
};
