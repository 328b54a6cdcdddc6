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

const DAYS_IN_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31] as const;

/** The decimal number in `s[i, i + n)`, or -1 when a character there is not an ASCII digit. */
function digits(s: string, i: number, n: number): number {
  let v = 0;
  for (let k = i; k < i + n; k++) {
    const c = s.charCodeAt(k) - 0x30;
    if (c < 0 || c > 9) return -1;
    v = v * 10 + c;
  }
  return v;
}

/**
 * Parses a contract timestamp to epoch ms, or NaN when it is not one (including impossible
 * dates: Feb 30, hour 24, second 60). Read by character and computed by arithmetic, with the
 * same answers as TIMESTAMP_PATTERN + Date.parse + a toISOString round trip (a property test
 * holds it to them): a fleet reads four timestamps per record, and twelve thousand records a
 * read have as many distinct ones, which no cache of answers can hold.
 */
export function parseTimestamp(s: string): number {
  if (s === lastParsed) return lastParsedMs;
  const ms = parseTimestampText(s);
  lastParsed = s;
  lastParsedMs = ms;
  return ms;
}

// The last answer: a record's `updated_at` and `source_timestamp`, and a batch's records,
// often carry the same instant, read one after the other by the fold (about 10 ns instead
// of 70 a call); distinct ones, as in a fleet's answers, pay one string comparison.
let lastParsed = '';
let lastParsedMs = Number.NaN;

function parseTimestampText(s: string): number {
  if (
    s.length !== 24 ||
    s.charCodeAt(4) !== 0x2d ||
    s.charCodeAt(7) !== 0x2d ||
    s.charCodeAt(10) !== 0x54 ||
    s.charCodeAt(13) !== 0x3a ||
    s.charCodeAt(16) !== 0x3a ||
    s.charCodeAt(19) !== 0x2e ||
    s.charCodeAt(23) !== 0x5a
  )
    return Number.NaN;
  const year = digits(s, 0, 4);
  const month = digits(s, 5, 2);
  const day = digits(s, 8, 2);
  const hour = digits(s, 11, 2);
  const minute = digits(s, 14, 2);
  const second = digits(s, 17, 2);
  const milli = digits(s, 20, 3);
  if (
    year < 0 ||
    milli < 0 ||
    month < 1 ||
    month > 12 ||
    day < 1 ||
    hour < 0 ||
    hour > 23 ||
    minute < 0 ||
    minute > 59 ||
    second < 0 ||
    second > 59
  )
    return Number.NaN;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  if (day > (month === 2 && leap ? 29 : DAYS_IN_MONTH[month - 1]!)) return Number.NaN;
  return daysFromCivil(year, month, day) * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli;
}

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil; exact for every year). */
function daysFromCivil(year: number, month: number, day: number): number {
  const y = month <= 2 ? year - 1 : year;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (month > 2 ? month - 3 : month + 9) + 2) / 5) + day - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146_097 + doe - 719_468;
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
