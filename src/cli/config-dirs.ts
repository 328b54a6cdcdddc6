import { accessSync, constants, statSync, type Stats } from 'node:fs';
import { dirname, resolve } from 'node:path';

/**
 * `config check`'s look at the directories a configuration names (decision 0070): each must
 * be a directory (or, for those the server makes at start, be makeable), readable or writable
 * as the server needs it. What only the target host can answer (a directory not there yet, a
 * user that cannot write in it) is a warning, as an unset variable is; a file where a
 * directory must be is wrong anywhere. Reasons are fixed words, never the path.
 */

/** One directory a key names: which key, and what the server does with it. */
interface DirKey {
  readonly table: string;
  readonly key: string;
  /** `write`: the server writes there, making it (and its parents) when missing; `read`: it only reads. */
  readonly need: 'write' | 'read';
  /** The key names a file; the directory is its folder (the decision log). */
  readonly fileIn?: boolean;
}

const DIR_KEYS: Readonly<Record<string, readonly DirKey[]>> = {
  router: [{ table: 'server', key: 'decision_log_path', need: 'write', fileIn: true }],
  node: [
    { table: 'node', key: 'state_dir', need: 'write' },
    { table: 'node', key: 'media_dir', need: 'read' },
    { table: 'node', key: 'recipes_dir', need: 'read' },
    { table: 'node', key: 'manifests_dir', need: 'read' },
  ],
};

export interface DirProblem {
  readonly at: string[];
  readonly reason: string;
  readonly severity: 'error' | 'warning';
}

/** The directory problems of a file of `kind` (its keys resolved from `dir`, the file's folder). */
export function directoryProblems(kind: string, plain: Record<string, unknown>, dir: string): DirProblem[] {
  const out: DirProblem[] = [];
  for (const d of DIR_KEYS[kind] ?? []) {
    const table = plain[d.table];
    const value = table && typeof table === 'object' ? (table as Record<string, unknown>)[d.key] : undefined;
    if (typeof value !== 'string' || value.length === 0) continue;
    const p = dirProblem(resolve(dir, value), d);
    if (p) out.push({ at: [d.table, d.key], ...p });
  }
  return out;
}

function statOf(path: string): Stats | NodeJS.ErrnoException {
  try {
    return statSync(path);
  } catch (err) {
    return err as NodeJS.ErrnoException;
  }
}

function can(path: string, mode: number): boolean {
  try {
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
}

/** Why the directory `path` (or, `fileIn`, the file's folder) will not serve, or undefined. */
function dirProblem(path: string, d: DirKey): Omit<DirProblem, 'at'> | undefined {
  const noun = d.fileIn ? 'a file in a directory' : 'a directory';
  const error = (reason: string) => ({ reason, severity: 'error' as const });
  const warning = (reason: string) => ({ reason, severity: 'warning' as const });
  let at = path;
  if (d.fileIn) {
    const self = statOf(path);
    if (!(self instanceof Error) && self.isDirectory()) return error('names a directory, not a file');
    at = dirname(path);
  }
  const st = statOf(at);
  if (st instanceof Error) {
    if (st.code === 'ENOTDIR') return error('names a path under a file');
    if (st.code !== 'ENOENT') return warning(`names ${noun} this user cannot reach`);
    if (d.need === 'read') return warning(`names ${noun} that does not exist here`);
    // The server makes it at start, and its missing parents: the nearest one there decides.
    let parent = dirname(at);
    for (let up = statOf(parent); ; up = statOf(parent)) {
      if (!(up instanceof Error)) {
        if (!up.isDirectory()) return error('names a path under a file');
        if (can(parent, constants.W_OK | constants.X_OK)) return undefined;
        return warning(`names ${noun} that does not exist here and cannot be made by this user`);
      }
      if (up.code === 'ENOTDIR') return error('names a path under a file');
      if (up.code !== 'ENOENT' || dirname(parent) === parent) return warning(`names ${noun} this user cannot reach`);
      parent = dirname(parent);
    }
  }
  if (!st.isDirectory()) return error(d.fileIn ? 'names a path under a file' : 'names a file, not a directory');
  if (d.need === 'write' && !can(at, constants.W_OK | constants.X_OK))
    return warning(`names ${noun} this user cannot write in`);
  if (d.need === 'read' && !can(at, constants.R_OK | constants.X_OK))
    return warning(`names ${noun} this user cannot read`);
  return undefined;
}
