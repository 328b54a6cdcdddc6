import {
  AuthorizationError,
  ClosedConnectionError,
  DrainingConnectionError,
  InvalidArgumentError,
  InvalidSubjectError,
  NoRespondersError,
  PermissionViolationError,
  RequestError,
  TimeoutError,
  UserAuthenticationExpiredError,
  Match,
  connect,
} from '@nats-io/transport-node';
import type { Msg, MsgHdrs, NatsConnection, Subscription } from '@nats-io/transport-node';
import { BehaviorSubject, Observable } from 'rxjs';
import type { Logger } from 'pino';
import {
  BusClosedError,
  BusNoRespondersError,
  BusTimeoutError,
  ConfigError,
  ErrorCode,
  ForbiddenError,
  InvalidInputError,
  SvcError,
} from '../errors.js';
import type { Bus, BusHandler, BusHeaders, BusMsg, BusRequestOptions, BusService } from './bus.js';
import { DEFAULT_MAX_PAYLOAD } from './in-process-bus.js';
import { assertPattern, assertSubject } from './subject-match.js';
import { endpoints, tlsFailure } from './nats-endpoints.js';
import { RequestMux } from './nats-requests.js';

export interface NatsBusOptions {
  readonly servers: string | string[];
  readonly user?: string;
  readonly pass?: string;
  readonly token?: string;
  /** Connection name shown by the server's monitoring. */
  readonly name?: string;
  /**
   * Where replies to this connection's requests arrive (default `_INBOX`). Per user
   * (`_INBOX_<user>`), the server's permissions can let each user read only its own replies.
   */
  readonly inboxPrefix?: string;
  readonly logger?: Logger;
}

/** Connection state as seen by this client. */
export type NatsBusState = 'connected' | 'disconnected' | 'closed';

/** Queue group of serve(): several responders on one subject share the load, one answers. */
const SERVE_QUEUE = 'svc-bus';
/** Bound on close(): a drain waits for the server, which may be gone for good. */
const DRAIN_TIMEOUT_MS = 2_000;

/**
 * A reply subject a server of ours answers on: an inbox, `_INBOX.` or a user's own prefix
 * `_INBOX_<user>.` (CONTRACT.md, request/reply trust). A responder publishes wherever the
 * request's reply subject says, as far as its permissions let it (with `allow_responses`,
 * anywhere): a request whose reply names a subject of this host or another (node-b's resync
 * subject, schema/subjects.ts) would make this process speak there, so it is not answered.
 */
const INBOX_REPLY_RE = /^_INBOX(?:_[A-Za-z0-9_-]{1,64})?\.[^.\s*>]+(?:\.[^.\s*>]+)*$/;

/** True when `reply` is a subject this bus answers requests on (an inbox). */
export function isInboxReply(reply: string): boolean {
  return reply.length <= 512 && INBOX_REPLY_RE.test(reply);
}

/** A received message's headers as a handler reads them: names matched case-insensitively, as HTTP's are. */
function busHeaders(h: MsgHdrs): BusHeaders {
  return {
    get(name) {
      const v = h.values(name, Match.IgnoreCase);
      return v.length === 0 ? undefined : v.length === 1 ? v[0] : v;
    },
  };
}

/** Refused reply subjects are logged at most this often (with how many since the last line). */
const REFUSED_REPLY_LOG_MS = 60_000;

/**
 * Connects to NATS and returns the bus over it.
 *
 * Start-up fails fast instead of waiting for a server (waitOnFirstConnect false): a process
 * started against a wrong URL or credentials should exit with a coded error, not hang. Once
 * connected, the client reconnects forever every ~250 ms (plus jitter), re-subscribes on
 * its own and buffers publishes meanwhile.
 * Thrown when: the server refuses the credentials (ConfigError) or cannot be reached
 * (SvcError SVC_ERR_UNAVAILABLE, naming scheme, host and port only); the message never
 * contains a credential.
 */
export async function connectNatsBus(opts: NatsBusOptions): Promise<NatsBus> {
  // `tls://` asks for TLS: required (the client would otherwise connect in plain text to a
  // server that does not offer it, and send the password with it). Certificates are verified
  // against Node's CAs (add a private CA with NODE_EXTRA_CA_CERTS).
  const tls = (typeof opts.servers === 'string' ? [opts.servers] : opts.servers).some((s) => /^tls:\/\//i.test(s));
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: opts.servers,
      ...(tls ? { tls: {} } : {}),
      user: opts.user,
      pass: opts.pass,
      token: opts.token,
      name: opts.name,
      ...(opts.inboxPrefix ? { inboxPrefix: opts.inboxPrefix } : {}),
      maxReconnectAttempts: -1,
      // Credentials refused during a reconnect (a server restarted with other ones) must not
      // end the connection for good: keep trying, so that fixed credentials heal it.
      ignoreAuthErrorAbort: true,
      reconnectTimeWait: 250,
      waitOnFirstConnect: false,
      timeout: 5_000,
      // Find a dead peer within ~1 min instead of the 4 min that the defaults allow.
      pingInterval: 30_000,
      maxPingOut: 2,
      // An Error per request only to improve stack traces is too costly on the hot path.
      noAsyncTraces: true,
    });
  } catch (err) {
    if (err instanceof AuthorizationError || err instanceof UserAuthenticationExpiredError) {
      throw new ConfigError('nats credentials rejected', { cause: err });
    }
    if (tls && tlsFailure(err)) {
      throw new SvcError(
        ErrorCode.UNAVAILABLE,
        `NATS server at ${endpoints(opts.servers)} does not offer TLS, or its certificate is not trusted (the URL asks for tls://); nothing was sent to it`,
        { cause: err },
      );
    }
    throw new SvcError(ErrorCode.UNAVAILABLE, `NATS server unreachable at ${endpoints(opts.servers)}`, { cause: err });
  }
  return new NatsBus(nc, opts.logger, opts.inboxPrefix);
}

/** The bus across hosts, one NATS connection per instance; create it with connectNatsBus(). */
export class NatsBus implements Bus {
  readonly #nc: NatsConnection;
  readonly #log: Logger | undefined;
  readonly #state = new BehaviorSubject<NatsBusState>('connected');
  #closed = false;
  #closing: Promise<void> | undefined;

  /** Connection state changes; completes after close. */
  readonly state$: Observable<NatsBusState> = this.#state.asObservable();

  readonly #requests: RequestMux;

  constructor(nc: NatsConnection, logger?: Logger, inboxPrefix?: string) {
    this.#nc = nc;
    this.#log = logger?.child({ subsystem: 'nats-bus' });
    this.#requests = new RequestMux(nc, inboxPrefix, (err) => this.#mapError(err));
    void this.#watchStatus();
    void nc.closed().then(() => this.#markClosed());
  }

  /** Largest payload the current server accepts (1 MiB when unknown). */
  get maxPayload(): number {
    return this.#nc.info?.max_payload ?? DEFAULT_MAX_PAYLOAD;
  }

  /** Publishes (buffered while reconnecting). Thrown when: closed (BusClosedError), bad subject or payload over maxPayload (InvalidInputError). */
  publish(subject: string, data: Uint8Array): void {
    if (this.#closed) throw new BusClosedError();
    assertSubject(subject);
    if (data.length > this.maxPayload) throw new InvalidInputError();
    try {
      this.#nc.publish(subject, data);
    } catch (err) {
      throw this.#mapError(err);
    }
  }

  /** One NATS subscription per Observable subscription. Thrown when: the pattern is malformed (InvalidInputError); errors with BusClosedError if subscribed after close. */
  subscribe(pattern: string): Observable<BusMsg> {
    assertPattern(pattern);
    return new Observable<BusMsg>((subscriber) => {
      if (this.#closed) {
        subscriber.error(new BusClosedError());
        return undefined;
      }
      let sub: Subscription;
      try {
        sub = this.#nc.subscribe(pattern, {
          // A callback, not an async iterator: no queue and no promise per message.
          callback: (err: Error | null, msg: Msg) => {
            if (err !== null) {
              subscriber.error(this.#mapError(err));
              return;
            }
            // A plain object so that BusMsg is the same shape in both buses; the bytes are
            // a view into the received frame, not a copy.
            try {
              subscriber.next({ subject: msg.subject, data: msg.data });
            } catch (thrown) {
              // Never let an exception reach the client's socket reader: it would stop it.
              this.#log?.warn({ subject: pattern, errName: (thrown as Error)?.name }, 'bus subscriber threw');
            }
          },
        });
      } catch (err) {
        subscriber.error(this.#mapError(err));
        return undefined;
      }
      // Drain/close (or a server-side end) completes the stream.
      void sub.closed.then((err) => (err ? subscriber.error(this.#mapError(err)) : subscriber.complete()));
      return () => {
        if (!sub.isClosed() && !this.#nc.isClosed()) sub.unsubscribe();
      };
    });
  }

  /** One request, one reply. Rejects with BusNoRespondersError, BusTimeoutError, BusClosedError or InvalidInputError. */
  async request(subject: string, data: Uint8Array, opts: BusRequestOptions): Promise<Uint8Array> {
    if (this.#closed) throw new BusClosedError();
    assertSubject(subject);
    // A timeout of 0 would fail every request at once (nats.js made it 1 s): refused instead.
    if (data.length > this.maxPayload || !(opts.timeoutMs > 0)) throw new InvalidInputError();
    try {
      return await this.#requests.request(subject, data, opts.timeoutMs, opts.headers);
    } catch (err) {
      throw this.#mapError(err);
    }
  }

  /**
   * Serves requests in queue group `svc-bus` (one responder answers). A subscription the
   * server ends (its permissions refuse the subject, e.g. until they are fixed and reloaded)
   * is logged (the error's name) and made again after 1 s, doubling up to 30 s, until
   * stopped. Thrown when: closed (BusClosedError), bad pattern (InvalidInputError).
   */
  serve(pattern: string, handler: BusHandler): BusService {
    if (this.#closed) throw new BusClosedError();
    assertPattern(pattern);
    let sub: Subscription | undefined;
    let stopped = false;
    let attempt = 0;
    let again: ReturnType<typeof setTimeout> | undefined;
    // A failed subscription is made again later (once per failure, however it is reported).
    const failed = (errName: string | undefined): void => {
      if (stopped || this.#closed || this.#nc.isClosed() || again !== undefined) return;
      attempt++;
      this.#log?.warn({ subject: pattern, errName, attempt }, 'bus service subscription failed; serving again');
      again = setTimeout(retry, Math.min(30_000, 1000 * 2 ** Math.min(attempt - 1, 5)));
      again.unref();
    };
    const start = (): void => {
      sub = this.#nc.subscribe(pattern, {
        queue: SERVE_QUEUE,
        callback: (err: Error | null, msg: Msg) => {
          if (err !== null) return failed(err.name);
          // A request arrived: the subscription works (the next failure starts again at 1 s).
          attempt = 0;
          if (!msg.reply) return; // a plain publish on a served subject has nobody to answer
          if (!isInboxReply(msg.reply)) {
            this.#refusedReply(msg.subject);
            return;
          }
          this.#handle(handler, msg);
        },
      });
    };
    const retry = (): void => {
      again = undefined;
      if (stopped || this.#closed || this.#nc.isClosed()) return;
      try {
        start();
      } catch (err) {
        failed((err as Error)?.name);
      }
    };
    try {
      start();
    } catch (err) {
      throw this.#mapError(err);
    }
    return {
      stop: () => {
        stopped = true;
        if (again !== undefined) clearTimeout(again);
        if (sub !== undefined && !sub.isClosed() && !this.#nc.isClosed()) sub.unsubscribe();
      },
    };
  }

  /** Resolves once the server has seen everything published so far. Rejects with BusClosedError after close(), SVC_ERR_UNAVAILABLE when the connection drops meanwhile. */
  async flush(): Promise<void> {
    if (this.#closed) throw new BusClosedError();
    try {
      await this.#nc.flush();
    } catch (err) {
      throw this.#mapError(err);
    }
  }

  /** Drains (bounded to 2 s, since the server may be gone), then closes the connection. */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#closed = true;
    this.#closing = (async () => {
      const nc = this.#nc;
      if (!nc.isClosed()) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        const bounded = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, DRAIN_TIMEOUT_MS);
        });
        // A drain while disconnected waits for a reconnect that may never come.
        const drained = this.#state.value === 'connected' ? nc.drain().catch(() => undefined) : undefined;
        await Promise.race([drained, bounded]);
        clearTimeout(timer);
        if (!nc.isClosed()) await nc.close().catch(() => undefined);
      }
      await nc.closed();
      this.#markClosed();
    })();
    return this.#closing;
  }

  #handle(handler: BusHandler, msg: Msg): void {
    let out: Uint8Array | Promise<Uint8Array>;
    try {
      out = handler(msg.data, msg.subject, msg.headers && busHeaders(msg.headers));
    } catch (err) {
      this.#handlerFailed(msg.subject, err);
      return;
    }
    if (out instanceof Uint8Array) this.#respond(msg, out);
    else
      out.then(
        (reply) => this.#respond(msg, reply),
        (err: unknown) => this.#handlerFailed(msg.subject, err),
      );
  }

  #refusedReplies = 0;
  #refusedReplyLogAt = Number.NEGATIVE_INFINITY;

  /** A request whose reply subject is no inbox: unanswered; one warn line a minute, the subject served (never the reply subject asked for). */
  #refusedReply(subject: string): void {
    this.#refusedReplies++;
    const now = Date.now();
    if (now - this.#refusedReplyLogAt < REFUSED_REPLY_LOG_MS) return;
    this.#refusedReplyLogAt = now;
    this.#log?.warn(
      { subject, refused: this.#refusedReplies },
      'bus requests not answered: reply subject is not an inbox',
    );
    this.#refusedReplies = 0;
  }

  #respond(msg: Msg, reply: Uint8Array): void {
    try {
      msg.respond(reply);
    } catch (err) {
      // After close the answer has nowhere to go; anything else (too large) is worth a line.
      if (!this.#closed) this.#log?.warn({ subject: msg.subject, errName: (err as Error)?.name }, 'bus reply not sent');
    }
  }

  /** Logs name and code only: an error message can quote the payload (JSON.parse does). */
  #handlerFailed(subject: string, err: unknown): void {
    this.#log?.warn(
      { subject, errName: (err as Error)?.name, code: (err as { code?: unknown })?.code },
      'bus handler failed',
    );
  }

  #mapError(err: unknown): Error {
    if (err instanceof SvcError) return err;
    if (err instanceof TimeoutError) return new BusTimeoutError({ cause: err });
    if (err instanceof RequestError && err.isNoResponders()) return new BusNoRespondersError({ cause: err });
    if (err instanceof NoRespondersError) return new BusNoRespondersError({ cause: err });
    if (this.#closed || err instanceof ClosedConnectionError || err instanceof DrainingConnectionError) {
      return new BusClosedError();
    }
    // A denied publish only shows in status(); a denied subscribe or request lands here.
    if (err instanceof PermissionViolationError || (err as Error)?.cause instanceof PermissionViolationError) {
      return new ForbiddenError();
    }
    if (err instanceof InvalidSubjectError || err instanceof InvalidArgumentError) {
      return new InvalidInputError({ cause: err });
    }
    // RequestError('connection disconnected'): a flush or request caught by a reconnect.
    if (err instanceof RequestError) return new SvcError(ErrorCode.UNAVAILABLE, undefined, { cause: err });
    return err instanceof Error ? err : new SvcError(ErrorCode.INTERNAL, undefined, { cause: err });
  }

  #lastErrorLogAt = Number.NEGATIVE_INFINITY;
  /** Connected since the last `disconnect` status (the connection starts connected). */
  #linkUp = true;
  #errorsSkipped = 0;

  async #watchStatus(): Promise<void> {
    // Server addresses are not logged: a URL may carry user:pass.
    for await (const s of this.#nc.status()) {
      switch (s.type) {
        case 'disconnect':
          // A server that refuses the credentials accepts the connection first and drops it
          // on every attempt: only the first loss of a working connection is a line.
          if (this.#linkUp) this.#log?.warn('nats disconnected');
          this.#linkUp = false;
          if (!this.#nc.isClosed()) this.#state.next('disconnected');
          break;
        case 'reconnect':
          // The client reports one reconnect per refused attempt (each refused connection
          // waited on a dial loop of its own), all at once when one finally succeeds: one line.
          if (!this.#linkUp) this.#log?.info('nats reconnected');
          this.#linkUp = true;
          this.#state.next('connected');
          break;
        case 'error': {
          // A refused request fails now, not at its timeout.
          if (s.error instanceof PermissionViolationError && s.error.operation === 'publish')
            this.#requests.refused(s.error.subject);
          // Refused credentials repeat on every reconnect attempt (4 a second): one line per
          // 10 s, with how many were left out.
          const now = Date.now();
          if (now - this.#lastErrorLogAt >= 10_000) {
            this.#log?.warn(
              { errName: s.error.name, ...(this.#errorsSkipped > 0 ? { skipped: this.#errorsSkipped } : {}) },
              'nats server error',
            );
            this.#lastErrorLogAt = now;
            this.#errorsSkipped = 0;
          } else this.#errorsSkipped++;
          break;
        }
        case 'slowConsumer':
          this.#log?.warn('nats slow consumer');
          break;
        default:
          break;
      }
    }
  }

  #markClosed(): void {
    this.#closed = true;
    this.#requests.failAll(new BusClosedError());
    if (this.#state.closed) return;
    this.#state.next('closed');
    this.#state.complete();
  }
}
