import { InvalidInputError } from '../errors.js';

/** Longest raw query string read; no valid query of ours comes near it. */
export const MAX_QUERY_LENGTH = 2048;

/**
 * The one way an HTTP query string of ours is split (CONTRACT.md, Filters): `name=value`
 * members joined by `&`, name and value percent-decoded alike (`%61ctive=1` is `active=1`;
 * `+` stays `+`), each name exactly one of the caller's `members` (so unknown, abbreviated
 * and differently cased names are refused), named at most once, with a non-empty value. An
 * empty query is no members. Values come back as text: what each may be is the caller's rule.
 * Thrown when: the query is over MAX_QUERY_LENGTH, a member is empty, has no `=` or no name,
 * does not decode, is not one of `members`, is repeated or has an empty value (InvalidInputError).
 */
export function splitQuery<N extends string>(rawQuery: string, members: readonly N[]): Map<N, string> {
  const out = new Map<N, string>();
  if (rawQuery === '') return out;
  if (rawQuery.length > MAX_QUERY_LENGTH) throw new InvalidInputError();
  for (const part of rawQuery.split('&')) {
    const eq = part.indexOf('=');
    if (eq <= 0) throw new InvalidInputError(); // empty segment, bare word (`act`) or missing name
    let name: string;
    let value: string;
    try {
      name = decodeURIComponent(part.slice(0, eq));
      value = decodeURIComponent(part.slice(eq + 1));
    } catch {
      throw new InvalidInputError();
    }
    const member = members.find((m) => m === name);
    if (member === undefined || out.has(member) || value === '') throw new InvalidInputError();
    out.set(member, value);
  }
  return out;
}
