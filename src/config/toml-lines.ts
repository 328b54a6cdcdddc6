/**
 * Where a member of a TOML document is written. smol-toml gives no positions, so the text is
 * scanned: table headers (`[a.b]`, `[[a]]`, counted so that the n-th `[[models]]` is
 * `models/n`) and `key =` lines (dotted keys too). Values are never looked at beyond the
 * opening and closing of multi-line strings, whose lines are not keys.
 */

const BARE = /^[A-Za-z0-9_-]+/;

/** The keys of a dotted key (`a."b.c".d`), or undefined when it is not one. */
function splitKey(text: string): { keys: string[]; rest: string } | undefined {
  const keys: string[] = [];
  let s = text.trimStart();
  for (;;) {
    let m: RegExpExecArray | null;
    if ((m = BARE.exec(s))) keys.push(m[0]);
    else if ((m = /^"((?:[^"\\]|\\.)*)"/.exec(s))) keys.push(unescapeBasic(m[1]!));
    else if ((m = /^'([^']*)'/.exec(s))) keys.push(m[1]!);
    else return undefined;
    s = s.slice(m[0].length).trimStart();
    if (!s.startsWith('.')) return { keys, rest: s };
    s = s.slice(1).trimStart();
  }
}

function unescapeBasic(s: string): string {
  try {
    return JSON.parse(`"${s}"`) as string;
  } catch {
    return s;
  }
}

/** Counts the multi-line string delimiters a line opens or closes (`"""`, `'''`). */
function togglesMultiline(line: string, inside: string | undefined): string | undefined {
  let state = inside;
  let i = 0;
  while (i < line.length) {
    if (state) {
      const end = line.indexOf(state, i);
      if (end < 0) return state;
      i = end + 3;
      state = undefined;
      continue;
    }
    const c = line[i]!;
    if (c === '#') return undefined;
    if (line.startsWith('"""', i) || line.startsWith("'''", i)) {
      state = line.slice(i, i + 3);
      i += 3;
      continue;
    }
    if (c === '"' || c === "'") {
      // A one-line string: skip to its end.
      const re = c === '"' ? /"(?:[^"\\]|\\.)*"/y : /'[^']*'/y;
      re.lastIndex = i;
      const m = re.exec(line);
      i = m ? i + m[0].length : line.length;
      continue;
    }
    i++;
  }
  return state;
}

/**
 * The 1-based line where `path` (member names and array indexes, as in a JSON pointer) is
 * written: the key's own line, else the line of the deepest table or key that holds it (a
 * missing key: its table's header), else 0 when nothing of it is written (a missing table).
 */
export function lineOfMember(text: string, path: readonly string[]): number {
  const arrays = new Map<string, number>();
  let table: string[] = [];
  let best = { depth: 0, line: 0 };
  let inString: string | undefined;
  const consider = (at: readonly string[], line: number): void => {
    if (at.length <= best.depth || at.length > path.length) return;
    for (let i = 0; i < at.length; i++) if (at[i] !== path[i]) return;
    best = { depth: at.length, line };
  };
  const lines = text.split(/\r?\n|\r/);
  for (let n = 0; n < lines.length; n++) {
    const raw = lines[n]!;
    if (inString) {
      inString = togglesMultiline(raw, inString);
      continue;
    }
    const line = raw.trimStart();
    const header = /^\[(\[?)/.exec(line);
    if (header) {
      const isArray = header[1] === '[';
      const parsed = splitKey(line.slice(isArray ? 2 : 1));
      if (parsed === undefined) continue;
      table = resolveTable(parsed.keys, arrays, isArray);
      consider(table, n + 1);
      continue;
    }
    const key = splitKey(line);
    if (key?.rest.startsWith('=')) consider([...table, ...key.keys], n + 1);
    inString = togglesMultiline(key ? key.rest.slice(1) : raw, undefined);
  }
  return best.line;
}

/** A table header's member path, with the current index of every array of tables on it. */
function resolveTable(keys: readonly string[], arrays: Map<string, number>, isArray: boolean): string[] {
  const out: string[] = [];
  for (let i = 0; i < keys.length; i++) {
    out.push(keys[i]!);
    const name = keys.slice(0, i + 1).join('\u0000');
    if (isArray && i === keys.length - 1) {
      const next = (arrays.get(name) ?? -1) + 1;
      arrays.set(name, next);
      // An array nested in this one starts again under each new element.
      for (const k of [...arrays.keys()]) if (k.startsWith(`${name}\u0000`)) arrays.delete(k);
      out.push(String(next));
    } else {
      const at = arrays.get(name);
      if (at !== undefined) out.push(String(at));
    }
  }
  return out;
}

/** A member path as people write it: `server.listen`, `models[1].alias`; `-` for the whole file. */
export function memberName(path: readonly string[]): string {
  if (path.length === 0) return '-';
  let s = '';
  for (const p of path) {
    if (/^\d+$/.test(p)) s += `[${p}]`;
    else s += s === '' ? quoteKey(p) : `.${quoteKey(p)}`;
  }
  return s;
}

/**
 * A key as printed. Every key of ours is lower-case snake case; any other (a quoted key, one
 * with dashes or capitals, a long one) is shown as `?`: a secret pasted where a key belongs
 * (`"sk-..." = 1`) must not be echoed, and such a key cannot forge an output line either.
 */
function quoteKey(k: string): string {
  return /^[a-z][a-z0-9_]{0,31}$/.test(k) ? k : '?';
}

/** The segments of a JSON pointer (`/models/0/alias`). */
export function pointerPath(pointer: string): string[] {
  if (pointer === '' || pointer === '/') return [];
  return pointer
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}
