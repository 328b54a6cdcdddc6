import { Pool, type Dispatcher } from 'undici';
import { classifyAnswer, holdFleetFor } from '../schema/answer-checks.js';
import type { FleetResult, NodeResult } from '../schema/envelopes.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { resolveFilters, type FilterArgs } from '../schema/filters.js';
import { PACKAGE_VERSION } from '../version.js';

/**
 * Why a read of the declared controller produced no trustworthy NodeResult. A fixed code:
 * the page shows fixed words for each, never the URL, the body or exception text.
 */
export type ReadFailure =
  | 'unreachable'
  | 'timeout'
  | 'redirect'
  | 'failed'
  | 'not-served'
  | 'malformed'
  | 'oversized'
  | 'wrong-identity'
  | 'controller-unauthenticated'
  | 'controller-forbidden'
  | 'refused';

export type ControllerRead =
  | { readonly kind: 'result'; readonly result: NodeResult }
  | { readonly kind: 'failure'; readonly failure: ReadFailure }
  | { readonly kind: 'aborted' };

/** A node result holds at most 1000 records; 2 MiB leaves room without trusting a peer. */
const MAX_BODY_BYTES = 2 * 1024 * 1024;
const TIMEOUT_MS = 5_000;
/** Longest one whole read may take: a controller that drips its answer byte by byte is a timeout. */
export const READ_DEADLINE_MS = 10_000;

/** A fleet answer holds up to 1000 records per node; the CLI's own cap for it. */
const MAX_FLEET_BODY_BYTES = 16 * 1024 * 1024;

type ToolCall =
  | { readonly kind: 'body'; readonly data: Buffer }
  | { readonly kind: 'failure'; readonly failure: ReadFailure }
  | { readonly kind: 'aborted' };

/**
 * One `POST /tools/call` client of one declared origin. Like the CLI's reader: a Pool bound
 * to that single origin (the credential can go nowhere else), no proxy environment, no
 * redirects, per-wait timeouts, a deadline for the whole read and a bounded body. Each call
 * carries the caller's credential in its own Authorization header and can be aborted
 * (Disconnect, a newer generation).
 */
class ToolCaller {
  private readonly pool: Pool;

  constructor(origin: string) {
    this.pool = new Pool(origin, {
      connections: 8,
      connect: { timeout: TIMEOUT_MS },
      headersTimeout: TIMEOUT_MS,
      bodyTimeout: TIMEOUT_MS,
    });
  }

  protected async call(
    credential: string,
    name: string,
    args: FilterArgs,
    maxBytes: number,
    signal: AbortSignal,
  ): Promise<ToolCall> {
    const deadline = AbortSignal.timeout(READ_DEADLINE_MS);
    const either = AbortSignal.any([signal, deadline]);
    // Cut by the caller (Disconnect, a newer generation): aborted; by the deadline: a timeout.
    const cut = (err: unknown): ToolCall =>
      signal.aborted ? { kind: 'aborted' } : deadline.aborted ? { kind: 'failure', failure: 'timeout' } : failure(err);
    let res: Dispatcher.ResponseData;
    try {
      res = await this.pool.request({
        path: '/tools/call',
        method: 'POST',
        signal: either,
        headers: {
          authorization: `Bearer ${credential}`,
          'content-type': 'application/json',
          accept: 'application/json',
          'user-agent': `svc-serving-dashboard/${PACKAGE_VERSION}`,
        },
        body: JSON.stringify({ name, arguments: args }),
      });
    } catch (err) {
      return cut(err);
    }
    const status = res.statusCode;
    if (status < 200 || status > 299) {
      // Never read an error body: its text could carry anything.
      discard(res.body);
      return { kind: 'failure', failure: statusFailure(status) };
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxBytes) {
          discard(res.body);
          return { kind: 'failure', failure: 'oversized' };
        }
        chunks.push(chunk);
      }
    } catch (err) {
      return cut(err);
    }
    return { kind: 'body', data: Buffer.concat(chunks) };
  }

  async close(): Promise<void> {
    await this.pool.destroy().catch(() => undefined);
  }
}

/** The dashboard's one client of the declared controller (`node_workloads`). */
export class ControllerReader extends ToolCaller {
  constructor(
    origin: string,
    private readonly expectedNode: string,
  ) {
    super(origin);
  }

  async read(credential: string, args: FilterArgs, signal: AbortSignal): Promise<ControllerRead> {
    const r = await this.call(credential, 'node_workloads', args, MAX_BODY_BYTES, signal);
    if (r.kind !== 'body') return r;
    // The fleet's checks of a node's answer: schema, identity (a different node is never
    // shown as ours), all six sources in order, records of that host and owner, counts that
    // add up, and a status no more hopeful than its sources support.
    const c = classifyAnswer(this.expectedNode, { kind: 'reply', data: r.data }, resolveFilters(args));
    if (typeof c !== 'string') return { kind: 'result', result: c };
    return { kind: 'failure', failure: c === 'wrong-identity' ? 'wrong-identity' : 'malformed' };
  }
}

export type FleetRead =
  | { readonly kind: 'result'; readonly result: FleetResult }
  | { readonly kind: 'failure'; readonly failure: ReadFailure | 'not-declared' }
  | { readonly kind: 'aborted' };

/**
 * The dashboard's one client of the declared fleet controller (`fleet_workloads`, decision
 * 0078). The answer is held to the checks `fleet workloads --expected-node` makes
 * (holdFleetFor): the expected node among the declared ones, then the fleet's own checks.
 */
export class FleetReader extends ToolCaller {
  constructor(
    origin: string,
    private readonly expectedNode: string,
  ) {
    super(origin);
  }

  async read(credential: string, args: FilterArgs, signal: AbortSignal): Promise<FleetRead> {
    const r = await this.call(credential, 'fleet_workloads', args, MAX_FLEET_BODY_BYTES, signal);
    if (r.kind !== 'body') return r;
    let body: unknown;
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(r.data);
      body = JSON.parse(text);
      // A member named twice: JSON.parse kept the last copy, another reader may keep the first.
      if (hasDuplicateKey(text, body)) return { kind: 'failure', failure: 'malformed' };
    } catch {
      return { kind: 'failure', failure: 'malformed' };
    }
    const held = holdFleetFor(body, this.expectedNode, resolveFilters(args));
    if (typeof held !== 'string') return { kind: 'result', result: held };
    return { kind: 'failure', failure: held === 'not-declared' ? 'not-declared' : held };
  }
}

/** Drops a body unread. undici reports a destroyed unfinished body as an 'error' event, which would be uncaught. */
function discard(body: Dispatcher.ResponseData['body']): void {
  body.on('error', () => undefined);
  body.destroy();
}

function statusFailure(status: number): ReadFailure {
  if (status >= 300 && status <= 399) return 'redirect';
  if (status === 401) return 'controller-unauthenticated';
  if (status === 403) return 'controller-forbidden';
  if (status === 404 || status === 405) return 'not-served';
  if (status >= 500) return 'failed';
  return 'refused';
}

const TIMEOUT_CODES: ReadonlySet<string> = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function failure(err: unknown): { readonly kind: 'failure'; readonly failure: ReadFailure } {
  const code = (err as { code?: unknown } | null)?.code;
  return { kind: 'failure', failure: typeof code === 'string' && TIMEOUT_CODES.has(code) ? 'timeout' : 'unreachable' };
}

/**
 * The node as the page shows it when the controller could not be read: `unavailable`, no
 * records, count unknown, with the fleet result's condition vocabulary. Never an empty,
 * idle-looking inventory.
 */
export function unavailableNode(expectedNode: string, f: ReadFailure, collectedAt: string): NodeResult {
  const condition =
    f === 'wrong-identity'
      ? 'wrong-identity'
      : f === 'malformed' || f === 'oversized'
        ? 'malformed'
        : f === 'not-served'
          ? 'incompatible'
          : 'unreachable';
  return {
    schema: 'svc-workloads/v1',
    expected_host: expectedNode,
    status: 'unavailable',
    collected_at: collectedAt,
    sources: [],
    truncation: { returned: 0, omitted: null },
    condition,
  };
}
