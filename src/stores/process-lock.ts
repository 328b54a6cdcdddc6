import { linkSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { makeDirs, readRegularFile } from '../config/safe-files.js';
import { dirname } from 'node:path';
import { ConfigError, pathFailure } from '../errors.js';

/**
 * When a process started, as the kernel counts it (`/proc/<pid>/stat` field 22, clock ticks
 * since boot), or undefined where that cannot be read. A pid and its start time name one
 * process: after a reboot or in a new container the same pid is another process.
 */
export function processStartTime(pid: number): string | undefined {
  return statFields(pid)?.[19];
}

/** Fields 3 onwards of `/proc/<pid>/stat` (state first), or undefined where it cannot be read. */
function statFields(pid: number): string[] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] !== undefined && /^[0-9]+$/.test(fields[19]) ? fields : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    if ((err as { code?: string }).code !== 'EPERM') return false;
  }
  // A zombie (killed, not yet reaped by its parent) still answers signal 0 but holds nothing:
  // a restart right after `kill -9` must not be refused for it.
  const state = statFields(pid)?.[0];
  return state !== 'Z' && state !== 'X';
}

/** True when the lock text (`<pid> <start time>`, or an older `<pid>`) names a running process other than this one. */
function heldByAnother(text: string): boolean {
  const [pidText, start] = text.trim().split(/\s+/);
  const pid = Number(pidText);
  if (!Number.isSafeInteger(pid) || pid <= 0 || pid === process.pid || !alive(pid)) return false;
  // A recorded start time that differs from the running process's: the pid was reused.
  if (start !== undefined) {
    const now = processStartTime(pid);
    if (now !== undefined && now !== start) return false;
  }
  return true;
}

export interface LockMessages {
  /** Another running process holds it. */
  readonly busy: string;
  /** The lock cannot be written at all. */
  readonly failed: string;
  /** Its folder cannot be made (default: `failed`). */
  readonly folder?: string;
}

/**
 * Takes `lockPath` for this process (its folder is made if missing), or throws ConfigError
 * with `busy` when another running process holds it. A lock whose process is gone, or whose
 * pid now names another process (a reboot, a new container), is taken over. Returns the
 * release function (idempotent; leaves a lock another process took meanwhile alone).
 */
export function takeProcessLock(lockPath: string, messages: LockMessages): () => void {
  try {
    makeDirs(dirname(lockPath), 0o700);
  } catch {
    throw new ConfigError(messages.folder ?? messages.failed);
  }
  const mine = `${process.pid} ${processStartTime(process.pid) ?? ''}`.trim();
  // Written whole under another name, then linked into place: a lock is never seen half
  // written (an empty lock would read as stale and be taken over by a second starter).
  const staged = `${lockPath}.${process.pid}.${Date.now()}`;
  try {
    writeFileSync(staged, mine, { mode: 0o600, flag: 'wx' });
  } catch (err) {
    rmSync(staged, { force: true });
    throw pathFailure(err, messages.failed);
  }
  try {
    return takeStaged(lockPath, staged, mine, messages);
  } finally {
    rmSync(staged, { force: true });
  }
}

const NO_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'ENOSYS']);

function takeStaged(lockPath: string, staged: string, mine: string, messages: LockMessages): () => void {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      try {
        linkSync(staged, lockPath);
      } catch (err) {
        // A file system without hard links: an exclusive create, the best it offers.
        if (!NO_LINKS.has((err as { code?: string }).code ?? '')) throw err;
        writeFileSync(lockPath, mine, { flag: 'wx', mode: 0o600 });
      }
      let released = false;
      return () => {
        if (released) return;
        released = true;
        try {
          if (readRegularFile(lockPath) === mine) rmSync(lockPath, { force: true });
        } catch {
          // already gone
        }
      };
    } catch (err) {
      if ((err as { code?: string }).code !== 'EEXIST') throw new ConfigError(messages.failed);
      let text = '';
      try {
        text = readRegularFile(lockPath);
      } catch {
        // removed meanwhile: try again
      }
      if (heldByAnother(text)) throw new ConfigError(messages.busy);
      rmSync(lockPath, { force: true }); // its process is gone: take it over
    }
  }
  throw new ConfigError(messages.failed);
}
