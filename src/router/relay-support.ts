import { randomFillSync } from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Readable } from 'node:stream';
import type { Socket } from 'node:net';
import {
  BodyAborted,
  BodyTooLarge,
  ERRORS,
  ErrorCode,
  OPENAI_ERROR_CONTENT_TYPE,
  UploadsFull,
  openAiError,
} from '../errors.js';
import type { Exchange } from './relay-context.js';
import type { UploadBudget } from './upload-budget.js';
import { noteEarlyAnswer } from '../http/http-app.js';

// Random bytes drawn 4 KiB at a time: one id is 16 of them, in hex.
const ID_POOL = Buffer.alloc(4096);
let idOffset = ID_POOL.length;

/** A fresh generated identifier: `req_` + 32 lowercase hex (128 random bits). */
export function newGatewayId(): string {
  if (idOffset + 16 > ID_POOL.length) {
    randomFillSync(ID_POOL);
    idOffset = 0;
  }
  const id = 'req_' + ID_POOL.toString('hex', idOffset, idOffset + 16);
  idOffset += 16;
  return id;
}

/**
 * The abort of one relayed request: its admission wait, its backpressure wait and its
 * upstream request (`upstream`, set while it runs) end when it fires. An EventEmitter, not
 * an AbortController, which builds an EventTarget per request (it showed in the router's
 * profile).
 */
export class RelayAbort extends EventEmitter {
  aborted = false;
  /** The upstream request in flight, cancelled directly (no listener, no closure over the exchange). */
  upstream: { cancel(): void } | undefined;

  /** Fires 'abort' once. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.upstream?.cancel();
    this.emit('abort');
  }
}

/**
 * Writes the OpenAI error object of a coded error on a raw response (the relay does not go
 * through Fastify; its routes are all data plane). `over`: a fixed parameter name of ours,
 * or a relayed engine refusal's status and cleaned message (UPSTREAM_REJECTED only).
 */
export function sendRawError(
  res: ServerResponse,
  code: ErrorCode,
  over?: { readonly param?: string | null; readonly message?: string; readonly status?: number },
): void {
  if (res.headersSent) {
    res.end();
    return;
  }
  const body = JSON.stringify(openAiError(code, over));
  res.statusCode = over?.status ?? ERRORS[code].status;
  if (res.statusCode === 401) res.setHeader('www-authenticate', 'Bearer');
  res.setHeader('content-type', OPENAI_ERROR_CONTENT_TYPE);
  res.setHeader('content-length', Buffer.byteLength(body));
  res.end(body);
}

/** The raw error of a coded error (kept under its old name for router.ts: the shape is sendRawError's). */
export const sendRawProblem = (res: ServerResponse, code: ErrorCode): void => sendRawError(res, code);

/** Longest a refused upload is still read (and discarded) so that its client sees the answer. */
const LINGER_MS = 2_000;

/**
 * Answers a request whose body will not be used. Closing the connection at once resets a
 * client that is still uploading before it can read the answer (an SDK then reports a
 * connection error and retries the upload); so the rest of the body is discarded on a
 * keep-alive connection, and the connection is cut only if the upload outlasts LINGER_MS.
 */
export function refuseUpload(req: IncomingMessage, res: ServerResponse, code: ErrorCode, param?: string): void {
  sendRawError(res, code, param === undefined ? undefined : { param });
  if (req.complete || req.destroyed) return;
  noteEarlyAnswer(req);
  req.resume();
  const t = setTimeout(() => req.socket?.destroy(), LINGER_MS);
  t.unref();
  req.once('close', () => clearTimeout(t));
  req.once('end', () => clearTimeout(t));
}

export { BodyAborted, BodyTooLarge, UploadsFull } from '../errors.js';

/**
 * Buffers a request body up to `limit` bytes, counted in `budget` while it arrives (a declared
 * length at once, a chunked body as it comes). Thrown when: larger (BodyTooLarge), over the
 * budget (UploadsFull) or the client left (BodyAborted). `settled` is called once the body is
 * read or has failed, before the promise settles (its bytes are out of the budget by then).
 */
export function readBody(
  req: IncomingMessage,
  limit: number,
  budget?: UploadBudget,
  settled?: () => void,
): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) {
    settled?.();
    return Promise.reject(new BodyTooLarge());
  }
  // The rest of an oversized upload is read and dropped so that its client sees the answer.
  if (budget === undefined) return collect(req, limit, resumeRest, undefined, undefined, settled);
  if (Number.isFinite(declared)) {
    if (!budget.take(declared)) {
      settled?.();
      return Promise.reject(new UploadsFull());
    }
    return collect(req, limit, resumeRest, undefined, undefined, () => {
      budget.release(declared);
      settled?.();
    });
  }
  const held = { bytes: 0 };
  return collect(req, limit, resumeRest, budget, held, () => {
    budget.release(held.bytes);
    settled?.();
  });
}

function resumeRest(r: Readable): void {
  r.resume();
}

/**
 * Collects a stream's bytes up to `limit`, on its events (an async iterator costs a promise
 * per chunk, which showed in the router's profile). Thrown when: more than `limit`
 * (BodyTooLarge, after `onOver` dealt with the stream), the stream failed or closed before
 * its end (BodyAborted). `settled`: called once, just before the promise settles (a callback,
 * not a `finally`, which costs two more promises on every request).
 */
export function collect(
  stream: Readable,
  limit: number,
  onOver: (s: Readable) => void,
  budget?: UploadBudget,
  held?: { bytes: number },
  settled?: () => void,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    if (stream.destroyed) {
      settled?.();
      reject(new BodyAborted());
      return;
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer): void => {
      size += c.byteLength;
      if (size > limit) {
        cleanup();
        onOver(stream);
        reject(new BodyTooLarge());
        return;
      }
      if (budget !== undefined) {
        if (!budget.take(c.byteLength)) {
          cleanup();
          onOver(stream);
          reject(new UploadsFull());
          return;
        }
        held!.bytes += c.byteLength;
      }
      chunks.push(c);
    };
    const onEnd = (): void => {
      cleanup();
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    const onAbort = (): void => {
      cleanup();
      reject(new BodyAborted());
    };
    const cleanup = (): void => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.off('error', onAbort);
      stream.off('aborted', onAbort);
      stream.off('close', onAbort);
      settled?.();
    };
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('error', onAbort);
    stream.on('aborted', onAbort);
    stream.on('close', onAbort);
  });
}

/**
 * Resolves when the response can take more data, when the client has gone, or when the
 * exchange is aborted (its deadline passed, the router is stopping): a client that stops
 * reading must not hold the request past its deadline. Without `abort` (a stream already
 * ended, whose last bytes a client still reading gets a grace for), after `graceMs` at most.
 */
export function drained(res: ServerResponse, abort: RelayAbort | undefined, graceMs?: number): Promise<void> {
  return new Promise((resolve) => {
    if (abort?.aborted) return resolve();
    const timer = graceMs === undefined ? undefined : setTimeout(() => done(), graceMs);
    const done = (): void => {
      clearTimeout(timer);
      res.off('drain', done);
      res.off('close', done);
      abort?.off('abort', done);
      resolve();
    };
    res.once('drain', done);
    res.once('close', done);
    abort?.once('abort', done);
  });
}

/** Exchanges waiting on each connection's close (pipelined requests): one listener per socket. */
const waitingOnSocket = new WeakMap<Socket, Set<() => void>>();

/**
 * Calls `fn` when `socket` closes; returns the function that stops waiting. However many
 * requests a client pipelines on one connection, the socket holds one 'close' listener (one
 * each would trip node's listener-leak warning on stderr at the eleventh).
 */
export function whenSocketCloses(socket: Socket, fn: () => void): () => void {
  let waiting = waitingOnSocket.get(socket);
  if (waiting === undefined) {
    const set = new Set<() => void>();
    waiting = set;
    waitingOnSocket.set(socket, set);
    socket.once('close', () => {
      waitingOnSocket.delete(socket);
      for (const f of set) f();
      set.clear();
    });
  }
  waiting.add(fn);
  const set = waiting;
  return () => void set.delete(fn);
}

const SAFE_CONTENT_TYPE = /^[A-Za-z0-9!#$&^_.+-]+\/[A-Za-z0-9!#$&^_.+-]+(?: *; *[A-Za-z0-9_-]+=[A-Za-z0-9_.-]+)*$/;

/** The upstream's content type when it is a plain media type, else the fallback. */
export function safeContentType(v: unknown, fallback: string): string {
  return typeof v === 'string' && v.length < 128 && SAFE_CONTENT_TYPE.test(v) ? v : fallback;
}

/** Engine error texts that mean "the prompt plus output limit exceed the context window". */
const CONTEXT_PATTERNS =
  /context length|context_length|context size|context window|maximum context|too many tokens|prompt is too long/i;

/** True when an upstream 400 body says the request exceeded the context window; the text itself is discarded. */
export function isContextRejection(status: number, body: Buffer): boolean {
  return (
    (status === 400 || status === 413 || status === 422) &&
    CONTEXT_PATTERNS.test(body.subarray(0, 16 * 1024).toString('utf8'))
  );
}

/** Milliseconds with microsecond resolution, as stored in records. */
export function ms(v: number): number {
  return Math.round(v * 1000) / 1000;
}

/** Why an exchange ends with nothing relayed to its client. */
export type Cut = 'timeout' | 'stopping' | 'failed';

/** A missed deadline first, then a graceful stop's cut, else the upstream failed. */
export function cutOf(timedOut: boolean, stopping: boolean): Cut {
  return timedOut ? 'timeout' : stopping ? 'stopping' : 'failed';
}

/**
 * Ends an exchange whose client was sent nothing with the plain problem, and records the
 * same: 504 at the deadline (outcome timeout), 503 when a graceful stop cut it (the router,
 * not an upstream, stopped), else 502 (outcome error).
 */
export function refuse(x: Exchange, res: ServerResponse, cut: Cut): void {
  x.outcome = cut === 'timeout' ? 'timeout' : 'error';
  x.statusCode = cut === 'timeout' ? 504 : cut === 'stopping' ? 503 : 502;
  sendRawError(
    res,
    cut === 'timeout'
      ? ErrorCode.UPSTREAM_TIMEOUT
      : cut === 'stopping'
        ? ErrorCode.UNAVAILABLE
        : ErrorCode.UPSTREAM_FAILED,
  );
}
