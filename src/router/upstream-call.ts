import { Readable } from 'node:stream';
import type { Dispatcher } from 'undici';
import { UpstreamBodyTooLarge, UpstreamCancelled } from '../errors.js';

/** What the upstream answered: an event stream to relay chunk by chunk, or a whole body. */
export type UpstreamAnswer =
  | {
      readonly kind: 'stream';
      readonly status: number;
      readonly contentType: string | undefined;
      readonly encoded: boolean;
      readonly body: Readable;
    }
  | {
      readonly kind: 'whole';
      readonly status: number;
      readonly contentType: string | undefined;
      readonly encoded: boolean;
      readonly body: Buffer;
    };

export { UpstreamBodyTooLarge, UpstreamCancelled } from '../errors.js';

/**
 * How answers are read. Shared by every call (module-level functions, no closure over an
 * exchange: see UpstreamCall on why nothing here may hold one).
 */
export interface UpstreamCallOptions {
  /** True when an answer with this status and content type is relayed as a stream. */
  readonly streams: (status: number, contentType: string | undefined) => boolean;
  /** Longest whole body read for this status (a longer one fails with UpstreamBodyTooLarge). */
  readonly wholeLimit: (status: number) => number;
}

/**
 * One request to an upstream as an undici dispatch handler: one promise for its answer,
 * settled when a stream's head arrives or when a whole body has been read, instead of
 * undici's `request()` (a promise, an async resource and a body stream per request, then a
 * second promise to collect the body). A stream's body is a Readable with backpressure (a
 * full buffer pauses the upstream socket).
 *
 * `answer` rejects with undici's own errors (connection refused, headers or body timeout,
 * socket closed), UpstreamBodyTooLarge, or the `cancel()` reason; `status` is 0 until the
 * answer's head arrived, so a rejection says whether the upstream had answered.
 *
 * Measured (bench/router-ab.ts, `--trace-gc`): a call reachable from a longer-lived object
 * through a closure over the relay's scope kept whole exchanges alive across scavenges (5x
 * the promoted bytes, 1.2x the CPU per request). So the call holds no closure over an
 * exchange, only the in-flight entry whose upstream time it stamps, and its holder drops it
 * when the exchange ends.
 */
export class UpstreamCall implements Dispatcher.DispatchHandler {
  readonly answer: Promise<UpstreamAnswer>;
  /** The answer's status; 0 until its head arrived. */
  status = 0;
  /**
   * Told once when the exchange with the upstream is over (its answer read whole, failed or
   * cut): the replica it went to counts it as outstanding until then.
   */
  owner: { callEnded(call: UpstreamCall, err: Error | undefined): void } | undefined;
  private settle: ((a: UpstreamAnswer) => void) | undefined;
  private fail: ((err: Error) => void) | undefined;
  private controller: Dispatcher.DispatchController | undefined;
  private cancelledWith: Error | undefined;
  private contentType: string | undefined;
  /** The answer has a content encoding other than identity (gzip, br...). */
  private encoded = false;
  private stream: Readable | undefined;
  private streamEnded = false;
  private chunks: Buffer[] = [];
  private size = 0;
  private limit = 0;

  constructor(
    private readonly opts: UpstreamCallOptions,
    /** Stamped with the time the answer's head arrived (the upstream was last heard from then). */
    private readonly active: { lastUpstreamAt: number | null },
  ) {
    this.answer = new Promise<UpstreamAnswer>((resolve, reject) => {
      this.settle = resolve;
      this.fail = reject;
    });
  }

  /** Cancelled by the router (the client left, the deadline passed, a stop): no fault of the upstream's. */
  get cancelled(): boolean {
    return this.cancelledWith !== undefined;
  }

  /** A streamed answer's body has been received whole (the upstream ended it). */
  get ended(): boolean {
    return this.streamEnded;
  }

  /** Aborts the upstream request (now, or as soon as it starts); `answer` or the stream fails with `reason`. */
  cancel(reason: Error = new UpstreamCancelled('cancelled')): void {
    if (this.cancelledWith) return;
    this.cancelledWith = reason;
    this.controller?.abort(reason);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.cancelledWith) controller.abort(this.cancelledWith);
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.status = statusCode;
    const ct = headers['content-type'];
    this.contentType = typeof ct === 'string' ? ct : undefined;
    const ce = headers['content-encoding'];
    this.encoded = ce !== undefined && !(typeof ce === 'string' && /^\s*(?:identity)?\s*$/i.test(ce));
    this.active.lastUpstreamAt = Date.now();
    if (this.opts.streams(statusCode, this.contentType)) {
      this.stream = new Readable({
        read: () => controller.resume(),
        destroy: (err, cb) => {
          // Destroyed by its reader before the upstream finished: the upstream request goes too.
          if (!this.streamEnded) controller.abort(err ?? new UpstreamCancelled('stream closed'));
          cb(err);
        },
      });
      this.resolve({
        kind: 'stream',
        status: statusCode,
        contentType: this.contentType,
        encoded: this.encoded,
        body: this.stream,
      });
    } else this.limit = this.opts.wholeLimit(statusCode);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.stream) {
      if (!this.stream.push(chunk)) controller.pause();
      return;
    }
    if (this.settle === undefined) return;
    this.size += chunk.byteLength;
    if (this.size > this.limit) {
      this.chunks = [];
      const err = new UpstreamBodyTooLarge('upstream body over its limit');
      this.reject(err);
      controller.abort(err);
      return;
    }
    this.chunks.push(chunk);
  }

  onResponseEnd(): void {
    this.endOnce(undefined);
    if (this.stream) {
      this.streamEnded = true;
      this.stream.push(null);
      return;
    }
    const body = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    // Read whole: nothing more to abort.
    this.controller = undefined;
    this.resolve({ kind: 'whole', status: this.status, contentType: this.contentType, encoded: this.encoded, body });
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    this.endOnce(err);
    const reason = this.cancelledWith ?? err;
    if (this.stream) {
      this.streamEnded = true;
      this.stream.destroy(reason);
      return;
    }
    this.reject(reason);
  }

  /** Tells the owner, once, that the upstream exchange is over. */
  private endOnce(err: Error | undefined): void {
    const owner = this.owner;
    if (owner === undefined) return;
    this.owner = undefined;
    owner.callEnded(this, err);
  }

  private resolve(a: UpstreamAnswer): void {
    const settle = this.settle;
    this.settle = this.fail = undefined;
    settle?.(a);
  }

  private reject(err: Error): void {
    const fail = this.fail;
    this.settle = this.fail = undefined;
    fail?.(err);
  }
}
