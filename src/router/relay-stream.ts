import type { ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import { performance } from 'node:perf_hooks';
import type { Exchange, RelayContext } from './relay-context.js';
import { cutOf, drained, refuse, type RelayAbort } from './relay-support.js';
import { lastEventEnd } from './stream-observer.js';
import type { UpstreamCall } from './upstream-call.js';
import { ErrorCode, openAiError } from '../errors.js';
import { responsesErrorEvent } from './responses-observe.js';

/**
 * Longest unfinished SSE event held back for the rest of it. A longer one cannot be read
 * before it is relayed (it could be the engine's error text), so it ends the stream as a
 * failure: no engine sends a delta of a megabyte in one event.
 */
const MAX_HELD_EVENT = 1024 * 1024;
const LF = Buffer.from('\n');

/** How long an engine may take to close its stream after `[DONE]` before it is cut. */
const DONE_GRACE_MS = 1_000;

/** The SSE error event of a coded error: the registry's OpenAI error object, as the OpenAI SDKs read `event: error`. */
function errorEvent(code: ErrorCode): Buffer {
  return Buffer.from(`event: error\ndata: ${JSON.stringify(openAiError(code))}\n\n`);
}

// The SSE event a client gets when the upstream fails mid-stream: fixed text, never [DONE].
const STREAM_ERROR = errorEvent(ErrorCode.UPSTREAM_FAILED);
const STREAM_TIMEOUT = errorEvent(ErrorCode.UPSTREAM_TIMEOUT);
const STREAM_STOPPING = errorEvent(ErrorCode.UNAVAILABLE);

/**
 * The error event that ends a failed stream: chat and completions get the error object above;
 * a Responses stream gets OpenAI's Responses `error` event, numbered after the last event
 * relayed (docs/decisions/0030).
 */
function streamErrorEvent(x: Exchange, timedOut: boolean, stopping: boolean): Buffer {
  if (x.route === 'responses')
    return responsesErrorEvent(
      timedOut ? ErrorCode.UPSTREAM_TIMEOUT : stopping ? ErrorCode.UNAVAILABLE : ErrorCode.UPSTREAM_FAILED,
      x.obs.nextSequence,
    );
  return timedOut ? STREAM_TIMEOUT : stopping ? STREAM_STOPPING : STREAM_ERROR;
}

/** How long a failed stream waits for a client still reading to take what it was sent. */
const CLIENT_DRAIN_GRACE_MS = 2_000;

/**
 * The bytes of an unfinished SSE event, held until the rest of it arrives: whole events only
 * are relayed, so every event is read by the observer before any byte of it reaches the
 * client, and an engine's error (raw text) is never relayed, even when it arrives split across
 * reads or lines. The buffer grows by doubling (a large event that arrives in many small
 * reads is copied O(n) times in all, not once per read), and only the new bytes are searched
 * for its end. Never written again once any of it is relayed.
 */
class HeldEvent {
  private held: Buffer | undefined;
  private len = 0;

  /** The whole events of what is held plus `part`, and whether the unfinished rest outgrew MAX_HELD_EVENT (dropped then). */
  take(part: Buffer): { chunk: Buffer; overlong: boolean } {
    let chunk = part;
    let from = 0;
    if (this.len > 0) {
      if (this.held!.length < this.len + part.length) {
        const grown = Buffer.allocUnsafe(Math.max(this.len + part.length, this.held!.length * 2));
        this.held!.copy(grown, 0, 0, this.len);
        this.held = grown;
      }
      part.copy(this.held!, this.len);
      from = this.len;
      this.len += part.length;
      chunk = this.held!.subarray(0, this.len);
    }
    const end = lastEventEnd(chunk, from);
    if (end === chunk.length) {
      this.len = 0;
      return { chunk, overlong: false };
    }
    const overlong = chunk.length - end > MAX_HELD_EVENT;
    if (overlong) this.len = 0;
    else if (end === 0) {
      // Still no whole event: all of it is held (where it already is, when it was held).
      if (from === 0) this.held = chunk;
      this.len = chunk.length;
    } else {
      // What comes before is relayed from this buffer: the rest moves to a new one.
      this.held = Buffer.from(chunk.subarray(end));
      this.len = this.held.length;
    }
    return { chunk: chunk.subarray(0, end), overlong };
  }

  /** The unfinished event's bytes, if any. */
  rest(): Buffer | undefined {
    return this.len > 0 ? this.held!.subarray(0, this.len) : undefined;
  }
}

/** One relayed stream: its client's response, written from the first relayed bytes on. */
interface StreamOut {
  readonly x: Exchange;
  readonly res: ServerResponse;
  readonly status: number;
  readonly ctype: string;
}

/** Writes the stream's status line and headers, once. */
function begin(o: StreamOut): void {
  if (!o.res.headersSent) o.res.writeHead(o.status, { 'content-type': o.ctype, 'cache-control': 'no-cache' });
}

/** Writes bytes the observer has read to the client; false when its buffer is full. */
function relayed(o: StreamOut, bytes: Buffer): boolean {
  o.x.statusCode = o.status;
  o.x.answered = true;
  begin(o);
  const flowing = o.res.write(bytes);
  o.x.a.estimatedCompletionTokens = o.x.obs.fragments;
  return flowing;
}

/**
 * Relays a 2xx event stream: whole SSE events only, each read by the observer before any byte
 * of it reaches the client; ends at `[DONE]`, or with the router's fixed error event (or the
 * plain error, when nothing was relayed yet) when the engine fails, stalls or is cut.
 */
export async function relayStream(
  upBody: Readable,
  status: number,
  ctype: string,
  call: UpstreamCall,
  x: Exchange,
  res: ServerResponse,
  abort: RelayAbort,
  ctx: RelayContext,
  clientGone: () => boolean,
  timedOut: () => boolean,
): Promise<void> {
  x.streaming = true;
  // The status line and headers are written with the first bytes relayed: an engine that
  // fails before its first event still gets the client a plain 502 error.
  const o: StreamOut = { x, res, status, ctype };
  const hold = new HeldEvent();
  try {
    // Leaving the loop does not destroy the body: every way out but `[DONE]` destroys it
    // below; after `[DONE]` the rest of it is drained.
    for await (const part of upBody.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
      if (x.a.phase !== 'streaming') ctx.registry.setPhase(x.a, 'streaming');
      x.a.lastUpstreamAt = Date.now();
      const step = relayPart(o, hold, part, call, upBody);
      if (step === 'stop') break;
      if (step === 'full') await drained(res, abort);
      if (clientGone() || abort.aborted) break;
    }
  } catch {
    // upstream failed, timed out, or we aborted it because the client left
  }
  if (!x.obs.done) readUnfinished(o, hold, upBody, abort, clientGone);
  await endStream(o, upBody, ctx, clientGone, timedOut);
}

/**
 * One read of the engine's stream: its whole events observed, then relayed up to an error, an
 * overlong event or `[DONE]` ('stop'); 'full' when the client's buffer is full, else 'more'.
 */
function relayPart(
  o: StreamOut,
  hold: HeldEvent,
  part: Buffer,
  call: UpstreamCall,
  upBody: Readable,
): 'stop' | 'full' | 'more' {
  const { x, res } = o;
  const at = performance.now();
  const { chunk, overlong } = hold.take(part);
  if (chunk.length > 0) x.obs.sseChunk(chunk, at);
  // What came before the overlong event is relayed (when nothing before it failed), then
  // the stream ends as the engine's failure.
  if (overlong && !x.obs.failed) {
    if (chunk.length > 0) relayed(o, chunk);
    x.obs.fail();
    return 'stop';
  }
  if (chunk.length === 0) return 'more';
  // An error from the engine ends the stream here: the client gets what came before it,
  // then the router's fixed error event (endStream), never the engine's words, even if
  // [DONE] followed.
  if (x.obs.failed) {
    if (x.obs.failedAtByte > 0) relayed(o, chunk.subarray(0, x.obs.failedAtByte));
    return 'stop';
  }
  // Up to the end of `[DONE]`: what an engine sends after it is not relayed.
  const flowing = relayed(o, x.obs.done ? chunk.subarray(0, x.obs.doneAtByte) : chunk);
  if (!x.obs.done) return flowing ? 'more' : 'full';
  // A CRLF stream's `[DONE]` may have its last LF in a read that is not awaited: the LF is
  // added, so the stream ends in CRLF as framed (a CR-only stream stays so).
  const d = x.obs.doneAtByte;
  if (d >= 2 && chunk[d - 1] === 0x0d && chunk[d - 2] === 0x0a) res.write(LF);
  // The answer is complete: the client's response ends, and the exchange is recorded, now,
  // not when the engine closes its stream (drained; cut after a grace).
  x.upstreamEndAt = performance.now();
  res.end();
  if (call.ended) upBody.destroy();
  else drainAfterDone(upBody);
  return 'stop';
}

/**
 * The engine's stream ended (not cut, failed or left by the client) with an event it did not
 * close (`data: [DONE]` and no empty line): read as if it had, and relayed when it is the end
 * of the answer (anything else is not an answer that ended well: the stream fails, and the
 * client never gets half an event run into the router's error event).
 */
function readUnfinished(
  o: StreamOut,
  hold: HeldEvent,
  upBody: Readable,
  abort: RelayAbort,
  clientGone: () => boolean,
): void {
  const { x } = o;
  const ended = upBody.readableEnded;
  const carry = hold.rest();
  if (ended && carry !== undefined && !clientGone() && !abort.aborted) {
    // What the unclosed event holds counts only when it is relayed (its content then
    // reached the client; else nothing of it did: no first content, no fragment).
    const before = {
      first: x.obs.firstContentAt,
      fragments: x.obs.fragments,
      chars: x.obs.contentChars,
      seq: x.obs.nextSequence,
    };
    x.obs.sseChunk(carry, performance.now());
    const doneWithin = x.obs.done;
    x.obs.sseEnd();
    if (x.obs.done) relayed(o, doneWithin ? carry.subarray(0, x.obs.doneAtByte) : carry);
    else {
      x.obs.firstContentAt = before.first;
      x.obs.fragments = before.fragments;
      x.obs.contentChars = before.chars;
      x.obs.nextSequence = before.seq;
    }
  } else if (ended) x.obs.sseEnd();
  x.upstreamEndAt = performance.now();
}

/** The stream's outcome: whole, left by its client, failed before anything was relayed, or failed after (the error event). */
async function endStream(
  o: StreamOut,
  upBody: Readable,
  ctx: RelayContext,
  clientGone: () => boolean,
  timedOut: () => boolean,
): Promise<void> {
  const { x, res } = o;
  x.a.upstreamPromptTokens = x.obs.promptTokens;
  x.a.upstreamCompletionTokens = x.obs.completionTokens;
  // (The observer reads nothing after `[DONE]` or a failure: done means the answer is whole.)
  if (x.obs.done) {
    x.outcome = 'success';
    // Ended at `[DONE]` in the loop already, or now after an unclosed last `[DONE]`.
    if (!res.writableEnded) {
      begin(o);
      res.end();
    }
    return;
  }
  upBody.destroy();
  // Status stays 0 when nothing was relayed: the client was sent nothing.
  if (clientGone()) {
    x.outcome = 'disconnected';
    return;
  }
  // Nothing was relayed (the engine's first word was an error, it ended or stalled before its
  // first whole event, or the router is stopping): the client gets the plain error a buffered
  // request gets, with the status that says why.
  if (!res.headersSent) return refuse(x, res, cutOf(timedOut(), ctx.stopping.value));
  x.outcome = timedOut() ? 'timeout' : 'error';
  // Cut by a graceful stop, not failed by the engine: the record's finish says the router
  // cancelled it (diagnosis reads `router_ended`), since its status is the stream's 200.
  if (!timedOut() && ctx.stopping.value) x.finishOverride = 'cancelled';
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
  x.statusCode = o.status;
  begin(o);
  res.write(streamErrorEvent(x, timedOut(), ctx.stopping.value));
  res.end();
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
