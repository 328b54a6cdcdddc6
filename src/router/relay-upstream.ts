import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ErrorCode, engineMessage } from '../errors.js';
import type { Exchange, RelayContext, Upstream } from './relay-context.js';
import { cutOf, isContextRejection, refuse, safeContentType, sendRawError, type RelayAbort } from './relay-support.js';
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

/** The deadline's state, shared by the steps of one upstream exchange. */
interface Deadline {
  timedOut: boolean;
}

/**
 * Sends the request to the upstream and relays its answer: SSE chunk by chunk with
 * backpressure, other bodies whole. Fills the exchange's measurements and outcome; the
 * upstream's own error text reaches only the client, and only as a relayed refusal
 * (relayRefusal), never a log line or the record.
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
  const d: Deadline = { timedOut: false };
  // The deadline, the client leaving and a graceful stop all end the upstream request too.
  // The link is the call itself (no closure over this scope), dropped when the exchange ends;
  // the replica set links each call it makes in turn (failover).
  const deadline = setTimeout(() => {
    d.timedOut = true;
    abort.abort();
  }, up.route.upstreamTimeoutMs);
  try {
    x.dispatchAt = performance.now();
    ctx.registry.setPhase(x.a, 'dispatched');
    const timeoutMs = up.route.upstreamTimeoutMs;
    // The replica set chooses a replica, fails over while nothing reached the client, and
    // counts `x.attempts` and `x.upstreamReplica` (replica-set.ts).
    const sent = up.replicas.dispatch(
      { method: 'POST', path, headers, body, headersTimeout: timeoutMs, bodyTimeout: timeoutMs },
      () => new UpstreamCall(CALL_OPTIONS, x.a),
      abort,
      x,
    );
    // One upstream: the call itself, no promise to wait on (the common case, on every request).
    const call = sent instanceof UpstreamCall ? sent : await sent;
    let answer: UpstreamAnswer | undefined;
    try {
      answer = await call.answer;
    } catch (err) {
      answer = failedAnswer(err, call, x, res, ctx, clientGone, d);
    }
    if (answer === undefined) return;
    x.upstreamStatus = answer.status;
    // A whole body is relayed at once: only a stream has more to wait for.
    const streaming = relayAnswer(answer, call, x, res, abort, ctx, clientGone, d);
    if (streaming !== undefined) await streaming;
  } finally {
    clearTimeout(deadline);
    abort.upstream = undefined;
  }
}

/**
 * What a call whose answer failed (`err`) still has to relay: undefined when there is nothing
 * (no connection, a failed or cut exchange), the exchange then ended and its client answered.
 * An error answer whose body failed or ran long is still an answer: classified without its text.
 */
function failedAnswer(
  err: unknown,
  call: UpstreamCall,
  x: Exchange,
  res: ServerResponse,
  ctx: RelayContext,
  clientGone: () => boolean,
  d: Deadline,
): UpstreamAnswer | undefined {
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
      let cut = cutOf(d.timedOut, ctx.stopping.value);
      if (cut === 'failed' && (err as Error)?.name === 'HeadersTimeoutError') cut = 'timeout';
      refuse(x, res, cut);
    }
    return undefined;
  }
  x.upstreamStatus = call.status;
  if (call.status >= 400 && !clientGone() && !d.timedOut && !ctx.stopping.value)
    return { kind: 'whole', status: call.status, contentType: undefined, encoded: false, body: Buffer.alloc(0) };
  // The answer's body failed, ran past its deadline or its limit, or the exchange was cut.
  if (clientGone()) x.outcome = 'disconnected';
  else refuse(x, res, cutOf(d.timedOut, ctx.stopping.value));
  return undefined;
}

/**
 * Relays an answer by what it is: a refusal, an event stream, a whole body; anything else is
 * the engine's failure. Returns the stream's relay while it runs; undefined when all is done.
 */
function relayAnswer(
  answer: UpstreamAnswer,
  call: UpstreamCall,
  x: Exchange,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
  d: Deadline,
): Promise<void> | undefined {
  const status = answer.status;
  // Never a stream (CALL_OPTIONS streams 2xx answers only).
  if (status >= 400) {
    relayRefusal(status, answer.kind === 'whole' ? answer.body : Buffer.alloc(0), x, res);
    return undefined;
  }
  if (status < 200 || status > 299 || status === 204 || status === 205 || answer.encoded) {
    // A redirect or a bodiless answer is not an answer to an inference request: never passed
    // on (its Location and body are the upstream's), recorded as an upstream error. Nor is a
    // compressed one (the router asks for no encoding): it cannot be read before it is relayed.
    if (answer.kind === 'stream') answer.body.destroy();
    x.upstreamEndAt = performance.now();
    refuse(x, res, 'failed');
    return undefined;
  }
  const ctype = safeContentType(answer.contentType, 'application/json');
  if (answer.kind === 'stream')
    return relayStream(answer.body, status, ctype, call, x, res, abort, ctx, clientGone, () => d.timedOut);
  relayWhole(answer.body, status, ctype, x, res, clientGone);
  return undefined;
}

/** Engine statuses relayed as the engine's refusal of the request (CONTRACT.md, HTTP). */
const RELAYED_REFUSALS: ReadonlySet<number> = new Set([400, 404, 409, 413, 422]);

/**
 * An engine's error answer: a context rejection (400 `context_length_exceeded`), a rate limit
 * (429 `rate_limited`), a refusal of the request as invalid (relayed with the engine's status
 * and its own message, cleaned and cut, to this client only: `upstream_rejected`); anything
 * else (401/403: the router's own credentials; 5xx) is the engine's failure, 502.
 */
function relayRefusal(status: number, errBody: Buffer, x: Exchange, res: ServerResponse): void {
  x.upstreamEndAt = performance.now();
  if (isContextRejection(status, errBody)) {
    x.outcome = 'rejected';
    x.refusal = 'context_length_exceeded';
    x.statusCode = 400;
    sendRawError(res, ErrorCode.CONTEXT_LENGTH, { param: x.route === 'completions' ? 'prompt' : 'messages' });
  } else if (status === 429) {
    x.outcome = 'rejected';
    x.refusal = 'rate_limited';
    x.statusCode = 429;
    sendRawError(res, ErrorCode.UPSTREAM_RATE_LIMITED);
  } else if (RELAYED_REFUSALS.has(status)) {
    x.outcome = 'rejected';
    x.refusal = 'upstream_rejected';
    x.statusCode = status;
    // The request itself was refused: sent again it is refused again. OpenAI SDKs retry a 409
    // on their own unless told not to (they read this header before the status).
    res.setHeader('x-should-retry', 'false');
    // The engine's words go to this caller only: nothing here keeps or logs them.
    sendRawError(res, ErrorCode.UPSTREAM_REJECTED, { status, message: engineMessage(errBody), param: null });
  } else refuse(x, res, 'failed');
}

/**
 * A whole 2xx body. One whose body is an error object (`{"error": ...}`) or no JSON object at
 * all (an error page, a traceback, nothing) is an upstream failure, and its text is the
 * engine's, never passed on: so a body is read before it is relayed when it is small or does
 * not start like an answer. A large answer (embeddings of a big batch) is relayed first and
 * read after, as of when it arrived, so the client does not wait for the parse.
 */
function relayWhole(
  whole: Buffer,
  status: number,
  ctype: string,
  x: Exchange,
  res: ServerResponse,
  clientGone: () => boolean,
): void {
  const endAt = performance.now();
  x.upstreamEndAt = endAt;
  x.answered = true;
  const observed = x.route !== 'audio.transcriptions';
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
