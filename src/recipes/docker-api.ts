import { Agent, request } from 'undici';

/** Largest Engine API response body read (bytes); a larger one counts as malformed. */
export const MAX_RESPONSE_BYTES = 8 * 1024 * 1024;
/** Default connect, header and body timeout of one Engine API call (ms). */
export const DEFAULT_RUNTIME_TIMEOUT_MS = 3000;

export type RuntimeFailure = 'connect' | 'timeout' | 'status' | 'malformed';

/**
 * Thrown when: the container runtime cannot be asked (socket missing, connection refused),
 * does not answer in time, answers with an unexpected status, or answers with something that
 * is not the Engine API's JSON. Its message is fixed; the cause is kept for debugging only
 * and never printed.
 */
export class RuntimeUnreachableError extends Error {
  constructor(readonly failure: RuntimeFailure, options?: { cause?: unknown }) {
    super('container runtime is not reachable or answered malformed data', options);
    this.name = 'RuntimeUnreachableError';
  }
}

export interface EngineResponse {
  /** 200 with a parsed body, or 404 with `body: null`. */
  readonly status: 200 | 404;
  readonly body: unknown;
}

function isTimeout(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
}

/**
 * A minimal Docker Engine API client over its unix socket (undici `socketPath`): GET only,
 * bounded time and size, JSON only. Reads never change the runtime.
 */
export class DockerEngineClient {
  private readonly agent: Agent;

  constructor(socketPath: string, opts: { timeoutMs?: number } = {}) {
    const t = opts.timeoutMs ?? DEFAULT_RUNTIME_TIMEOUT_MS;
    this.agent = new Agent({ connect: { socketPath, timeout: t }, headersTimeout: t, bodyTimeout: t, connections: 4 });
  }

  /**
   * GETs `path` (starting with `/`). Thrown when: see RuntimeUnreachableError; a 404 is an
   * answer (`status: 404`), every other non-2xx status is a failure.
   */
  async getJson(path: string): Promise<EngineResponse> {
    let res;
    try {
      res = await request(`http://docker${path}`, { dispatcher: this.agent, method: 'GET', headers: { accept: 'application/json' } });
    } catch (err) {
      throw new RuntimeUnreachableError(isTimeout(err) ? 'timeout' : 'connect', { cause: err });
    }
    let text = '';
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
      text = Buffer.concat(chunks).toString('utf8');
    } catch (err) {
      if (err instanceof RuntimeUnreachableError) throw err;
      throw new RuntimeUnreachableError(isTimeout(err) ? 'timeout' : 'connect', { cause: err });
    }
    if (res.statusCode === 404) return { status: 404, body: null };
    if (res.statusCode !== 200) throw new RuntimeUnreachableError('status');
    try {
      return { status: 200, body: JSON.parse(text) as unknown };
    } catch (err) {
      throw new RuntimeUnreachableError('malformed', { cause: err });
    }
  }

  async close(): Promise<void> {
    await this.agent.close();
  }
}
