import { closeSync, constants, readSync } from 'node:fs';
import { openRegularFile } from './safe-files.js';

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
  const fd = openRegularFile(path, constants.O_RDONLY);
  try {
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
