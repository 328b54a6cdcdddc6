import { InvalidArgumentError } from '../errors.js';

/** Longest raw query string read; no valid query of ours comes near it. */
export const MAX_QUERY_LENGTH = 2048;

/**
 * The `invalid_params` name of a fault in the query as a whole, or in a member whose name is
 * not one of ours (the caller's text is never echoed).
 */
export const QUERY_PARAM = 'query';

const PERCENT_REASON = 'must be valid percent-encoding';

/** Thrown: `name` (a member of ours, or QUERY_PARAM) is wrong for the fixed `reason`. */
function reject(name: string, reason: string): never {
  throw new InvalidArgumentError(name, reason);
}

/**
 * The one way an HTTP query string of ours is split (CONTRACT.md, Filters): `name=value`
 * members joined by `&`, name and value percent-decoded alike (`%61ctive=1` is `active=1`;
 * `+` stays `+`), each name exactly one of the caller's `members` (so unknown, abbreviated
 * and differently cased names are refused), named at most once, with a non-empty value. An
 * empty query is no members. Values come back as text: what each may be is the caller's rule.
 * Thrown when: the query is over MAX_QUERY_LENGTH, a member is empty, has no `=` or no name,
 * does not decode, is not one of `members`, is repeated or has an empty value
 * (InvalidArgumentError naming the member; QUERY_PARAM for the query as a whole, a malformed
 * segment or a name that is not one of `members`).
 */
export function splitQuery<N extends string>(rawQuery: string, members: readonly N[]): Map<N, string> {
  const out = new Map<N, string>();
  if (rawQuery === '') return out;
  if (rawQuery.length > MAX_QUERY_LENGTH) reject(QUERY_PARAM, `must be at most ${MAX_QUERY_LENGTH} characters`);
  for (const part of rawQuery.split('&')) {
    const eq = part.indexOf('=');
    // An empty segment, a bare word (`act`) or a missing name.
    if (eq <= 0) reject(QUERY_PARAM, 'must be name=value members joined by &');
    const name = decoded(part.slice(0, eq), QUERY_PARAM);
    const member = members.find((m) => m === name);
    if (member === undefined) reject(QUERY_PARAM, `must name only ${members.join(', ')}`);
    const value = decoded(part.slice(eq + 1), member);
    if (out.has(member)) reject(member, 'must be given at most once');
    if (value === '') reject(member, 'must not be empty');
    out.set(member, value);
  }
  return out;
}

/** `text` percent-decoded. Thrown when: it does not decode (InvalidArgumentError naming `name`). */
function decoded(text: string, name: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return reject(name, PERCENT_REASON);
  }
}
