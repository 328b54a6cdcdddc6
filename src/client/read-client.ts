import { Pool, type Dispatcher } from 'undici';
import { checkOrigin } from '../auth/origin-policy.js';
import { ErrorCode, SvcError, UsageFailure } from '../errors.js';
import { checkFleetResult, checkNodeResult, type FleetResult, type NodeResult } from '../schema/envelopes.js';
import { FILTER_NAMES, parseFilterArgs, resolveFilters, type FilterArgs } from '../schema/filters.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { classifyAnswer, holdFleetAnswer, holdRouterAnswer } from '../schema/answer-checks.js';
import { PACKAGE_VERSION } from '../version.js';

/** The caps the CLI reads with: a node answer (1000 records) 1 MiB, a fleet answer 16 MiB. */
export const MAX_NODE_ANSWER_BYTES = 1024 * 1024;
export const MAX_FLEET_ANSWER_BYTES = 16 * 1024 * 1024;
const DEFAULT_TIMEOUT_MS = 5_000;

/** Where and how to read: an http(s) origin, a bearer credential with `workloads:read`, optional filters. */
export interface ReadOptions {
  readonly url: string;
  readonly token: string;
  readonly filters?: FilterArgs;
  /** Per socket wait (connect, headers, each body chunk); default 5000. */
  readonly timeoutMs?: number;
}
export interface NodeReadOptions extends ReadOptions {
  /** The host the answer must be for; without it the node's own claim is taken. */
  readonly expectedNode?: string;
  /** `controller` (default): POST /tools/call node_workloads; `router`: GET /v1/workloads. */
  readonly via?: 'controller' | 'router';
}

/** Every message a read can fail with: fixed texts, never the URL, the credential or the body. */
export const READ_FAILURES = {
  url: 'the URL must be an http(s) origin without credentials, path, query or fragment',
  plainHttp: 'plain HTTP is allowed only to a loopback or private IP address; a DNS name needs HTTPS',
  token: 'the credential is not a valid bearer token',
  redirect: 'the server answered with a redirect; redirects are never followed',
  oversized: 'the answer exceeded the size limit and was discarded',
  malformed: 'the answer is not a valid envelope of the expected schema',
  identity: 'the answer is for another node than expected',
  status: 'the server refused or failed the read',
  transport: 'could not connect to the server, or the connection failed',
  timeout: 'the server sent nothing within the read timeout',
} as const;

const fail = (code: ErrorCode, key: keyof typeof READ_FAILURES): SvcError => new SvcError(code, READ_FAILURES[key]);
const refused = (c: string): SvcError =>
  fail(ErrorCode.UPSTREAM_FAILED, c === 'wrong-identity' ? 'identity' : 'malformed');
const STATUS_CODES: Readonly<Record<number, ErrorCode>> = {
  401: ErrorCode.UNAUTHENTICATED,
  403: ErrorCode.FORBIDDEN,
  404: ErrorCode.NOT_FOUND,
  405: ErrorCode.NOT_FOUND,
};
const TIMEOUTS: ReadonlySet<string> = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

/**
 * Reads one node's workloads (svc-workloads/v1 NodeResult), held to the checks the fleet holds
 * a node to (identity, record rules, filters, counts; a status too hopeful is lowered).
 * Thrown when: the options are invalid (SVC_ERR_INVALID_INPUT) or the read fails (SvcError, fixed message).
 */
export async function readNode(o: NodeReadOptions): Promise<NodeResult> {
  const args = parseFilterArgs(o.filters ?? {});
  const f = resolveFilters(args);
  const router = o.via === 'router';
  const data = router
    ? await send(o, 'GET', `/v1/workloads${query(args)}`, MAX_NODE_ANSWER_BYTES)
    : await send(o, 'POST', '/tools/call', MAX_NODE_ANSWER_BYTES, { name: 'node_workloads', arguments: args });
  const body = parse(data);
  if (!checkNodeResult.Check(body)) throw fail(ErrorCode.UPSTREAM_FAILED, 'malformed');
  const host = o.expectedNode ?? body.expected_host;
  if (router) {
    const held = holdRouterAnswer(body, host, f);
    if (held !== undefined) throw refused(held);
    return body;
  }
  const held = classifyAnswer(host, { kind: 'reply', data }, f);
  if (typeof held === 'string') throw refused(held);
  return held;
}

/**
 * Reads the fleet's workloads (FleetResult) from a fleet controller, held to the fleet's own checks.
 * Thrown when: the options are invalid (SVC_ERR_INVALID_INPUT) or the read fails (SvcError, fixed message).
 */
export async function readFleet(o: ReadOptions): Promise<FleetResult> {
  const args = parseFilterArgs(o.filters ?? {});
  const body = parse(
    await send(o, 'POST', '/tools/call', MAX_FLEET_ANSWER_BYTES, { name: 'fleet_workloads', arguments: args }),
  );
  if (!checkFleetResult.Check(body)) throw fail(ErrorCode.UPSTREAM_FAILED, 'malformed');
  const held = holdFleetAnswer(body, resolveFilters(args));
  if (held !== undefined) throw refused(held);
  return body;
}

function query(f: FilterArgs): string {
  const q = new URLSearchParams();
  for (const name of FILTER_NAMES) if (f[name] !== undefined) q.append(name, String(f[name]));
  const s = q.toString();
  return s === '' ? '' : `?${s}`;
}

/**
 * The CLI's origin rule (SPEC.md: plain HTTP only to a loopback or private IP literal; a DNS
 * name needs HTTPS), so that a credential never crosses a network in the clear by default.
 */
function origin(raw: string): string {
  try {
    return checkOrigin(raw).origin;
  } catch (err) {
    throw fail(ErrorCode.INVALID_INPUT, err instanceof UsageFailure && err.key === 'plainHttp' ? 'plainHttp' : 'url');
  }
}

/**
 * One request on a pool bound to the one origin (the credential can go nowhere else; no proxy
 * variable or global dispatcher is consulted); undici's `request` follows no redirect.
 */
async function send(
  o: ReadOptions,
  method: 'GET' | 'POST',
  path: string,
  maxBytes: number,
  json?: unknown,
): Promise<Uint8Array> {
  const target = origin(o.url);
  if (!/^[\x21-\x7e]{1,4096}$/.test(o.token)) throw fail(ErrorCode.INVALID_INPUT, 'token');
  const ms = Math.max(1, Math.round(o.timeoutMs ?? DEFAULT_TIMEOUT_MS));
  const pool = new Pool(target, { connections: 1, connect: { timeout: ms }, headersTimeout: ms, bodyTimeout: ms });
  const headers: Record<string, string> = {
    authorization: `Bearer ${o.token}`,
    accept: 'application/json',
    'user-agent': `svc-serving/${PACKAGE_VERSION}`,
  };
  if (json !== undefined) headers['content-type'] = 'application/json';
  try {
    const res = await pool.request({ method, path, headers, body: json === undefined ? null : JSON.stringify(json) });
    // An error body is never read: its text could carry anything.
    if (res.statusCode !== 200) discard(res.body);
    if (res.statusCode >= 300 && res.statusCode <= 399) throw fail(ErrorCode.UPSTREAM_FAILED, 'redirect');
    if (res.statusCode !== 200)
      throw fail(
        STATUS_CODES[res.statusCode] ?? ErrorCode.UPSTREAM_FAILED,
        res.statusCode < 300 ? 'malformed' : 'status',
      );
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > maxBytes) {
        discard(res.body);
        throw fail(ErrorCode.UPSTREAM_FAILED, 'oversized');
      }
      chunks.push(chunk);
    }
    return Buffer.concat(chunks);
  } catch (err) {
    if (err instanceof SvcError) throw err;
    const code = (err as { code?: unknown } | null)?.code;
    throw typeof code === 'string' && TIMEOUTS.has(code)
      ? fail(ErrorCode.UPSTREAM_TIMEOUT, 'timeout')
      : fail(ErrorCode.UNAVAILABLE, 'transport');
  } finally {
    await pool.destroy().catch(() => undefined);
  }
}

/** UTF-8 JSON with no member named twice (which copy is meant cannot be known). */
function parse(data: Uint8Array): unknown {
  try {
    const text = new TextDecoder('utf-8', { fatal: true }).decode(data);
    const v = JSON.parse(text) as unknown;
    if (!hasDuplicateKey(text, v)) return v;
  } catch {
    // not UTF-8 or not JSON: the fixed failure below
  }
  throw fail(ErrorCode.UPSTREAM_FAILED, 'malformed');
}

const discard = (body: Dispatcher.ResponseData['body']): void => void body.on('error', () => undefined).destroy();
