import { closingQuote } from './json-duplicates.js';

/**
 * Integers in the contract's JSON inputs are written as plain integers (`100`), never `1e2`
 * or `100.0`: JSON.parse reads all three as the number 100, so the filter checks alone would
 * accept over JSON what they refuse over an HTTP query or the CLI. The text decides, so each
 * number written with a fraction or an exponent is read as an object with this one member
 * instead: no integer member accepts it, and an object (unlike a string) is also refused
 * where a member takes a string or an integer (an MCP progress token of `1.5` stays invalid).
 */
const MARK_KEY = '\u0000number written with a fraction or exponent';

/** True for what withPlainIntegers put where the text wrote `1e2`, `100.0` or `1.5`. */
export function isNonIntegerNumber(v: unknown): boolean {
  return typeof v === 'object' && v !== null && Object.hasOwn(v, MARK_KEY);
}

// A JSON number token; outside strings only numbers contain digits.
const NUMBER_RE = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/g;
const MARK_JSON = `{${JSON.stringify(MARK_KEY)}:true}`;

/**
 * Where `text` (JSON that JSON.parse accepts) writes a number with a fraction or an exponent:
 * [start, end) offsets, in order. Strings are skipped (closingQuote).
 */
function fractionalNumbers(text: string): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  const n = text.length;
  let i = 0;
  while (i < n) {
    const quote = text.indexOf('"', i);
    const end = quote < 0 ? n : quote;
    // Scanned as its own slice, so that a search never runs on into the strings after it.
    const between = text.slice(i, end);
    NUMBER_RE.lastIndex = 0;
    for (let m = NUMBER_RE.exec(between); m !== null; m = NUMBER_RE.exec(between)) {
      if (m[1] !== undefined || m[2] !== undefined) out.push([i + m.index, i + m.index + m[0].length]);
    }
    if (quote < 0) break;
    const close = closingQuote(text, quote);
    if (close < 0) break;
    i = close + 1;
  }
  return out;
}

/**
 * `parsed` (JSON.parse of `text`) with every number that `text` writes with a fraction or an
 * exponent replaced by a marker object (isNonIntegerNumber); `parsed` itself when there is
 * none (the usual case: no second parse).
 */
export function withPlainIntegers(text: string, parsed: unknown): unknown {
  const spans = fractionalNumbers(text);
  if (spans.length === 0) return parsed;
  let out = '';
  let at = 0;
  for (const [start, end] of spans) {
    out += text.slice(at, start) + MARK_JSON;
    at = end;
  }
  return JSON.parse(out + text.slice(at));
}
