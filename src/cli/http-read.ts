import { Pool, type Dispatcher } from 'undici';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { PACKAGE_VERSION } from '../version.js';
import type { SafeOrigin } from '../auth/origin-policy.js';
import type { ReadOutcome } from './read-outcome.js';
import { currentCas } from './trust.js';

/** SPEC.md Limits: 128 KiB per response. */
export const MAX_RESPONSE_BYTES = 128 * 1024;
/**
 * Workload reads may carry up to 1000 records (about 400 KB as JSON): their cap is 1 MiB.
 * SPEC.md's 128 KiB is the diagnosis limit (docs/api.md).
 */
export const MAX_WORKLOAD_RESPONSE_BYTES = 1024 * 1024;
/**
 * A fleet result also holds an entry for every declared node (up to 10,000, about 200 bytes
 * for a failed node and 700 for one with six empty sources) besides its 1000 records: a fleet
 * the configuration accepts must stay readable, so its cap is 16 MiB.
 */
export const MAX_FLEET_RESPONSE_BYTES = 16 * 1024 * 1024;
/** SPEC.md Limits: `--timeout` is greater than 0 and at most 30 seconds, default 5. */
export const DEFAULT_TIMEOUT_S = 5;
export const MAX_TIMEOUT_S = 30;

const TIMEOUT_CODES: ReadonlySet<string> = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * The one HTTP client of the read commands. Why each choice:
 * - an undici Pool is bound to exactly one origin, so the credential can only go there;
 * - an explicit dispatcher (never global fetch, never EnvHttpProxyAgent) means HTTP_PROXY,
 *   HTTPS_PROXY, ALL_PROXY and NODE_USE_ENV_PROXY are never consulted;
 * - undici's `request` follows no redirect; a 3xx is reported, its target never contacted;
 * - connect, headers and body timeouts are per socket wait (the body timer restarts on every
 *   chunk), so a slow but live server is not cut off by a total deadline;
 * - bodies are counted as they arrive and dropped past 128 KiB.
 * Two connections let the two diagnosis GETs travel concurrently.
 */
export class SafeReader {
  private readonly pool: Pool;
  private readonly auth: string;

  constructor(
    target: SafeOrigin,
    token: string,
    timeoutS: number,
    private readonly maxBytes: number = MAX_RESPONSE_BYTES,
  ) {
    const ms = Math.max(1, Math.round(timeoutS * 1000));
    this.pool = new Pool(target.origin, {
      connections: 2,
      pipelining: 1,
      // An extra CA (--ca-file, SVC_CA_FILE) beside the bundled roots; names and dates are still checked.
      connect: { timeout: ms, ...(currentCas() ? { ca: [...currentCas()!] } : {}) },
      headersTimeout: ms,
      bodyTimeout: ms,
    });
    this.auth = `Bearer ${token}`;
  }

  /** `GET path` (path built by the caller from validated parts). */
  get(path: string): Promise<ReadOutcome> {
    return this.send({ path, method: 'GET', headers: this.headers() });
  }

  /** `POST path` with a JSON body. */
  post(path: string, body: unknown): Promise<ReadOutcome> {
    return this.send({
      path,
      method: 'POST',
      headers: { ...this.headers(), 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  }

  /** Drops every socket; the process can exit at once. */
  async close(): Promise<void> {
    await this.pool.destroy().catch(() => undefined);
  }

  private headers(): Record<string, string> {
    return { authorization: this.auth, accept: 'application/json', 'user-agent': `svc-serving/${PACKAGE_VERSION}` };
  }

  private async send(opts: Dispatcher.RequestOptions): Promise<ReadOutcome> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.pool.request(opts);
    } catch (err) {
      return failure(err);
    }
    const { statusCode, body } = res;
    if (statusCode >= 300 && statusCode <= 399) {
      discard(body);
      return { kind: 'redirect' };
    }
    if (statusCode < 200 || statusCode > 299) {
      // The error body is never read or shown: its text could carry anything.
      discard(body);
      return { kind: 'status', status: statusCode };
    }
    const declared = Number(res.headers['content-length']);
    if (Number.isFinite(declared) && declared > this.maxBytes) {
      discard(body);
      return { kind: 'oversized' };
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > this.maxBytes) {
          discard(body);
          return { kind: 'oversized' };
        }
        chunks.push(chunk);
      }
    } catch (err) {
      return failure(err);
    }
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks));
      const body = JSON.parse(text) as unknown;
      // A member named twice: which value is meant cannot be known (JSON.parse keeps the last).
      if (hasDuplicateKey(text, body)) return { kind: 'malformed' };
      return { kind: 'json', status: statusCode, body };
    } catch {
      return { kind: 'malformed' };
    }
  }
}

/** Drops a body unread; the abort error it then emits is expected, not a failure to report. */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => undefined);
  body.destroy();
}

/** Certificate verification failures (OpenSSL's names, as Node reports them). */
const TLS_DATE_CODES: ReadonlySet<string> = new Set(['CERT_HAS_EXPIRED', 'CERT_NOT_YET_VALID']);
const TLS_UNTRUSTED_CODES: ReadonlySet<string> = new Set([
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'CERT_REJECTED',
]);

function failure(err: unknown): ReadOutcome {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return { kind: 'transport' };
  if (TIMEOUT_CODES.has(code)) return { kind: 'timeout' };
  if (TLS_DATE_CODES.has(code)) return { kind: 'tlsExpired' };
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') return { kind: 'tlsName' };
  if (TLS_UNTRUSTED_CODES.has(code)) return { kind: 'tlsUntrusted' };
  return { kind: 'transport' };
}
