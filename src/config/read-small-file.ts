import { closeSync, constants, existsSync, fstatSync, mkdirSync, openSync, readFileSync, readSync } from 'node:fs';
import { dirname } from 'node:path';

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
  if (!regular) throw Object.assign(new Error('not a regular file'), { code: 'ENOTREG' });
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

/** Largest configuration or policy file read (a real one is a few KiB). */
export const MAX_CONFIG_BYTES = 1024 * 1024;

/**
 * The text of a small regular file, read without blocking and without bound on nothing: a
 * FIFO, a device (`/dev/zero`) or a directory is refused at once instead of hanging the
 * process or filling its memory, and a file over `max` bytes is refused after reading at
 * most `max + 1` of them.
 * Thrown when: it cannot be opened or read, is not a regular file, or is larger than `max`.
 */
export function readSmallFile(path: string, max = MAX_CONFIG_BYTES): string {
  // Non-blocking: opening a FIFO for reading would otherwise wait for a writer.
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!fstatSync(fd).isFile()) throw Object.assign(new Error('not a regular file'), { code: 'ENOTREG' });
    const buf = Buffer.allocUnsafe(max + 1);
    let got = 0;
    for (;;) {
      const n = readSync(fd, buf, got, buf.length - got, null);
      if (n === 0) break;
      got += n;
      if (got > max) throw Object.assign(new Error('file too large'), { code: 'EFBIG' });
    }
    return buf.toString('utf8', 0, got);
  } finally {
    closeSync(fd);
  }
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
