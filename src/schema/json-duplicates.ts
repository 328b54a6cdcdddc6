/**
 * True when some JSON object in `text` names the same member twice (`{"limit":5,"limit":6}`),
 * comparing names after unescaping (`"limit"` and `"\u006cimit"` are the same name). JSON.parse
 * keeps the last one silently; CONTRACT.md wants a repeated filter rejected, not guessed.
 * Meant for text that JSON.parse accepts: on anything else the answer is not meaningful.
 * One pass, no recursion (a body nested thousands deep costs no stack).
 */
export function hasDuplicateKey(text: string): boolean {
  // One entry per open container: the member names seen so far, or null for an array.
  const stack: (Set<string> | null)[] = [];
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x7b /* { */) stack.push(new Set());
    else if (c === 0x5b /* [ */) stack.push(null);
    else if (c === 0x7d /* } */ || c === 0x5d /* ] */) stack.pop();
    else if (c === 0x22 /* " */) {
      // The closing quote: the next quote not escaped by an odd run of backslashes. Found
      // with indexOf, so long strings (prompts) cost a native scan, not a loop per character.
      const start = i;
      for (;;) {
        i = text.indexOf('"', i + 1);
        if (i < 0) return false; // not JSON text: no meaningful answer
        let k = i - 1;
        while (text.charCodeAt(k) === 0x5c /* \ */) k--;
        if ((i - 1 - k) % 2 === 0) break;
      }
      const names = stack[stack.length - 1];
      if (!names) continue;
      // A string in an object is a member name when a colon follows it.
      let j = i + 1;
      while (j < n && (text.charCodeAt(j) === 0x20 || text.charCodeAt(j) === 0x09 || text.charCodeAt(j) === 0x0a || text.charCodeAt(j) === 0x0d)) j++;
      if (text.charCodeAt(j) !== 0x3a /* : */) continue;
      const raw = text.slice(start, i + 1);
      const name = raw.includes('\\') ? (JSON.parse(raw) as string) : raw.slice(1, -1);
      if (names.has(name)) return true;
      names.add(name);
    }
  }
  return false;
}
