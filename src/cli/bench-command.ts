import { InvalidArgumentError, type Command } from 'commander';
import {
  appliedId,
  confirmOptions,
  lifecycleAction,
  lifecycleOptions,
  type LifecycleFlags,
  whileInterruptible,
} from './lifecycle-client.js';
import { EXIT } from './run-server.js';

interface BenchFlags extends LifecycleFlags {
  alias: string;
  requests: number;
  concurrency: number;
  promptTokens: number;
  maxTokens: number;
}

function int(min: number, max: number): (v: string) => number {
  return (v) => {
    // Canonical integers only (`01` is refused, as by the read commands).
    const n = /^(0|[1-9][0-9]{0,8})$/.test(v) ? Number(v) : Number.NaN;
    if (!(n >= min && n <= max)) throw new InvalidArgumentError('out of range');
    return n;
  };
}
function alias(v: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/.test(v)) throw new InvalidArgumentError('invalid alias');
  return v;
}

function bar(done: number, total: number): string {
  const width = 30;
  const filled = total > 0 ? Math.min(width, Math.round((done / total) * width)) : 0;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} requests`;
}

function jobId(v: string): string {
  if (!/^bench_[0-9a-f]{24}$/.test(v))
    throw new InvalidArgumentError('expected a benchmark job id (bench_ and 24 hex digits)');
  return v;
}

/** A job the controller does not have: said so, not "does not serve lifecycle commands". */
const UNKNOWN_JOB = { 404: 'no benchmark job with this id on this controller' } as const;

/** `svc-serving bench run` and `bench cancel`: plan, confirm, apply, then follow the job to its end. */
export function registerBenchCommand(program: Command): void {
  const bench = program
    .command('bench')
    .description('benchmark jobs on a node controller (lifecycle commands, grant node-admin:lifecycle)');
  const run = bench
    .command('run')
    .description('run a load benchmark against a router alias through the node controller, with progress');
  lifecycleOptions(run)
    .requiredOption('--alias <alias>', 'router model alias to load', alias)
    .option('--requests <n>', 'requests to send (1-1000000)', int(1, 1_000_000), 100)
    .option('--concurrency <n>', 'requests in flight (1-1024)', int(1, 1024), 4)
    .option('--prompt-tokens <n>', 'approximate prompt size in tokens (1-131072)', int(1, 131_072), 128)
    .option('--max-tokens <n>', 'max_tokens of each request (1-131072)', int(1, 131_072), 64);
  confirmOptions(run).action(async (f: BenchFlags) => {
    await lifecycleAction(f, async (client) => {
      const params = {
        alias: f.alias,
        requests: f.requests,
        concurrency: f.concurrency,
        prompt_tokens: f.promptTokens,
        max_tokens: f.maxTokens,
      };
      const applied = await client.planAndApply('benchmark.start', params, 'bench run');
      if (!applied) return;
      const jobId = appliedId(applied, 'job_id', /^bench_[0-9a-f]{24}$/);
      const tty = process.stderr.isTTY === true;
      if (!tty) process.stderr.write(`started ${jobId}\n`);
      const following = client.follow(jobId, (s) => {
        const p = (s['progress'] ?? {}) as { completed?: number | null; total?: number | null };
        if (tty) process.stderr.write(`\r${bar(p.completed ?? 0, p.total ?? f.requests)}`);
      });
      // Ctrl-C stops following, not the job: say so, and how to stop it.
      const status = await whileInterruptible(
        following,
        `${tty ? '\n' : ''}interrupted: ${jobId} keeps running on the controller; stop it with svc-serving bench cancel --job ${jobId} (same --controller-url and --auth-env)\n`,
      );
      if (tty) process.stderr.write('\n');
      if (f.json) process.stdout.write(JSON.stringify(status) + '\n');
      else printSummary(jobId, status);
      if (status['state'] !== 'succeeded') process.exitCode = EXIT.failure;
    });
  });

  const cancel = bench
    .command('cancel')
    .description('cancel a benchmark job: it sends no more requests, and those in flight end as cancelled');
  lifecycleOptions(cancel).requiredOption('--job <id>', 'the job to cancel (bench_ and 24 hex digits)', jobId);
  confirmOptions(cancel).action(async (f: LifecycleFlags & { job: string }) => {
    await lifecycleAction(f, async (client) => {
      const applied = await client.planAndApply(
        'benchmark.cancel',
        { job_id: f.job },
        'bench cancel',
        UNKNOWN_JOB,
        UNKNOWN_JOB,
      );
      if (!applied) return;
      // The job's own end, as its status reports it (a job that had already ended keeps its state).
      const status = await client.follow(f.job);
      if (f.json) process.stdout.write(JSON.stringify(status) + '\n');
      else {
        if (status['state'] !== 'cancelled')
          process.stdout.write(`benchmark ${f.job} had already ended: nothing to cancel\n`);
        printSummary(f.job, status);
      }
    });
  });
}

function printSummary(jobId: string, status: Record<string, unknown>): void {
  if (status['summary'] === null || status['summary'] === undefined) {
    // No summary was recorded (the job was interrupted: its controller stopped under it): its
    // progress is what is known, never a summary of zeros.
    const p = (status['progress'] ?? {}) as { completed?: unknown; total?: unknown };
    const done = typeof p.completed === 'number' ? String(p.completed) : 'an unknown number of';
    const total = typeof p.total === 'number' ? ` of ${p.total}` : '';
    process.stdout.write(
      `benchmark ${jobId}: ${String(status['state'])}\n  progress         ${done}${total} requests ended before it stopped; no summary was recorded\n`,
    );
    return;
  }
  const s = status['summary'] as {
    requests?: number;
    completed?: number;
    duration_ms?: number;
    throughput_rps?: number;
    outcomes?: Record<string, number>;
    time_to_first_content_ms?: { p50: number | null; p90: number | null; p99: number | null };
  };
  const t = s.time_to_first_content_ms;
  const finished = s.completed ?? 0;
  const succeeded = s.outcomes?.['success'] ?? 0;
  const lines = [
    `benchmark ${jobId}: ${String(status['state'])}`,
    // Finished counts every request that ended, errors included; the rate is of those.
    `  finished         ${finished}${s.requests !== undefined ? ` of ${s.requests}` : ''} requests in ${((s.duration_ms ?? 0) / 1000).toFixed(1)} s (${s.throughput_rps ?? 0} req/s), ${succeeded} succeeded`,
    `  first content    p50 ${t?.p50 ?? '-'} ms, p90 ${t?.p90 ?? '-'} ms, p99 ${t?.p99 ?? '-'} ms`,
    `  outcomes         ${
      Object.entries(s.outcomes ?? {})
        .map(([k, v]) => `${k} ${v}`)
        .join(', ') || 'none'
    }`,
  ];
  if (finished > 0 && succeeded === 0 && status['state'] !== 'cancelled') {
    lines.push(
      "  note             no request succeeded: check that the router serves this alias and the node's router key",
    );
  }
  process.stdout.write(lines.join('\n') + '\n');
}
