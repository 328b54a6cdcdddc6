import { Agent, request } from 'undici';
import { RuntimeUnreachableError } from '../errors.js';

/** Largest Engine API response body read (bytes); a larger one counts as malformed. */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** Default connect, header and body timeout of one Engine API call (ms). */
export const DEFAULT_RUNTIME_TIMEOUT_MS = 3000;
/** Largest request body a write sends (bytes): a container create is a few KiB. */
export const MAX_REQUEST_BYTES = 256 * 1024;

export { RuntimeUnreachableError, type RuntimeFailure } from '../errors.js';

export interface EngineResponse {
  /** 200 with a parsed body, or 404 with `body: null`. */
  readonly status: 200 | 404;
  readonly body: unknown;
}

/** A write's answer: any status; `body` is the parsed JSON of a 2xx with a body, else null. */
export interface EngineWriteResponse {
  readonly status: number;
  readonly body: unknown;
}

export interface WriteOptions {
  /** Header and body timeout of this call (ms); the connect timeout stays the client's. */
  readonly timeoutMs?: number;
  readonly signal?: AbortSignal;
}

function isTimeout(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
}

/**
 * A minimal Docker Engine API client over its unix socket (undici `socketPath`): bounded time
 * and size, JSON only. `getJson` reads; `post` is used only by the recipe lifecycle commands
 * (container create, start, stop). Error bodies of the runtime are never returned.
 */
export class DockerEngineClient {
  private readonly agent: Agent;
  private readonly timeoutMs: number;

  constructor(socketPath: string, opts: { timeoutMs?: number } = {}) {
    const t = opts.timeoutMs ?? DEFAULT_RUNTIME_TIMEOUT_MS;
    this.timeoutMs = t;
    this.agent = new Agent({ connect: { socketPath, timeout: t }, headersTimeout: t, bodyTimeout: t, connections: 4 });
  }

  /**
   * GETs `path` (starting with `/`). Thrown when: see RuntimeUnreachableError; a 404 is an
   * answer (`status: 404`), every other non-2xx status is a failure.
   */
  async getJson(path: string): Promise<EngineResponse> {
    const { status, text } = await this.send('GET', path, undefined, {});
    if (status === 404) return { status: 404, body: null };
    if (status !== 200) throw new RuntimeUnreachableError('status');
    return { status: 200, body: parseJson(text) };
  }

  /**
   * POSTs `path` with an optional JSON body. Every status is an answer for the caller to
   * judge; a 2xx body that is not JSON is malformed. Thrown when: the runtime cannot be asked,
   * does not answer in time, answers too much or malformed JSON (RuntimeUnreachableError), or
   * `signal` aborts (its abort error).
   */
  async post(path: string, body?: object, opts: WriteOptions = {}): Promise<EngineWriteResponse> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined && Buffer.byteLength(payload) > MAX_REQUEST_BYTES)
      throw new RangeError('request body too large');
    const { status, text } = await this.send('POST', path, payload, opts);
    const ok = status >= 200 && status <= 299;
    return { status, body: ok && text.length > 0 ? parseJson(text) : null };
  }

  async close(): Promise<void> {
    await this.agent.close();
  }

  private async send(
    method: 'GET' | 'POST',
    path: string,
    payload: string | undefined,
    opts: WriteOptions,
  ): Promise<{ status: number; text: string }> {
    // The whole call, not only each wait between bytes: a runtime that trickles its answer a
    // byte at a time is as unreachable as one that never answers.
    const deadline = AbortSignal.timeout(opts.timeoutMs ?? this.timeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
    const failure = (err: unknown): Error => {
      if (err instanceof RuntimeUnreachableError) return err;
      if (opts.signal?.aborted) return err as Error;
      return new RuntimeUnreachableError(isTimeout(err) || deadline.aborted ? 'timeout' : 'connect', { cause: err });
    };
    let res: Awaited<ReturnType<typeof request>>;
    try {
      res = await request(`http://docker${path}`, {
        dispatcher: this.agent,
        method,
        headers: {
          accept: 'application/json',
          ...(payload !== undefined ? { 'content-type': 'application/json' } : {}),
        },
        ...(payload !== undefined ? { body: payload } : {}),
        ...(opts.timeoutMs !== undefined ? { headersTimeout: opts.timeoutMs, bodyTimeout: opts.timeoutMs } : {}),
        signal,
      });
    } catch (err) {
      throw failure(err);
    }
    try {
      let size = 0;
      const chunks: Buffer[] = [];
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_RESPONSE_BYTES) {
          res.body.destroy();
          throw new RuntimeUnreachableError('malformed');
        }
        chunks.push(chunk);
      }
      return { status: res.statusCode, text: Buffer.concat(chunks).toString('utf8') };
    } catch (err) {
      throw failure(err);
    }
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new RuntimeUnreachableError('malformed', { cause: err });
  }
}
