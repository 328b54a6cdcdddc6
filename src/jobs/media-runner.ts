import { open } from 'node:fs/promises';
import { extname } from 'node:path';
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

/**
 * Batch transcription through the router's audio route, one file at a time. Keeps only
 * counts and outcomes: file names, paths and transcripts never leave this function.
 */
export async function runMedia(p: MediaSubmit, router: RouterTarget, onProgress: (completed: number) => void, signal: AbortSignal): Promise<MediaSummary> {
  const outcomes: Record<string, number> = {};
  const t0 = Date.now();
  let completed = 0;
  for (const path of p.files) {
    if (signal.aborted) break;
    let outcome = 'error';
    try {
      const fh = await open(path, 'r');
      let data: Buffer;
      try {
        const st = await fh.stat();
        if (!st.isFile() || st.size > MAX_FILE_BYTES) throw new Error('not a bounded regular file');
        data = await fh.readFile();
      } finally {
        await fh.close();
      }
      const form = new FormData();
      form.set('model', p.alias);
      if (p.language) form.set('language', p.language);
      // Only the extension travels (engines sniff formats by it); never the file's name.
      form.set('file', new Blob([data]), `audio${extname(path).replace(/[^A-Za-z0-9.]/g, '').slice(0, 8)}`);
      const res = await request(`${router.url}/v1/audio/transcriptions`, {
        method: 'POST', body: form, signal, headers: { authorization: `Bearer ${router.key}`, 'x-svc-workbench-run-id': 'media' },
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
