import { createInterface } from 'node:readline/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { SafeReader, type ReadOutcome } from './http-read.js';
import { checkOrigin } from './origin-policy.js';
import { failureFor, runReadAction, snapshotFailure } from './read-errors.js';
import { EXIT } from './run-server.js';
import { checkCredential, checkEnvName } from './settings.js';

interface BenchFlags {
  controllerUrl: string;
  authEnv: string;
  alias: string;
  requests: number;
  concurrency: number;
  promptTokens: number;
  maxTokens: number;
  yes?: boolean;
  json?: boolean;
}

const TERMINAL = new Set(['succeeded', 'failed', 'cancelled', 'expired', 'interrupted']);
const POLL_MS = 500;

function int(min: number, max: number): (v: string) => number {
  return (v) => {
    const n = /^[0-9]{1,9}$/.test(v) ? Number(v) : Number.NaN;
    if (!(n >= min && n <= max)) throw new InvalidArgumentError('out of range');
    return n;
  };
}
function alias(v: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/.test(v)) throw new InvalidArgumentError('invalid alias');
  return v;
}

function expectJson(o: ReadOutcome, okStatus: number): Record<string, unknown> {
  if (o.kind === 'json' && o.status === okStatus && o.body && typeof o.body === 'object') return o.body as Record<string, unknown>;
  if (o.kind === 'json') throw failureFor({ kind: 'status', status: o.status }, 'controllerNotServed');
  throw failureFor(o, 'controllerNotServed');
}

function bar(done: number, total: number): string {
  const width = 30;
  const filled = total > 0 ? Math.min(width, Math.round((done / total) * width)) : 0;
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${done}/${total} requests`;
}

/** `svc-serving bench run`: plan, confirm, apply, then follow the job to its end. */
export function registerBenchCommand(program: Command): void {
  program
    .command('bench')
    .description('benchmark jobs on a node controller (lifecycle commands, grant node-admin:lifecycle)')
    .command('run')
    .description('run a load benchmark against a router alias through the node controller, with progress')
    .requiredOption('--controller-url <url>', 'the node controller (http only to loopback/private IPs)')
    .requiredOption('--auth-env <ENV_NAME>', 'environment variable holding a node-admin:lifecycle credential')
    .requiredOption('--alias <alias>', 'router model alias to load', alias)
    .option('--requests <n>', 'requests to send', int(1, 1_000_000), 100)
    .option('--concurrency <n>', 'requests in flight', int(1, 1024), 4)
    .option('--prompt-tokens <n>', 'approximate prompt size', int(1, 131_072), 128)
    .option('--max-tokens <n>', 'max_tokens of each request', int(1, 131_072), 64)
    .option('--yes', 'confirm the plan without asking')
    .option('--json', 'print the final status as JSON')
    .action(async (f: BenchFlags) => {
      await runReadAction(async () => {
        const origin = checkOrigin(f.controllerUrl);
        const token = checkCredential(process.env[checkEnvName(f.authEnv)]);
        const reader = new SafeReader(origin, token, 10);
        try {
          const params = { alias: f.alias, requests: f.requests, concurrency: f.concurrency, prompt_tokens: f.promptTokens, max_tokens: f.maxTokens };
          const plan = expectJson(await reader.post('/v1/lifecycle/plan', { command: 'benchmark.start', params }), 201);
          const steps = Array.isArray(plan['plan']) ? (plan['plan'] as unknown[]).filter((x) => typeof x === 'string') : [];
          process.stderr.write(`Plan (confirm within 2 minutes):\n${steps.map((s) => `  - ${s}`).join('\n')}\n`);
          if (!f.yes) {
            if (!process.stdin.isTTY) {
              process.stderr.write('svc-serving: error: confirmation required: re-run with --yes (see svc-serving bench run --help)\n');
              process.exitCode = EXIT.usage;
              return;
            }
            const rl = createInterface({ input: process.stdin, output: process.stderr });
            const answer = (await rl.question('Proceed? [y/N] ')).trim().toLowerCase();
            rl.close();
            if (answer !== 'y' && answer !== 'yes') {
              process.stderr.write('Not started.\n');
              return;
            }
          }
          const applied = expectJson(await reader.post('/v1/lifecycle/apply', { confirmation_token: plan['confirmation_token'] }), 200);
          const jobId = applied['job_id'];
          if (typeof jobId !== 'string' || !/^bench_[0-9a-f]{24}$/.test(jobId)) throw snapshotFailure('malformed');
          const tty = process.stderr.isTTY === true;
          if (!tty) process.stderr.write(`started ${jobId}\n`);
          let status: Record<string, unknown>;
          for (;;) {
            status = expectJson(await reader.get(`/v1/lifecycle/status/${jobId}`), 200);
            const p = (status['progress'] ?? {}) as { completed?: number | null; total?: number | null };
            if (tty) process.stderr.write(`\r${bar(p.completed ?? 0, p.total ?? f.requests)}`);
            if (TERMINAL.has(String(status['state']))) break;
            await new Promise((r) => setTimeout(r, POLL_MS));
          }
          if (tty) process.stderr.write('\n');
          if (f.json) process.stdout.write(JSON.stringify(status) + '\n');
          else printSummary(jobId, status);
          if (status['state'] !== 'succeeded') process.exitCode = EXIT.failure;
        } finally {
          await reader.close();
        }
      });
    });
}

function printSummary(jobId: string, status: Record<string, unknown>): void {
  const s = (status['summary'] ?? {}) as {
    completed?: number; duration_ms?: number; throughput_rps?: number; outcomes?: Record<string, number>;
    time_to_first_content_ms?: { p50: number | null; p90: number | null; p99: number | null };
  };
  const t = s.time_to_first_content_ms;
  const lines = [
    `benchmark ${jobId}: ${String(status['state'])}`,
    `  completed        ${s.completed ?? 0} requests in ${((s.duration_ms ?? 0) / 1000).toFixed(1)} s (${s.throughput_rps ?? 0} req/s)`,
    `  first content    p50 ${t?.p50 ?? '-'} ms, p90 ${t?.p90 ?? '-'} ms, p99 ${t?.p99 ?? '-'} ms`,
    `  outcomes         ${Object.entries(s.outcomes ?? {}).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`,
  ];
  process.stdout.write(lines.join('\n') + '\n');
}
