import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';
import type { BenchmarkStart } from './commands.js';

export interface BenchmarkSummary {
  requests: number;
  completed: number;
  outcomes: Record<string, number>;
  duration_ms: number;
  throughput_rps: number;
  time_to_first_content_ms: { p50: number | null; p90: number | null; p99: number | null };
}

export interface RouterTarget {
  readonly url: string;
  readonly key: string;
}

function pct(sorted: number[], q: number): number | null {
  if (sorted.length === 0) return null;
  return Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! * 10) / 10;
}

/**
 * A load run against a router alias: `requests` streaming chat requests at `concurrency`,
 * prompt of about `prompt_tokens` tokens. Reports progress after each request; keeps only
 * counts and timings (no prompt or response). Stops early when `signal` aborts.
 */
export async function runBenchmark(
  p: BenchmarkStart,
  router: RouterTarget,
  onProgress: (completed: number) => void,
  signal: AbortSignal,
): Promise<BenchmarkSummary> {
  const u = new URL(router.url);
  const pool = new Pool(u.origin, { connections: p.concurrency });
  const prompt = 'word '.repeat(p.prompt_tokens).trim();
  const body = JSON.stringify({
    model: p.alias,
    stream: true,
    max_tokens: p.max_tokens,
    messages: [{ role: 'user', content: prompt }],
  });
  const ttfc: number[] = [];
  const outcomes: Record<string, number> = {};
  let next = 0;
  let completed = 0;
  const t0 = performance.now();
  const one = async (): Promise<void> => {
    const s0 = performance.now();
    let outcome = 'error';
    try {
      const res = await pool.request({
        method: 'POST',
        path: '/v1/chat/completions',
        body,
        signal,
        headers: {
          authorization: `Bearer ${router.key}`,
          'content-type': 'application/json',
          'x-svc-workbench-run-id': 'benchmark',
        },
      });
      let first = true;
      let done = false;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        const text = chunk.toString('utf8');
        if (first && /"content":"[^"]/.test(text)) {
          ttfc.push(performance.now() - s0);
          first = false;
        }
        if (text.includes('[DONE]')) done = true;
      }
      outcome = res.statusCode === 200 ? (done ? 'success' : 'error') : res.statusCode === 429 ? 'rejected' : 'error';
    } catch {
      outcome = signal.aborted ? 'cancelled' : 'error';
    }
    outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    completed++;
    onProgress(completed);
  };
  const worker = async (): Promise<void> => {
    while (!signal.aborted && next < p.requests) {
      next++;
      await one();
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(p.concurrency, p.requests) }, worker));
  } finally {
    await pool.close().catch(() => undefined);
  }
  const duration = performance.now() - t0;
  ttfc.sort((a, b) => a - b);
  return {
    requests: p.requests,
    completed,
    outcomes,
    duration_ms: Math.round(duration),
    throughput_rps: Math.round((completed / Math.max(duration, 1)) * 1000 * 10) / 10,
    time_to_first_content_ms: { p50: pct(ttfc, 0.5), p90: pct(ttfc, 0.9), p99: pct(ttfc, 0.99) },
  };
}
