/**
 * Router memory benchmark (DESIGN.md "Quality targets": router RSS after 1,000,000 requests
 * within 50 MiB of its RSS after 10,000). The engine sim and `router serve` (decision log on,
 * default buffer size) run as their own processes; load comes from this process (autocannon,
 * 64 concurrent non-streaming requests). RSS is read from /proc after each stage of 100,000
 * requests, once the router has been idle for `--settle-ms` (10 s: V8 gives memory back
 * after a quiet spell, and the baseline gets the same wait); the highest reading is printed
 * too. Prints one table with PASS/MISS; always exits 0.
 *
 *   node build/bench/router-memory.js [--requests 1000000] [--baseline 10000] [--connections 64]
 *                                     [--settle-ms 10000]
 *   diagnostics: --buffer-size N (the router's `[server] buffer_size`)
 *
 * About 5-6 minutes for a million requests on 2 shared cores.
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { makeTarget, throughputRound } from './router-load.js';
import { runBench, type Proc } from './router-procs.js';
import { CLI, MODEL, startRouter, startSim } from './router-setup.js';

const MIB = 1024 * 1024;
/** DESIGN.md: growth from 10,000 to 1,000,000 requests. */
const TARGET_GROWTH_MIB = 50;
/** Requests per autocannon stage between RSS readings. */
const STAGE = 100_000;

interface Options {
  requests: number;
  baseline: number;
  connections: number;
  /** Diagnostics only: `[server] buffer_size` (default: the config default). */
  bufferSize: number | undefined;
  /** Idle time before each RSS reading (ms), so that V8's memory reducer has had its turn. */
  settleMs: number;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = {
    requests: 1_000_000,
    baseline: 10_000,
    connections: 64,
    bufferSize: undefined,
    settleMs: 10_000,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = Number(argv[i + 1]);
    if (!['--requests', '--baseline', '--connections', '--buffer-size', '--settle-ms'].includes(a ?? ''))
      throw new Error(`unknown argument ${a}`);
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${a} needs a positive integer`);
    i++;
    if (a === '--requests') o.requests = v;
    else if (a === '--baseline') o.baseline = v;
    else if (a === '--buffer-size') o.bufferSize = v;
    else if (a === '--settle-ms') o.settleMs = v;
    else o.connections = v;
  }
  if (o.baseline >= o.requests) throw new Error('--baseline must be below --requests');
  return o;
}

/** Resident set size of a process in bytes (VmRSS). */
function rss(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (!m) throw new Error(`no VmRSS for pid ${pid}`);
  return Number(m[1]) * 1024;
}

function dirBytes(dir: string): number {
  if (!existsSync(dir)) return 0;
  return readdirSync(dir).reduce((n, f) => n + statSync(join(dir, f)).size, 0);
}

const log = (s: string): void => void process.stderr.write(s + '\n');
const mib = (b: number): string => (b / MIB).toFixed(1);

async function run(o: Options, tmp: string): Promise<void> {
  const key = randomBytes(16).toString('hex');
  const sim = await startSim();
  const router: Proc = await startRouter(sim.url, tmp, key, { decisionLog: true, bufferSize: o.bufferSize });
  log(`engine sim ${sim.url} (pid ${sim.pid}), router ${router.url} (pid ${router.pid})`);
  const target = makeTarget('router', 'router', router.url, { authorization: `Bearer ${key}` }, router);
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'Say hello in sixteen tokens.' }],
    max_tokens: 16,
  });
  const t0 = performance.now();
  let sent = 0;
  let failed = 0;
  const drive = async (n: number): Promise<void> => {
    const s = await throughputRound(target, sim, body, o.connections, 0, n);
    sent += s.ok + s.non2xx;
    failed += s.non2xx + s.errors;
  };
  const settle = (): Promise<void> => new Promise((r) => setTimeout(r, o.settleMs));
  const readings: { requests: number; rss: number }[] = [{ requests: 0, rss: rss(router.pid) }];

  await drive(o.baseline);
  await settle();
  const base = rss(router.pid);
  readings.push({ requests: sent, rss: base });
  log(`after ${sent} requests: RSS ${mib(base)} MiB`);
  while (sent < o.requests) {
    await drive(Math.min(STAGE, o.requests - sent));
    await settle();
    const r = rss(router.pid);
    readings.push({ requests: sent, rss: r });
    log(
      `after ${sent} requests (${((performance.now() - t0) / 1000).toFixed(0)} s): RSS ${mib(r)} MiB (+${mib(r - base)} MiB)`,
    );
    if (router.exited()) throw new Error('the router exited during the run');
  }
  const end = readings[readings.length - 1]!.rss;
  const peak = Math.max(...readings.map((x) => x.rss));
  const growth = end - base;
  const pass = growth <= TARGET_GROWTH_MIB * MIB;
  const out = [
    '',
    `router memory benchmark: ${sent} requests at c=${o.connections} (non-streaming, decision log on, buffer ${o.bufferSize ?? 'default'}); node ${process.version}; ${((performance.now() - t0) / 1000).toFixed(0)} s`,
    `  RSS at start                 ${mib(readings[0]!.rss)} MiB`,
    `  RSS after ${String(o.baseline).padEnd(9)} requests  ${mib(base)} MiB`,
    `  RSS after ${String(sent).padEnd(9)} requests  ${mib(end)} MiB   (peak between stages ${mib(peak)} MiB)`,
    `  growth                       ${mib(growth)} MiB   target <= ${TARGET_GROWTH_MIB} MiB   ${pass ? 'PASS' : 'MISS'}`,
    `  decision log on disk         ${mib(dirBytes(join(tmp, 'decisions')))} MiB (rotated, bounded by its settings)`,
    `  failed requests              ${failed}`,
    '',
  ];
  process.stdout.write(out.join('\n'));
}

await runBench('router memory', async (tmp) => {
  const o = parseArgs(process.argv.slice(2));
  if (!existsSync(CLI)) throw new Error(`${CLI} is missing: run npm run build first`);
  await run(o, tmp);
});
