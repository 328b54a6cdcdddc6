import { EMPTY, defer, retry, timer, type Observable } from 'rxjs';
import type { Logger } from 'pino';
import { BusClosedError } from '../errors.js';

/** One message seen by a subscriber. */
export interface BusMsg {
  readonly subject: string;
  readonly data: Uint8Array;
}

/**
 * A request's headers as its handler reads them (NATS message headers): the value or values
 * of a name, matched case-insensitively, or undefined. What a value may be is the reader's
 * rule: they come from whoever may publish on the subject.
 */
export interface BusHeaders {
  get(name: string): string | string[] | undefined;
}

/** Handler of a request/reply service: returns the reply bytes. `headers`: the request's, when it had any. */
export type BusHandler = (data: Uint8Array, subject: string, headers?: BusHeaders) => Uint8Array | Promise<Uint8Array>;

export interface BusRequestOptions {
  /** Give up after this many milliseconds (BusTimeoutError). */
  readonly timeoutMs: number;
  /** Headers sent with the request (W3C trace context: decision 0058); names in lower case. */
  readonly headers?: Readonly<Record<string, string>>;
}

/** The headers of a request sent with `BusRequestOptions.headers`, as a handler reads them (in process). */
export function recordHeaders(h: Readonly<Record<string, string>>): BusHeaders {
  return {
    get(name) {
      const want = name.toLowerCase();
      for (const k of Object.keys(h)) if (k.toLowerCase() === want) return h[k];
      return undefined;
    },
  };
}

/** A live request/reply service; `stop()` unsubscribes it. */
export interface BusService {
  stop(): void;
}

/**
 * The seam between owner actors, folds and servers. Subjects use NATS syntax: tokens
 * separated by `.`, `*` matches one token and `>` one or more trailing tokens (in
 * subscriptions only). Payloads are bytes in both implementations so that size limits,
 * encoding and validation behave the same in process and across hosts.
 */
export interface Bus {
  /**
   * Largest payload the bus carries now (over NATS the server's `max_payload`, which can
   * change with the server a reconnect reaches); a larger message is refused.
   */
  readonly maxPayload: number;
  /** Fire-and-forget publish. Thrown when: the bus is closed (BusClosedError). */
  publish(subject: string, data: Uint8Array): void;
  /** Hot stream of messages on a subject pattern; unsubscribing removes the interest. */
  subscribe(subject: string): Observable<BusMsg>;
  /**
   * One request, one reply. Rejects with BusNoRespondersError when nobody serves the
   * subject, BusTimeoutError past `timeoutMs`, BusClosedError after close().
   */
  request(subject: string, data: Uint8Array, opts: BusRequestOptions): Promise<Uint8Array>;
  /** Serve requests on a subject (one responder per message). */
  serve(subject: string, handler: BusHandler): BusService;
  /**
   * False when it is certain that no subscriber would receive a message on `subject` (the
   * in-process bus knows its subscribers), so a publisher may skip encoding it. Absent or
   * true: someone may be listening (over NATS interest is not known locally).
   */
  hasInterest?(subject: string): boolean;
  /** Resolves once everything published so far has reached the server (no-op in process). */
  flush(): Promise<void>;
  /** Closes the bus; later calls reject or throw BusClosedError. */
  close(): Promise<void>;
}

/**
 * A subscription that outlives failures: when the bus ends it with an error (a subject the
 * server's permissions refuse, a subscription lost to the connection), it is logged (the
 * error's name only) and made again after 1 s, doubling up to 30 s; the process keeps
 * running and whatever depends on the messages shows their absence (stale, unavailable).
 * A closed bus ends it quietly.
 */
export function resilientSubscription<T>(
  subscribe: () => Observable<T>,
  logger: Logger | undefined,
  what: string,
): Observable<T> {
  return defer(subscribe).pipe(
    retry({
      resetOnSuccess: true,
      delay: (err: unknown, attempt: number) => {
        if (err instanceof BusClosedError) return EMPTY;
        logger?.warn(
          { subscription: what, errName: (err as Error)?.name, attempt },
          'bus subscription failed; subscribing again',
        );
        return timer(Math.min(30_000, 1000 * 2 ** Math.min(attempt - 1, 5)));
      },
    }),
  );
}
