import { Type, type TLiteral, type TUnion } from '@sinclair/typebox';

/** Host ID grammar (SPEC.md rule 1): 1-64 ASCII chars, a letter first, then letters, digits, `_` or `-`. */
export const HOST_ID_PATTERN = '^[A-Za-z][A-Za-z0-9_-]{0,63}$';
const HOST_ID_RE = new RegExp(HOST_ID_PATTERN);

/** True when `s` is a canonical host ID. */
export function isHostId(s: unknown): s is string {
  return typeof s === 'string' && HOST_ID_RE.test(s);
}

/** RFC 3339 UTC with milliseconds, e.g. 2026-11-25T21:49:10.123Z (CONTRACT.md). */
export const TIMESTAMP_PATTERN = '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$';
const TIMESTAMP_RE = new RegExp(TIMESTAMP_PATTERN);

/** Last epoch second formatted, and its text up to the milliseconds (`2026-11-25T21:49:10.`). */
let formattedSecond = Number.NaN;
let formattedPrefix = '';
/** Latest epoch ms whose year has four digits (9999-12-31T23:59:59.999Z). */
const LAST_FOUR_DIGIT_YEAR_MS = 253_402_300_799_999;

/**
 * Formats epoch milliseconds as the contract's timestamp. The router stamps two per request,
 * mostly within the same second: the date and time up to the second are formatted once per
 * second, the milliseconds appended (the answer is `new Date(ms).toISOString()`'s, bit for bit).
 */
export function formatTimestamp(ms: number): string {
  if (!(ms >= 0 && ms <= LAST_FOUR_DIGIT_YEAR_MS)) return new Date(ms).toISOString();
  const whole = Math.trunc(ms);
  const second = Math.floor(whole / 1000);
  if (second !== formattedSecond) {
    formattedPrefix = new Date(second * 1000).toISOString().slice(0, 20);
    formattedSecond = second;
  }
  const milli = whole - second * 1000;
  return `${formattedPrefix}${milli < 10 ? '00' : milli < 100 ? '0' : ''}${milli}Z`;
}

// Batches repeat the same few timestamps across many records; remembering recent answers
// keeps the fold's decode path cheap (bounded: cleared when it grows past 4,096 entries).
const parsed = new Map<string, number>();

/** Parses a contract timestamp to epoch ms, or NaN when it is not one (including impossible dates). */
export function parseTimestamp(s: string): number {
  const hit = parsed.get(s);
  if (hit !== undefined) return hit;
  let ms = Number.NaN;
  if (TIMESTAMP_RE.test(s)) {
    ms = Date.parse(s);
    // Date.parse rolls 2026-02-30 over to March; the round trip catches that.
    if (Number.isNaN(ms) || new Date(ms).toISOString() !== s) ms = Number.NaN;
  }
  if (parsed.size >= 4096) parsed.clear();
  parsed.set(s, ms);
  return ms;
}

export const RECORD_ID_PATTERN = '^wl_[0-9a-f]{32}$';

/** Bounded non-negative integer used for counts (progress, truncation). */
export const MAX_COUNT = 1_000_000_000_000;

export const HostId = Type.String({ pattern: HOST_ID_PATTERN, minLength: 1, maxLength: 64 });
export const Timestamp = Type.String({ pattern: TIMESTAMP_PATTERN, minLength: 24, maxLength: 24 });
export const RecordId = Type.String({ pattern: RECORD_ID_PATTERN, minLength: 35, maxLength: 35 });
export const Count = Type.Integer({ minimum: 0, maximum: MAX_COUNT });

/** A TypeBox union of string literals from an `as const` tuple; its static type is the tuple's members. */
export function literalUnion<const T extends readonly string[]>(values: T): TUnion<TLiteral<T[number]>[]> {
  return Type.Union(values.map((v) => Type.Literal(v as T[number])));
}
