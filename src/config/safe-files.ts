import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname } from 'node:path';

/*
 * Files and folders at paths an operator names (or that live beside them), handled so that
 * nothing there can hold the process: a FIFO, a device or a socket is never waited on.
 */

/**
 * Opens a path that must be a regular file without ever waiting on it: O_NONBLOCK, so a FIFO
 * with no writer (or no reader) does not hold the open, and anything but a regular file (a
 * FIFO, a device, a socket, a directory) is refused at once. `flags` are `fs.constants` O_*
 * flags. Thrown when: it cannot be opened, or is not a regular file (code ENOTREG).
 */
export function openRegularFile(path: string, flags: number, mode?: number): number {
  const fd = openSync(path, flags | constants.O_NONBLOCK, mode);
  let regular = false;
  try {
    regular = fstatSync(fd).isFile();
  } finally {
    if (!regular) closeSync(fd);
  }
  if (!regular) throw Object.assign(new Error('not a regular file'), { code: 'ENOTREG', path });
  return fd;
}

/** A regular file's whole text, never waiting on a FIFO or reading a device. Thrown when: as openRegularFile, or the read fails. */
export function readRegularFile(path: string): string {
  const fd = openRegularFile(path, constants.O_RDONLY);
  try {
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * Writes a file made anew (`wx`) with `mode`: whatever was left at `path` (a FIFO included) is
 * removed first, never opened. Thrown when: it cannot be removed or written.
 */
export function writeNewFile(path: string, text: string, mode = 0o600): void {
  rmSync(path, { force: true });
  writeFileSync(path, text, { mode, flag: 'wx' });
}

/**
 * `mkdir -p` with `mode` for folders it makes, one level at a time. Node's own recursive
 * mkdir never returns for a path under `/proc` (mkdir there fails with ENOENT although the
 * parent exists, and it retries for good): here that failure is thrown.
 * Thrown when: a level cannot be made (its error, e.g. ENOENT, EACCES, ENOTDIR).
 */
export function makeDirs(path: string, mode: number): void {
  const parent = dirname(path);
  if (parent !== path && !existsSync(parent)) makeDirs(parent, mode);
  try {
    mkdirSync(path, { mode });
  } catch (err) {
    if ((err as { code?: string }).code !== 'EEXIST') throw err;
  }
}
