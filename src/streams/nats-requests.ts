import { randomFillSync } from 'node:crypto';
import { createInbox, headers as natsHeaders } from '@nats-io/transport-node';
import type { Msg, MsgHdrs, NatsConnection, Subscription } from '@nats-io/transport-node';
import { BusNoRespondersError, BusTimeoutError, ForbiddenError } from '../errors.js';

/** 128 random bits a token: no one who saw other requests' reply subjects can name a pending one. */
const TOKEN_BYTES = 16;
const tokenPool = Buffer.alloc(TOKEN_BYTES * 256);
let tokenAt = tokenPool.length;

/**
 * A reply token nobody can predict. Node users may publish into the fleet's inbox (they answer
 * there: deploy/nats.conf), and each sees its own request's reply subject: with counted tokens
 * (or nats.js's Math.random ones) a node could answer another node's pending request first, as
 * that node, and be believed. Drawn from a pooled buffer refilled by the CSPRNG.
 */
function unguessableToken(): string {
  if (tokenAt + TOKEN_BYTES > tokenPool.length) {
    randomFillSync(tokenPool);
    tokenAt = 0;
  }
  const token = tokenPool.toString('hex', tokenAt, tokenAt + TOKEN_BYTES);
  tokenAt += TOKEN_BYTES;
  return token;
}

interface Pending {
  readonly subject: string;
  readonly resolve: (data: Uint8Array) => void;
  readonly reject: (err: Error) => void;
  readonly timer: ReturnType<typeof setTimeout>;
}

/**
 * Request/reply over one wildcard inbox subscription, as nats.js's own request multiplexing
 * does (same inbox shape, `<inbox prefix>.<nuid>.<token>`, so the same permissions apply),
 * without its cost per request: nats.js builds and throws away an Error with a stack
 * (`RequestError('cancelled')`) for every request that succeeds, and a timer promise and a
 * `Promise.race` besides; at 1,000 nodes a read, that Error alone was a tenth of the fleet's
 * CPU. Here a request is one map entry and one timer.
 */
export class RequestMux {
  readonly #nc: NatsConnection;
  readonly #prefix: string;
  readonly #pending = new Map<string, Pending>();
  readonly #mapError: (err: unknown) => Error;
  #sub: Subscription | undefined;

  /** `mapError` turns a client error into the bus's own (the same mapping as every other call). */
  constructor(nc: NatsConnection, inboxPrefix: string | undefined, mapError: (err: unknown) => Error) {
    this.#nc = nc;
    this.#prefix = `${createInbox(inboxPrefix)}.`;
    this.#mapError = mapError;
  }

  /** One request (with `headers`, when given), one reply. Rejects with BusTimeoutError, BusNoRespondersError, or the mapped client error. */
  request(
    subject: string,
    data: Uint8Array,
    timeoutMs: number,
    headers?: Readonly<Record<string, string>>,
  ): Promise<Uint8Array> {
    // Subscribed on first use and again after the server ended the subscription; the SUB
    // goes out before the request on the same connection, so the reply finds it.
    if (this.#sub === undefined || this.#sub.isClosed()) this.#subscribe();
    const token = unguessableToken();
    return new Promise<Uint8Array>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(token);
        reject(new BusTimeoutError());
      }, timeoutMs);
      this.#pending.set(token, { subject, resolve, reject, timer });
      try {
        const reply = this.#prefix + token;
        this.#nc.publish(subject, data, headers ? { reply, headers: msgHeaders(headers) } : { reply });
      } catch (err) {
        this.#take(token)?.reject(this.#mapError(err));
      }
    });
  }

  /**
   * The server refused a publish to `subject` (one `-ERR` per refused message): the oldest
   * request waiting on it fails now instead of at its timeout, as with nats.js's own requests.
   */
  refused(subject: string): void {
    for (const [token, p] of this.#pending) {
      if (p.subject !== subject) continue;
      this.#take(token);
      p.reject(new ForbiddenError());
      return;
    }
  }

  /** Every request still waiting fails with `err` (the connection is gone). */
  failAll(err: Error): void {
    for (const token of [...this.#pending.keys()]) this.#take(token)?.reject(err);
  }

  #take(token: string): Pending | undefined {
    const p = this.#pending.get(token);
    if (p === undefined) return undefined;
    this.#pending.delete(token);
    clearTimeout(p.timer);
    return p;
  }

  #subscribe(): void {
    const sub = this.#nc.subscribe(`${this.#prefix}*`, {
      callback: (err: Error | null, msg: Msg) => {
        if (err !== null) {
          // The server ended the inbox subscription (its permissions refuse it): nothing
          // waiting can be answered; the next request subscribes again.
          if (this.#sub === sub) this.#sub = undefined;
          this.failAll(this.#mapError(err));
          return;
        }
        const p = this.#take(msg.subject.slice(this.#prefix.length));
        if (p === undefined) return; // late: its request already timed out
        // The server's "no responders" status: an empty message with code 503.
        if (msg.data.length === 0 && msg.headers?.code === 503) p.reject(new BusNoRespondersError());
        else p.resolve(msg.data);
      },
    });
    this.#sub = sub;
  }
}

/** NATS message headers holding `h`. */
function msgHeaders(h: Readonly<Record<string, string>>): MsgHdrs {
  const out = natsHeaders();
  for (const [k, v] of Object.entries(h)) out.set(k, v);
  return out;
}
