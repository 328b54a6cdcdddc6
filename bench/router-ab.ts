/**
 * Router CPU A/B: two or more relays loaded at the same time, CPU milliseconds per request of
 * each, and each one's ratio to the first, round by round. On a shared machine whose speed
 * drifts (this project's 2-core VMs: ±20% between two rounds of one build), relays measured
 * one after the other cannot show a 5% change; measured side by side under the same load they
 * see the same machine, and the per-round ratio is steady to a few percent.
 *
 *   node build/bench/router-ab.js [TARGET ...] [--rounds 6] [--requests 15000] [--connections 32] [--stream]
 *
 * TARGET: `.` (this checkout's router, the default first), `bare` (bench/bare-relay.ts), or
 * the root of another built checkout (its `dist/cli/main.js` runs, e.g. a `git worktree` of
 * main); append `:nolog` to run a router without its decision log, `:buf=N` for
 * `[server] buffer_size = N` (warm-up then runs past N), `:two` to route its alias to two engine sims (`upstreams`), `:prof` to run it under `node --cpu-prof` and print where its time went, `:otlp` to export its traces over
 * OTLP/HTTP (protobuf) to a receiver in this process that reads and drops them, every span
 * sampled, as a collector on the host would take them. Default: `. bare`. Every router is configured as bench/router.ts
 * configures it (decision log on, max_concurrency 256) and warmed past its ring size first.
 * `--stream`: every request asks for a streamed answer (SSE, 16 tokens, usage in the last event).
 * Reports only; exits 0 whatever it measures.
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import { copyFileSync, existsSync, mkdirSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { throughputRound, makeTarget, type Target } from './router-load.js';
import { runBench, spawnNode, stop, type Proc } from './router-procs.js';
import { summarizeCpuProfile } from './router-profile.js';
import { CLI, MODEL, startRouter, startSim } from './router-setup.js';

const here = dirname(fileURLToPath(import.meta.url));

interface Spec {
  readonly label: string;
  readonly kind: 'router' | 'bare';
  readonly cli: string;
  readonly decisionLog: boolean;
  readonly bufferSize: number | undefined;
  /** Extra node flags for the router process (`:semi=N` gives `--max-semi-space-size=N`). */
  readonly nodeArgs: string[];
  /** Export traces to the bench's OTLP receiver. */
  readonly otlp: boolean;
  /** Run under `node --cpu-prof` and print where its time went (warm-up included) after the rounds. */
  readonly prof: boolean;
  /** Route the alias to two replicas (`upstreams`: the engine sim and a second one). */
  readonly two: boolean;
}

function parseSpec(arg: string): Spec {
  // Options are the known suffixes after the last colons; the rest is the target (a path may hold `:`).
  const parts = arg.split(':');
  const opts: string[] = [];
  while (parts.length > 1 && /^(nolog|otlp|prof|two|buf=\d+|semi=\d+)$/.test(parts.at(-1)!)) opts.unshift(parts.pop()!);
  const where = parts.join(':');
  if (where === 'bare') {
    if (opts.length > 0) throw new Error(`${arg}: the bare relay takes no options`);
    return {
      label: 'bare',
      kind: 'bare',
      cli: '',
      decisionLog: false,
      bufferSize: undefined,
      nodeArgs: [],
      otlp: false,
      prof: false,
      two: false,
    };
  }
  const cli = where === '.' ? CLI : join(resolve(where), 'dist', 'cli', 'main.js');
  if (!existsSync(cli)) throw new Error(`${arg}: no built CLI at ${cli} (run npm run build there)`);
  let decisionLog = true;
  let otlp = false;
  let bufferSize: number | undefined;
  let prof = false;
  let two = false;
  const nodeArgs: string[] = [];
  for (const o of opts) {
    if (o === 'nolog') decisionLog = false;
    else if (o === 'otlp') otlp = true;
    else if (o.startsWith('semi=')) nodeArgs.push(`--max-semi-space-size=${o.slice(5)}`);
    else if (o === 'prof') prof = true;
    else if (o === 'two') two = true;
    else bufferSize = Number(o.slice(4));
  }
  if (bufferSize === 0) throw new Error(`${arg}: buf needs a positive number`);
  return { label: arg, kind: 'router', cli, decisionLog, bufferSize, nodeArgs, otlp, prof, two };
}

function parseArgs(argv: readonly string[]): {
  specs: Spec[];
  rounds: number;
  requests: number;
  connections: number;
  stream: boolean;
} {
  const out = { specs: [] as Spec[], rounds: 6, requests: 15_000, connections: 32, stream: false };
  const num = (i: number): number => {
    const v = Number(argv[i + 1]);
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${argv[i]} needs a positive whole number`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--rounds') out.rounds = num(i++);
    else if (a === '--requests') out.requests = num(i++);
    else if (a === '--connections') out.connections = num(i++);
    else if (a === '--stream') out.stream = true;
    else if (a.startsWith('--')) throw new Error(`unknown argument ${a}`);
    else out.specs.push(parseSpec(a));
  }
  if (out.specs.length === 0) out.specs.push(parseSpec('.'), parseSpec('bare'));
  if (out.specs.length < 2) throw new Error('name at least two targets to compare');
  return out;
}

/** An OTLP/HTTP receiver that reads every export whole and drops it; counts the bytes. */
async function startOtlpSink(): Promise<{ url: string; bytes: () => number; close: () => void }> {
  let bytes = 0;
  const server = createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.byteLength));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const a = server.address();
  return {
    url: `http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`,
    bytes: () => bytes,
    close: () => {
      server.close();
      server.closeAllConnections();
    },
  };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

await runBench('router-ab', async (tmp) => {
  const o = parseArgs(process.argv.slice(2));
  const key = randomBytes(16).toString('hex');
  const sim = await startSim();
  const sink = o.specs.some((s) => s.otlp) ? await startOtlpSink() : undefined;
  const sim2 = o.specs.some((s) => s.two) ? await startSim() : undefined;
  const body = JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content: 'Say hello in sixteen tokens.' }],
    max_tokens: 16,
    ...(o.stream ? { stream: true, stream_options: { include_usage: true } } : {}),
  });
  const targets: Target[] = [];
  const procs = new Map<number, Proc>();
  for (const [i, s] of o.specs.entries()) {
    let p: Proc;
    if (s.kind === 'bare')
      p = await spawnNode({ name: 'bare relay', args: [join(here, 'bare-relay.js'), sim.url], listenLine: true });
    else {
      const dir = join(tmp, `r${i}`);
      mkdirSync(dir);
      const profArgs = s.prof ? ['--cpu-prof', `--cpu-prof-dir=${join(dir, 'prof')}`] : [];
      p = await startRouter(
        sim.url,
        dir,
        key,
        {
          decisionLog: s.decisionLog,
          bufferSize: s.bufferSize,
          cli: s.cli,
          ...(s.two && sim2 ? { moreReplicas: [sim2.url] } : {}),
          ...(s.otlp && sink ? { env: { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url, OTEL_SERVICE_NAME: 'svc-bench' } } : {}),
        },
        [...s.nodeArgs, ...profArgs],
      );
      procs.set(i, p);
    }
    targets.push(
      makeTarget(
        s.kind === 'bare' ? 'bare' : 'router',
        s.label,
        p.url,
        s.kind === 'bare' ? {} : { authorization: `Bearer ${key}` },
        p,
      ),
    );
  }
  // Past the largest ring (default 10,000) so each router's ring of terminal records is full.
  const warm = Math.max(11_000, ...o.specs.map((s) => (s.bufferSize ?? 0) + 1_000));
  process.stderr.write(`warming ${targets.length} targets with ${warm} requests each\n`);
  await Promise.all(targets.map((t) => throughputRound(t, sim, body, 16, 0, warm)));
  const per: number[][] = targets.map(() => []);
  for (let r = 0; r < o.rounds; r++) {
    // Each round starts the targets' loads in another order (the one started first is favoured
    // by a few percent on a loaded 2-core machine): rotated, so every target leads as often.
    const order = targets.map((_, k) => (k + r) % targets.length);
    const started = order.map((k) => throughputRound(targets[k]!, sim, body, o.connections, 0, o.requests));
    const res = new Array<Awaited<(typeof started)[number]>>(targets.length);
    (await Promise.all(started)).forEach((x, i) => (res[order[i]!] = x));
    res.forEach((x, k) => per[k]!.push(x.cpuPerReq));
    const failed = res.some((x) => x.non2xx > 0 || x.errors > 0);
    process.stdout.write(
      `round ${r + 1}/${o.rounds}: ` +
        o.specs
          .map(
            (s, k) =>
              `${s.label} ${res[k]!.cpuPerReq.toFixed(4)} ms (${res[0]!.cpuPerReq > 0 ? (res[k]!.cpuPerReq / res[0]!.cpuPerReq).toFixed(3) : '-'}x)`,
          )
          .join('  ') +
        (failed ? '  [some requests failed]' : '') +
        '\n',
    );
  }
  process.stdout.write(
    `\nCPU ms per request, median of ${o.rounds} rounds of ${o.requests} requests at c=${o.connections} each, all targets loaded at once:\n`,
  );
  for (const [k, s] of o.specs.entries()) {
    const ratio = median(per[k]!.map((v, r) => v / Math.max(per[0]![r]!, Number.MIN_VALUE)));
    process.stdout.write(
      `  ${s.label.padEnd(40)} ${median(per[k]!).toFixed(4)} ms   ${ratio.toFixed(3)}x the first (median of per-round ratios)\n`,
    );
  }
  for (const [k, s] of o.specs.entries()) {
    const p = procs.get(k);
    if (!s.prof || p === undefined) continue;
    targets[k]!.agent.destroy();
    await stop(p, 15_000);
    const dir = join(tmp, `r${k}`, 'prof');
    const file = existsSync(dir) ? readdirSync(dir).find((f) => f.endsWith('.cpuprofile')) : undefined;
    if (file === undefined) {
      process.stdout.write(`\n${s.label}: no .cpuprofile was written\n`);
      continue;
    }
    const kept = join(tmpdir(), `svc-router-ab-${process.pid}-${k}.cpuprofile`);
    copyFileSync(join(dir, file), kept);
    process.stdout.write(
      `\n${s.label} under --cpu-prof (profile kept at ${kept}):\n${summarizeCpuProfile(kept, resolve(dirname(dirname(dirname(s.cli)))))}\n`,
    );
  }
  if (sink) {
    process.stdout.write(`OTLP receiver: ${sink.bytes()} bytes of exported spans read\n`);
    sink.close();
  }
});
