/**
 * Headers a request may carry once only. HTTP allows a field to repeat only when its value is
 * a list; these are not, and node:http keeps the first copy of each silently, so a request
 * that names its credential or body type twice would be judged on a value its sender (or a
 * proxy in between) may not have meant. Such a request is refused as invalid input instead.
 */
export function repeatsSingleHeader(raw: readonly string[]): boolean {
  return repeatedSingleHeaders(raw) !== 0;
}

/** Bits of the single-value headers named more than once. */
export const REPEATED = { authorization: 1, contentType: 2, host: 4 } as const;

/** Which single-value headers a request names more than once (a mask of REPEATED bits; 0: none). */
export function repeatedSingleHeaders(raw: readonly string[]): number {
  let seen = 0;
  let repeated = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    let bit = 0;
    // Length first: most names are ruled out without lower-casing them.
    if (name.length === 13) bit = name.toLowerCase() === 'authorization' ? REPEATED.authorization : 0;
    else if (name.length === 12) bit = name.toLowerCase() === 'content-type' ? REPEATED.contentType : 0;
    else if (name.length === 4) bit = name.toLowerCase() === 'host' ? REPEATED.host : 0;
    if (bit === 0) continue;
    if ((seen & bit) !== 0) repeated |= bit;
    seen |= bit;
  }
  return repeated;
}
