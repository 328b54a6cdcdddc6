import { InvalidInputError } from '../errors.js';

/*
 * NATS subject syntax, checked the same way by both bus implementations so that a subject
 * that works in process also works across hosts. Rules (stricter than nats-server on one
 * point: `*` and `>` are refused inside a token such as `a*b`, which the server would treat
 * as a literal, because such a subject is almost certainly a bug in how it was built):
 * - tokens are separated by `.`, and none may be empty (no leading, trailing or double dot);
 * - no whitespace or control characters anywhere;
 * - in a pattern, `*` is a whole token matching exactly one token, `>` a whole last token
 *   matching one or more trailing tokens; a publish subject carries no wildcard at all.
 * Matching walks both strings with indexes so that it allocates nothing per message.
 */

const DOT = 46; // .
const STAR = 42; // *
const GT = 62; // >

/** True for characters that NATS refuses in subjects: space, tab, CR, LF, other C0 and DEL. */
function isForbidden(code: number): boolean {
  return code <= 32 || code === 127;
}

/** Scans a subject or pattern; returns false on syntax errors. */
function scan(subject: string, wildcardsAllowed: boolean): boolean {
  const len = subject.length;
  if (len === 0) return false;
  let tokenStart = 0;
  for (let i = 0; i <= len; i++) {
    const code = i === len ? DOT : subject.charCodeAt(i);
    if (code === DOT) {
      const tokenLen = i - tokenStart;
      if (tokenLen === 0) return false;
      const first = subject.charCodeAt(tokenStart);
      if (tokenLen === 1 && (first === STAR || first === GT)) {
        if (!wildcardsAllowed) return false;
        // `>` swallows the rest, so anything after it could never match.
        if (first === GT && i !== len) return false;
      } else {
        for (let k = tokenStart; k < i; k++) {
          const c = subject.charCodeAt(k);
          if (c === STAR || c === GT) return false;
        }
      }
      tokenStart = i + 1;
    } else if (isForbidden(code)) {
      return false;
    }
  }
  return true;
}

/** True when `subject` is a valid publish subject (no wildcards). */
export function isValidSubject(subject: string): boolean {
  return scan(subject, false);
}

/** True when `pattern` is a valid subscription pattern (`*` and a final `>` allowed). */
export function isValidPattern(pattern: string): boolean {
  return scan(pattern, true);
}

/** True when `pattern` contains a `*` or `>` token (so it cannot be looked up exactly). */
export function hasWildcard(pattern: string): boolean {
  return pattern.includes('*') || pattern.includes('>');
}

/** Validates a publish subject. Thrown when: the subject is empty, malformed or has a wildcard (InvalidInputError). */
export function assertSubject(subject: string): void {
  if (typeof subject !== 'string' || !scan(subject, false)) throw new InvalidInputError();
}

/** Validates a subscription pattern. Thrown when: the pattern is empty or malformed (InvalidInputError). */
export function assertPattern(pattern: string): void {
  if (typeof pattern !== 'string' || !scan(pattern, true)) throw new InvalidInputError();
}

/**
 * True when the valid publish `subject` matches the valid `pattern`. Both are assumed to have
 * passed validation; the result for malformed input is unspecified (but never throws).
 */
export function subjectMatches(pattern: string, subject: string): boolean {
  const plen = pattern.length;
  const slen = subject.length;
  let i = 0; // start of the current pattern token
  let j = 0; // start of the current subject token; j > slen means the subject is used up
  for (;;) {
    if (j > slen) return false; // pattern still has a token, subject has none
    let pe = pattern.indexOf('.', i);
    if (pe === -1) pe = plen;
    let se = subject.indexOf('.', j);
    if (se === -1) se = slen;
    const ptokLen = pe - i;
    if (ptokLen === 1) {
      const c = pattern.charCodeAt(i);
      // `>` is last in a valid pattern and at least one subject token remains here.
      if (c === GT) return true;
      if (c !== STAR && (se - j !== 1 || subject.charCodeAt(j) !== c)) return false;
    } else {
      if (se - j !== ptokLen) return false;
      for (let k = 0; k < ptokLen; k++) {
        if (pattern.charCodeAt(i + k) !== subject.charCodeAt(j + k)) return false;
      }
    }
    i = pe + 1;
    j = se + 1;
    if (i > plen) return j > slen; // pattern used up: match only if the subject is too
  }
}
