import { constants } from 'node:fs';
import { open, realpath } from 'node:fs/promises';
import { extname, isAbsolute, join, sep } from 'node:path';
import { FormData, request } from 'undici';
import type { RouterTarget } from './benchmark-runner.js';
import type { MediaSubmit } from './commands.js';

export interface MediaSummary {
  items: number;
  completed: number;
  outcomes: Record<string, number>;
  duration_ms: number;
}

/** Largest audio file sent (the router's default body limit is larger; this bounds memory). */
const MAX_FILE_BYTES = 25 * 1024 * 1024;

/** A media file as a job names it: a path relative to the media directory, with no `..` segment, NUL or backslash. */
export function isMediaPath(p: string): boolean {
  return !isAbsolute(p) && !p.includes('\0') && !p.includes('\\') && !p.split('/').includes('..');
}

/**
 * Opens one media file: it must resolve (symbolic links followed) inside the media directory
 * (`realRoot`, itself already resolved)
 * and be a regular file of at most MAX_FILE_BYTES. Opened without blocking, so a FIFO or a
 * device cannot hold the job (or the controller's stop). Thrown when: any of that fails.
 */
async function readMediaFile(realRoot: string, rel: string): Promise<Buffer> {
  if (!isMediaPath(rel)) throw new Error('outside the media directory');
  const real = await realpath(join(realRoot, rel));
  if (!real.startsWith(realRoot + sep)) throw new Error('outside the media directory');
  const fh = await open(real, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOFOLLOW);
  try {
    const st = await fh.stat();
    if (!st.isFile() || st.size > MAX_FILE_BYTES) throw new Error('not a bounded regular file');
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}

/**
 * Batch transcription through the router's audio route, one file at a time, each read from
 * `mediaDir` only. Keeps only counts and outcomes: file names, paths and transcripts never
 * leave this function.
 */
export async function runMedia(
  p: MediaSubmit,
  mediaDir: string,
  router: RouterTarget,
  onProgress: (completed: number) => void,
  signal: AbortSignal,
): Promise<MediaSummary> {
  const outcomes: Record<string, number> = {};
  const t0 = Date.now();
  let completed = 0;
  // Resolved once per job; unresolvable, every file is an error item.
  const realRoot = await realpath(mediaDir).catch(() => undefined);
  for (const path of p.files) {
    if (signal.aborted) break;
    let outcome = 'error';
    try {
      if (realRoot === undefined) throw new Error('media directory unreadable');
      const data = await readMediaFile(realRoot, path);
      const form = new FormData();
      form.set('model', p.alias);
      if (p.language) form.set('language', p.language);
      // Only the extension travels (engines sniff formats by it); never the file's name.
      form.set(
        'file',
        new Blob([data]),
        `audio${extname(path)
          .replace(/[^A-Za-z0-9.]/g, '')
          .slice(0, 8)}`,
      );
      const res = await request(`${router.url}/v1/audio/transcriptions`, {
        method: 'POST',
        body: form,
        signal,
        headers: { authorization: `Bearer ${router.key}`, 'x-svc-workbench-run-id': 'media' },
      });
      await res.body.dump();
      outcome = res.statusCode === 200 ? 'success' : res.statusCode === 429 ? 'rejected' : 'error';
    } catch {
      outcome = signal.aborted ? 'cancelled' : 'error';
    }
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    completed++;
    onProgress(completed);
  }
  return { items: p.files.length, completed, outcomes, duration_ms: Date.now() - t0 };
}
