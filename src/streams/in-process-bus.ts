import { Observable, Subject } from 'rxjs';
import type { Logger } from 'pino';
import { BusClosedError, BusNoRespondersError, BusTimeoutError, InvalidInputError } from '../errors.js';
import {
  recordHeaders,
  type Bus,
  type BusHandler,
  type BusMsg,
  type BusRequestOptions,
  type BusService,
} from './bus.js';
import { assertPattern, assertSubject, hasWildcard, subjectMatches } from './subject-match.js';

/** Default largest payload, the nats-server default, so both buses refuse the same sizes. */
export const DEFAULT_MAX_PAYLOAD = 1024 * 1024;

export interface InProcessBusOptions {
  /** Handler failures are logged here (subject and error name only, never the payload). */
  readonly logger?: Logger;
  /** Largest payload accepted by publish/request; defaults to 1 MiB like nats-server. */
  readonly maxPayload?: number;
}

interface Interest {
  readonly subject: Subject<BusMsg>;
  refs: number;
}

interface Responder {
  readonly pattern: string;
  readonly exact: boolean;
  readonly handler: BusHandler;
}

interface PendingRequest {
  readonly reject: (err: Error) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

/**
 * The bus inside one process, on RxJS Subjects: one Subject per distinct subscription
 * pattern, shared by every subscriber of that pattern.
 *
 * Delivery is asynchronous, like NATS: publish() queues the message and one microtask drains
 * the queue in FIFO order. That keeps the order of messages global even when a subscriber
 * publishes from inside its handler (synchronous delivery would deliver the nested message to
 * some subscribers before the outer one). The message object and its bytes are shared by all
 * subscribers, never copied: publishers must not mutate `data` after publishing it.
 * A subscriber that throws is isolated by RxJS (reported through `config.onUnhandledError`).
 */
export class InProcessBus implements Bus {
  /** Largest payload in bytes; publish/request refuse more (InvalidInputError). */
  readonly maxPayload: number;
  readonly #log: Logger | undefined;
  readonly #exact = new Map<string, Interest>();
  readonly #wild = new Map<string, Interest>();
  readonly #responders: Responder[] = [];
  readonly #pending = new Set<PendingRequest>();
  readonly #queue: BusMsg[] = [];
  #head = 0;
  #scheduled = false;
  #idle: Array<() => void> = [];
  #closed = false;

  constructor(opts: InProcessBusOptions = {}) {
    this.#log = opts.logger?.child({ subsystem: 'in-process-bus' });
    this.maxPayload = opts.maxPayload ?? DEFAULT_MAX_PAYLOAD;
  }

  /** Queues a message for every matching subscriber. Thrown when: closed (BusClosedError), bad subject or payload over maxPayload (InvalidInputError). */
  publish(subject: string, data: Uint8Array): void {
    if (this.#closed) throw new BusClosedError();
    assertSubject(subject);
    if (data.length > this.maxPayload) throw new InvalidInputError();
    this.#queue.push({ subject, data });
    if (!this.#scheduled) {
      this.#scheduled = true;
      queueMicrotask(this.#drain);
    }
  }

  /** False when no current subscription matches `subject`: a message there would reach nobody. */
  hasInterest(subject: string): boolean {
    if (this.#exact.has(subject)) return true;
    for (const pattern of this.#wild.keys()) if (subjectMatches(pattern, subject)) return true;
    return false;
  }

  /** Hot stream of messages matching `pattern`. Thrown when: the pattern is malformed (InvalidInputError); errors with BusClosedError if subscribed after close. */
  subscribe(pattern: string): Observable<BusMsg> {
    assertPattern(pattern);
    const table = hasWildcard(pattern) ? this.#wild : this.#exact;
    return new Observable<BusMsg>((subscriber) => {
      if (this.#closed) {
        subscriber.error(new BusClosedError());
        return undefined;
      }
      let interest = table.get(pattern);
      if (interest === undefined) {
        interest = { subject: new Subject<BusMsg>(), refs: 0 };
        table.set(pattern, interest);
      }
      interest.refs++;
      const held = interest;
      // Passing the subscriber straight through adds no wrapper per message.
      held.subject.subscribe(subscriber);
      return () => {
        if (--held.refs === 0 && table.get(pattern) === held) table.delete(pattern);
      };
    });
  }

  /** One request to the first registered matching responder. Rejects with BusNoRespondersError, BusTimeoutError, BusClosedError or InvalidInputError. */
  request(subject: string, data: Uint8Array, opts: BusRequestOptions): Promise<Uint8Array> {
    if (this.#closed) return Promise.reject(new BusClosedError());
    try {
      assertSubject(subject);
      if (data.length > this.maxPayload || !(opts.timeoutMs > 0)) throw new InvalidInputError();
    } catch (err) {
      return Promise.reject(err);
    }
    const responder = this.#findResponder(subject);
    if (responder === undefined) return Promise.reject(new BusNoRespondersError());
    return new Promise<Uint8Array>((resolve, reject) => {
      const pending: PendingRequest = {
        reject,
        timer: setTimeout(() => {
          this.#pending.delete(pending);
          reject(new BusTimeoutError());
        }, opts.timeoutMs),
      };
      this.#pending.add(pending);
      // Run the handler on a later tick, as a remote responder would, never inside request().
      queueMicrotask(() => {
        void this.#answer(responder, subject, data, opts.headers).then((reply) => {
          if (reply === undefined || !this.#pending.delete(pending)) return;
          clearTimeout(pending.timer);
          resolve(reply);
        });
      });
    });
  }

  /** Registers a responder; the first registered one matching a subject answers. Thrown when: closed (BusClosedError), bad pattern (InvalidInputError). */
  serve(pattern: string, handler: BusHandler): BusService {
    if (this.#closed) throw new BusClosedError();
    assertPattern(pattern);
    const responder: Responder = { pattern, exact: !hasWildcard(pattern), handler };
    this.#responders.push(responder);
    return {
      stop: () => {
        const at = this.#responders.indexOf(responder);
        if (at !== -1) this.#responders.splice(at, 1);
      },
    };
  }

  /** Resolves once every message published so far has been handed to its subscribers. Rejects with BusClosedError after close(). */
  flush(): Promise<void> {
    if (this.#closed) return Promise.reject(new BusClosedError());
    if (!this.#scheduled) return Promise.resolve();
    return new Promise((resolve) => this.#idle.push(resolve));
  }

  /** Delivers what is queued, completes every subscription and rejects pending requests. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    // Like a NATS drain: what was published before close() still reaches its subscribers.
    this.#drain();
    for (const pending of this.#pending) {
      clearTimeout(pending.timer);
      pending.reject(new BusClosedError());
    }
    this.#pending.clear();
    this.#responders.length = 0;
    const interests = [...this.#exact.values(), ...this.#wild.values()];
    this.#exact.clear();
    this.#wild.clear();
    for (const interest of interests) interest.subject.complete();
  }

  // An arrow property so queueMicrotask gets it without a bind per publish. The read
  // position lives on the instance so that a reentrant call (close() from a subscriber)
  // continues where the outer loop is instead of delivering messages twice.
  readonly #drain = (): void => {
    const queue = this.#queue;
    // Messages published by subscribers during the loop are appended and delivered in order.
    while (this.#head < queue.length) this.#deliver(queue[this.#head++]!);
    queue.length = 0;
    this.#head = 0;
    this.#scheduled = false;
    if (this.#idle.length > 0) {
      const idle = this.#idle;
      this.#idle = [];
      for (const resolve of idle) resolve();
    }
  };

  #deliver(msg: BusMsg): void {
    this.#exact.get(msg.subject)?.subject.next(msg);
    if (this.#wild.size === 0) return;
    for (const [pattern, interest] of this.#wild) {
      if (subjectMatches(pattern, msg.subject)) interest.subject.next(msg);
    }
  }

  #findResponder(subject: string): Responder | undefined {
    for (const r of this.#responders) {
      if (r.exact ? r.pattern === subject : subjectMatches(r.pattern, subject)) return r;
    }
    return undefined;
  }

  /** Runs a handler; a failure is logged and yields no reply, so the requester times out as over NATS. */
  async #answer(
    responder: Responder,
    subject: string,
    data: Uint8Array,
    headers: Readonly<Record<string, string>> | undefined,
  ): Promise<Uint8Array | undefined> {
    try {
      const reply = await responder.handler(data, subject, headers && recordHeaders(headers));
      if (reply.length > this.maxPayload) {
        this.#log?.warn({ subject }, 'bus reply over max payload dropped');
        return undefined;
      }
      return reply;
    } catch (err) {
      // Name and code only: an error message can quote the payload (JSON.parse does).
      this.#log?.warn(
        { subject, errName: (err as Error)?.name, code: (err as { code?: unknown })?.code },
        'bus handler failed',
      );
      return undefined;
    }
  }
}
