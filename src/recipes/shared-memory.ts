import { lstatSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Where host shared memory lives. */
export const DEFAULT_SHM_DIR = '/dev/shm';
/** File names listed at most (bytes are still counted over all of them). */
export const MAX_SHM_FILES = 256;

/** Why the recipe's shared-memory files cannot be reclaimed now (fixed tokens). */
export type ShmBlockedReason = 'shm-unreadable' | 'container-running' | 'container-state-unknown' | 'foreign-owner';

export interface SharedMemoryStatus {
  readonly available: boolean;
  /** File names (never paths) under the shm directory that belong to the recipe. */
  readonly files: string[];
  readonly blocked_reasons: ShmBlockedReason[];
  /** Apparent bytes of the recipe's files that could be removed now. */
  readonly reclaimable_bytes: number;
}

/** A file belongs to recipe R when named `svc.R.<suffix>` (recipe names hold no dots). */
export function shmPrefix(recipe: string): string {
  return `svc.${recipe}.`;
}
const SUFFIX_RE = /^[A-Za-z0-9._-]{1,200}$/;

/** What the recipe's container is doing, as far as shared memory is concerned. */
export type ShmUse = 'none' | 'running' | 'unknown';

/**
 * Scans the shm directory for the recipe's files. Reclaimable: files owned by this user
 * while no container of the recipe runs. Never throws: an unreadable directory is
 * `available: false` with reason `shm-unreadable`.
 */
export function scanSharedMemory(
  dir: string,
  recipe: string,
  use: ShmUse,
  uid: number | undefined = process.getuid?.(),
): SharedMemoryStatus {
  let names: string[];
  try {
    names = readdirSync(dir);
  } catch {
    return { available: false, files: [], blocked_reasons: ['shm-unreadable'], reclaimable_bytes: 0 };
  }
  const prefix = shmPrefix(recipe);
  const files: string[] = [];
  let ownBytes = 0;
  let foreign = false;
  for (const n of names.sort()) {
    if (!n.startsWith(prefix) || !SUFFIX_RE.test(n.slice(prefix.length))) continue;
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(join(dir, n));
    } catch {
      continue; // removed while scanning
    }
    if (!st.isFile()) continue;
    if (files.length < MAX_SHM_FILES) files.push(n);
    if (uid === undefined || st.uid === uid) ownBytes += st.size;
    else foreign = true;
  }
  const blocked: ShmBlockedReason[] = [];
  if (files.length > 0 && use === 'running') blocked.push('container-running');
  if (files.length > 0 && use === 'unknown') blocked.push('container-state-unknown');
  if (foreign) blocked.push('foreign-owner');
  return { available: true, files, blocked_reasons: blocked, reclaimable_bytes: use === 'none' ? ownBytes : 0 };
}
