import { randomFillSync } from 'node:crypto';

/**
 * W3C Trace Context (`traceparent`, `tracestate`) as the router reads it from a caller and
 * passes it on to the engine. Pure: no OpenTelemetry package is loaded here, so the relay can
 * continue a caller's trace whether or not spans are exported.
 */

/** `version-traceid-parentid-flags`, lower-case hex (W3C Trace Context, level 1). */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-|$)/;
const ZERO_TRACE = '00000000000000000000000000000000';
const ZERO_SPAN = '0000000000000000';
/** One `tracestate` list member: `key=value` (simple or multi-tenant key; value of printable ASCII but `,` and `=`). */
const TRACESTATE_MEMBER =
  /^(?:[a-z][a-z0-9_\-*/]{0,255}|[a-z0-9][a-z0-9_\-*/]{0,240}@[a-z][a-z0-9_\-*/]{0,13})=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$/;
/** W3C: at most 32 list members; a `tracestate` longer than 512 characters may be dropped. */
const TRACESTATE_MAX_MEMBERS = 32;
const TRACESTATE_MAX_CHARS = 512;

/** The trace a request belongs to, as the router continues it. */
export interface RequestTrace {
  /** 32 lower-case hex digits: the caller's trace, or a new one the router began. */
  readonly traceId: string;
  /** The caller's span (its `traceparent` parent id); undefined when the router began the trace. */
  readonly parentId: string | undefined;
  /** The caller's trace flags (bit 0: sampled); 1 for a trace the router began. */
  readonly flags: number;
  /** The caller's `tracestate`, when it was well formed and named no credential. */
  readonly traceState: string | undefined;
  /** The router's own span for the request, when it makes spans (tracing on); else undefined. */
  readonly spanId: string | undefined;
  /** When the request was admitted and dispatched (epoch ms), noted only when `spanId` is set. */
  admittedAt: number | undefined;
  dispatchedAt: number | undefined;
}

/** Ids for a span the router makes itself (tracing on). */
export interface SpanIds {
  newTraceId(): string;
  newSpanId(): string;
}

/** Bytes of randomness drawn at a time for ids. */
const ID_POOL_BYTES = 4096;

/**
 * Span and trace ids from cryptographically random bytes, drawn a pool at a time (cheaper per
 * id than the SDK's generator, which draws Math.random four bytes at a time). An all-zero id
 * is invalid (W3C): its last byte becomes 1, as the SDK's generator makes it.
 */
export function randomSpanIds(): SpanIds {
  const pool = Buffer.allocUnsafe(ID_POOL_BYTES);
  let at = pool.length;
  const take = (n: number): string => {
    if (at + n > pool.length) {
      randomFillSync(pool);
      at = 0;
    }
    const start = at;
    at += n;
    let i = start;
    while (i < at && pool[i] === 0) i++;
    if (i === at) pool[at - 1] = 1;
    return pool.toString('hex', start, at);
  };
  return { newTraceId: () => take(16), newSpanId: () => take(8) };
}

/** The parts of a valid `traceparent`, or undefined (W3C: an invalid one starts a new trace). */
export function parseTraceparent(
  v: string | string[] | undefined,
): { traceId: string; parentId: string; flags: number } | undefined {
  if (typeof v !== 'string') return undefined;
  const m = TRACEPARENT.exec(v);
  if (m === null) return undefined;
  const version = m[1]!;
  // Version ff is invalid; version 00 is exactly 55 characters; a later version may carry more
  // after a dash, and is read as version 00.
  if (version === 'ff' || (version === '00' && v.length !== 55)) return undefined;
  const traceId = m[2]!;
  const parentId = m[3]!;
  if (traceId === ZERO_TRACE || parentId === ZERO_SPAN) return undefined;
  return { traceId, parentId, flags: Number.parseInt(m[4]!, 16) };
}

/**
 * A caller's `tracestate` as it may travel on: undefined when absent, over the W3C bounds,
 * not a list of `key=value` members, or when a member's value or key (or the whole text) is a
 * credential the router knows (a key pasted there goes neither upstream nor into a span).
 */
export function cleanTracestate(
  v: string | string[] | undefined,
  isCredential: (value: string) => boolean,
): string | undefined {
  // Repeated headers: node joins them with ", ", which is how W3C combines them.
  const s = Array.isArray(v) ? v.join(',') : v;
  if (s === undefined || s.length === 0 || s.length > TRACESTATE_MAX_CHARS) return undefined;
  const members: string[] = [];
  for (const raw of s.split(',')) {
    const m = raw.trim();
    if (m.length === 0) continue;
    if (!TRACESTATE_MEMBER.test(m) || namesCredential(m, isCredential)) return undefined;
    members.push(m);
  }
  if (members.length === 0 || members.length > TRACESTATE_MAX_MEMBERS) return undefined;
  return isCredential(s) ? undefined : members.join(',');
}

/**
 * True when a `key=value` member holds a credential: as its value, its key, or the tenant or
 * system of a multi-tenant key (`tenant@system`), the places a key can be pasted whole.
 */
function namesCredential(member: string, isCredential: (value: string) => boolean): boolean {
  const eq = member.indexOf('=');
  const key = member.slice(0, eq);
  const at = key.indexOf('@');
  return (
    isCredential(member.slice(eq + 1)) ||
    isCredential(key) ||
    (at >= 0 && (isCredential(key.slice(0, at)) || isCredential(key.slice(at + 1))))
  );
}

/**
 * The trace of a request: the caller's, continued, when its `traceparent` is valid; a new one
 * when the router makes spans (`ids`) and the caller sent none; else undefined (nothing to
 * continue, nothing sent upstream).
 */
export function requestTrace(
  headers: Readonly<Record<string, string | string[] | undefined>>,
  ids: SpanIds | undefined,
  isCredential: (value: string) => boolean,
): RequestTrace | undefined {
  const tp = headers['traceparent'];
  const parent = tp === undefined ? undefined : parseTraceparent(tp);
  if (parent === undefined && ids === undefined) return undefined;
  return {
    traceId: parent?.traceId ?? ids!.newTraceId(),
    parentId: parent?.parentId,
    flags: parent === undefined ? 1 : parent.flags,
    traceState: parent === undefined ? undefined : cleanTracestate(headers['tracestate'], isCredential),
    spanId: ids?.newSpanId(),
    admittedAt: undefined,
    dispatchedAt: undefined,
  };
}

/** The `traceparent` the engine gets: the router's span as parent when it makes one, else the caller's. */
export function upstreamTraceparent(t: RequestTrace): string {
  const flags = t.flags < 16 ? `0${t.flags.toString(16)}` : t.flags.toString(16);
  return `00-${t.traceId}-${t.spanId ?? t.parentId}-${flags}`;
}
