/**
 * True when some JSON object in `text` names the same member twice (`{"limit":5,"limit":6}`),
 * comparing names after unescaping (`"limit"` and `"\u006cimit"` are the same name). JSON.parse
 * keeps the last one silently; CONTRACT.md wants a repeated filter rejected, not guessed.
 * `parsed` is `JSON.parse(text)` when the caller has it (else it is parsed here).
 * Meant for text that JSON.parse accepts: on anything else the answer is false.
 *
 * How: JSON.parse keeps one member per name, so the text names more members than the parsed
 * value holds exactly when a name is repeated (a dropped copy's own members, if it held an
 * object, only widen the gap). The text's member names are counted without being read (no
 * string made, no set kept per object: a fleet reads megabytes of node answers), and the
 * parsed value's own members are counted in one walk. No recursion either way (a body nested
 * thousands deep costs no stack).
 */
export function hasDuplicateKey(text: string, parsed?: unknown): boolean {
  const named = countMemberNames(text);
  if (named < 0) return false;
  if (parsed === undefined) {
    try {
      parsed = JSON.parse(text);
    } catch {
      return false;
    }
  }
  return named > walkMembers(parsed).members;
}

/**
 * What a parsed JSON value holds that a JSON route refuses: `duplicate` (a member named twice
 * in `text`), `prototype` (a member named `__proto__`, or `constructor` holding `prototype`,
 * at any depth: what Fastify's parser refuses as prototype poisoning), else undefined.
 */
export function refusedJson(text: string, parsed: unknown): 'duplicate' | 'prototype' | undefined {
  const named = countMemberNames(text);
  const walked = walkMembers(parsed);
  if (walked.prototype) return 'prototype';
  return named > walked.members ? 'duplicate' : undefined;
}

/**
 * Where the JSON string opened by the quote at `open` closes: the next quote not escaped by an
 * odd run of backslashes, or -1. Found with indexOf, so long strings (prompts) cost a native
 * scan, not a loop per character.
 */
export function closingQuote(text: string, open: number): number {
  for (let i = text.indexOf('"', open + 1); i >= 0; i = text.indexOf('"', i + 1)) {
    let k = i - 1;
    while (text.charCodeAt(k) === 0x5c /* \ */) k--;
    if ((i - 1 - k) % 2 === 0) return i;
  }
  return -1;
}

/** Member names in JSON text: strings followed (after whitespace) by a colon. -1: not JSON text. */
function countMemberNames(text: string): number {
  let count = 0;
  const n = text.length;
  let i = text.indexOf('"');
  while (i >= 0) {
    i = closingQuote(text, i);
    if (i < 0) return -1;
    // Outside strings a colon follows only a member name.
    let j = i + 1;
    let c = text.charCodeAt(j);
    while (c === 0x20 || c === 0x09 || c === 0x0a || c === 0x0d) c = text.charCodeAt(++j);
    if (c === 0x3a /* : */) count++;
    i = j < n ? text.indexOf('"', j) : -1;
  }
  return count;
}

const hasOwn = Object.prototype.hasOwnProperty;

/** Own members of every object in a parsed JSON value, and whether one poisons a prototype. */
function walkMembers(value: unknown): { members: number; prototype: boolean } {
  let members = 0;
  let prototype = false;
  const stack: unknown[] = [value];
  while (stack.length > 0) {
    const v = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (Array.isArray(v)) {
      for (const e of v) if (e !== null && typeof e === 'object') stack.push(e);
      continue;
    }
    const o = v as Record<string, unknown>;
    if (hasOwn.call(o, '__proto__')) prototype = true;
    for (const k in o) {
      members++;
      const e = o[k];
      if (e !== null && typeof e === 'object') {
        if (k === 'constructor' && !Array.isArray(e) && hasOwn.call(e, 'prototype')) prototype = true;
        stack.push(e);
      }
    }
  }
  return { members, prototype };
}
