/**
 * Router relay benchmark (DESIGN.md "Quality targets"): one run, interleaved rounds, the same
 * engine sim reached
 *   - directly,
 *   - through a bare node:http + undici relay (bench/bare-relay.ts, the floor for a Node relay),
 *   - through this router (`router serve`, decision log on, max_concurrency 256),
 *   - through the same router over two engine sims (`upstreams`, target `replicas`), and over
 *     two of which the first answers 503 to everything (target `failover`: each request
 *     that goes there first is failed over to the other),
 *   - through the Portkey gateway (`@portkey-ai/gateway`, loopback only),
 * each in its own process, load from this process. Prints one table with PASS/MISS per
 * target line and the raw numbers. Always exits 0.
 *
 *   node build/bench/router.js [--rounds 5] [--seconds 5] [--connections 64]
 *                              [--latency-n 2000] [--stream-n 1000] [--no-portkey] [--no-replicas]
 *   node build/bench/router.js --profile [--seconds 8]   # router under --cpu-prof, one round
 *   node build/bench/router.js --profile-bare            # the same for the bare relay
 *   diagnostics: --router-buffer-size N, --router-no-decision-log (change the router config)
 */
import { randomBytes } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, readdirSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  emptySeq,
  makeTarget,
  sequential,
  throughputRound,
  type SeqSamples,
  type Target,
  type TargetKey,
  type ThroughputSample,
} from './router-load.js';
import { cpuMs, freePort, runBench, spawnNode, stop, type Proc } from './router-procs.js';
import { summarizeCpuProfile } from './router-profile.js';
import { CLI, MODEL, startRouter, startSim } from './router-setup.js';
import { ORDER, renderReport } from './router-report.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const BARE = join(here, 'bare-relay.js');
const GATEWAY_BIN = join(root, 'node_modules', '.bin', 'gateway');
/** The router's default `[server] buffer_size`. */
const DEFAULT_BUFFER_SIZE = 10_000;
const ROUTER_WARMUP_REQUESTS = (o: { routerBufferSize: number | undefined }): number =>
  (o.routerBufferSize ?? DEFAULT_BUFFER_SIZE) + 1_000;

interface Options {
  rounds: number;
  seconds: number;
  connections: number;
  latencyN: number;
  streamN: number;
  portkey: boolean;
  /** Measure the two-replica and failover targets too. */
  replicas: boolean;
  profile: boolean;
  /** Diagnostics only: `[server] buffer_size` of the router (default: the config default). */
  routerBufferSize: number | undefined;
  /** Diagnostics only: run the router without its decision log. */
  routerDecisionLog: boolean;
  /** With --profile: profile the bare relay instead of the router (for comparison). */
  profileBare: boolean;
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = {
    rounds: 5,
    seconds: 5,
    connections: 64,
    latencyN: 2000,
    streamN: 1000,
    portkey: true,
    replicas: true,
    profile: false,
    routerBufferSize: undefined,
    routerDecisionLog: true,
    profileBare: false,
  };
  const num = (i: number): number => {
    const v = Number(argv[i + 1]);
    if (!Number.isFinite(v) || v <= 0) throw new Error(`${argv[i]} needs a positive number`);
    return v;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--rounds') o.rounds = Math.round(num(i++));
    else if (a === '--seconds') o.seconds = num(i++);
    else if (a === '--connections') o.connections = Math.round(num(i++));
    else if (a === '--latency-n') o.latencyN = Math.round(num(i++));
    else if (a === '--stream-n') o.streamN = Math.round(num(i++));
    else if (a === '--no-portkey') o.portkey = false;
    else if (a === '--no-replicas') o.replicas = false;
    else if (a === '--profile') o.profile = true;
    else if (a === '--profile-bare') {
      o.profile = true;
      o.profileBare = true;
    } else if (a === '--router-buffer-size') o.routerBufferSize = Math.round(num(i++));
    else if (a === '--router-no-decision-log') o.routerDecisionLog = false;
    else throw new Error(`unknown argument ${a}`);
  }
  return o;
}

const log = (s: string): void => {
  process.stderr.write(s + '\n');
};
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
/** How long the relays are left without traffic at the end to read their idle CPU. */
const IDLE_MS = 3_000;

function startBare(simUrl: string, nodeArgs: string[] = []): Promise<Proc> {
  return spawnNode({ name: 'bare relay', args: [...nodeArgs, BARE, simUrl], listenLine: true });
}

async function startPortkey(dir: string): Promise<Proc> {
  const port = await freePort();
  const script = realpathSync(GATEWAY_BIN);
  // It binds all interfaces; all traffic we send it is loopback.
  return spawnNode({
    name: 'portkey gateway',
    args: [script, `--port=${port}`, '--headless'],
    cwd: dir,
    pollUrl: `http://127.0.0.1:${port}/`,
    readyTimeoutMs: 45_000,
  });
}

function bodies(): { plain: string; stream: string } {
  const base = { model: MODEL, messages: [{ role: 'user', content: 'Say hello in sixteen tokens.' }], max_tokens: 16 };
  return { plain: JSON.stringify(base), stream: JSON.stringify({ ...base, stream: true }) };
}

function rotate<T>(xs: readonly T[], by: number): T[] {
  const n = xs.length;
  return xs.map((_, i) => xs[(i + by) % n]!);
}

/**
 * The replica targets: a second engine sim, a third that answers 503 to every inference
 * request (/sim/health `fail_status`), a router over the first two and one over the failing
 * one and the first.
 */
async function startReplicaTargets(
  simUrl: string,
  tmp: string,
  key: string,
  o: Options,
): Promise<{ two: Proc; failover: Proc }> {
  const [second, failing] = await Promise.all([startSim(), startSim()]);
  const res = await fetch(`${failing.url}/sim/health`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ok: true, fail_status: 503 }),
  });
  if (res.status !== 200) throw new Error('the failing engine sim refused fail_status');
  const setup = { decisionLog: o.routerDecisionLog, bufferSize: o.routerBufferSize };
  const two = await startRouter(simUrl, tmp, key, { ...setup, moreReplicas: [second.url] });
  const failover = await startRouter(failing.url, tmp, key, { ...setup, moreReplicas: [simUrl] });
  log(`replicas: router ${two.url} over two sims, router ${failover.url} over a failing sim and the first`);
  return { two, failover };
}

async function mainRun(o: Options, tmp: string): Promise<void> {
  const key = randomBytes(16).toString('hex');
  const t0 = performance.now();
  const sim = await startSim();
  log(`engine sim at ${sim.url} (pid ${sim.pid})`);
  const starting = [
    startBare(sim.url),
    startRouter(sim.url, tmp, key, { decisionLog: o.routerDecisionLog, bufferSize: o.routerBufferSize }),
    o.portkey
      ? startPortkey(tmp).catch((err: unknown) => {
          log(`portkey gateway did not start, measured without it: ${(err as Error).message}`);
          return undefined;
        })
      : Promise.resolve(undefined),
  ] as const;
  // If one fails, the others may still reject later (killed while starting): never unhandled.
  for (const p of starting) p.catch(() => undefined);
  const [bare, router, portkey] = await Promise.all(starting);
  const replicas = o.replicas ? await startReplicaTargets(sim.url, tmp, key, o) : undefined;
  log(
    `bare relay ${bare.url} (pid ${bare.pid}), router ${router.url} (pid ${router.pid})` +
      (portkey ? `, portkey ${portkey.url} (pid ${portkey.pid})` : ''),
  );

  const targets: Target[] = [
    makeTarget('direct', 'direct', sim.url, {}, undefined),
    makeTarget('bare', 'bare relay', bare.url, {}, bare),
    makeTarget('router', 'router', router.url, { authorization: `Bearer ${key}` }, router),
  ];
  if (replicas) {
    const auth = { authorization: `Bearer ${key}` };
    targets.push(makeTarget('replicas', 'router, two replicas', replicas.two.url, auth, replicas.two));
    targets.push(makeTarget('failover', 'router, one replica failing', replicas.failover.url, auth, replicas.failover));
  }
  if (portkey) {
    targets.push(
      makeTarget(
        'portkey',
        'portkey',
        portkey.url,
        {
          'x-portkey-provider': 'openai',
          'x-portkey-custom-host': `${sim.url}/v1`,
          authorization: 'Bearer sk-anything',
        },
        portkey,
      ),
    );
  }
  const { plain, stream } = bodies();
  const plainBuf = Buffer.from(plain);
  const streamBuf = Buffer.from(stream);

  // Warm-up: JIT, pools and keep-alive connections of every target. The router gets enough
  // requests to fill its in-memory ring of terminal records (buffer_size, 10,000 by
  // default), so it is measured in the steady state of a router that has been up a while.
  for (const t of targets) {
    const w = await throughputRound(
      t,
      sim,
      plain,
      o.connections,
      2,
      t.key === 'router' || t.key === 'replicas' || t.key === 'failover' ? ROUTER_WARMUP_REQUESTS(o) : undefined,
    );
    const seq = emptySeq();
    await sequential(t, plainBuf, 200, seq, false);
    const st = emptySeq();
    await sequential(t, streamBuf, 100, st, true);
    log(
      `warm-up ${t.key}: ${w.rps.toFixed(0)} req/s (${w.statusCodes}), c=1 ${seq.ok}/${seq.ok + seq.failed} ok, stream ${st.ok}/${st.ok + st.failed} ok`,
    );
  }

  const tput = new Map<TargetKey, ThroughputSample[]>(targets.map((t) => [t.key, []]));
  const lat = new Map<TargetKey, SeqSamples>(targets.map((t) => [t.key, emptySeq()]));
  const str = new Map<TargetKey, SeqSamples>(targets.map((t) => [t.key, emptySeq()]));
  const latPerRound = Math.ceil(o.latencyN / o.rounds);
  const streamPerRound = Math.ceil(o.streamN / o.rounds);
  const BLOCK = 50;

  for (let r = 0; r < o.rounds; r++) {
    const order = rotate(targets, r);
    const line: string[] = [];
    for (const t of order) {
      const s = await throughputRound(t, sim, plain, o.connections, o.seconds);
      tput.get(t.key)!.push(s);
      line.push(`${t.key} ${s.rps.toFixed(0)}/s cpu ${Number.isFinite(s.cpuPerReq) ? s.cpuPerReq.toFixed(3) : '-'}`);
      await sleep(250);
    }
    // c=1 and streaming samples in small blocks, rotating targets, so drift hits all alike.
    for (const [n, body, into, streaming] of [
      [latPerRound, plainBuf, lat, false],
      [streamPerRound, streamBuf, str, true],
    ] as const) {
      for (let done = 0; done < n; done += BLOCK) {
        for (const t of rotate(order, done / BLOCK))
          await sequential(t, body, Math.min(BLOCK, n - done), into.get(t.key)!, streaming);
      }
    }
    log(`round ${r + 1}/${o.rounds} (${((performance.now() - t0) / 1000).toFixed(0)} s): ${line.join(', ')}`);
  }

  for (const t of targets) t.agent.destroy();
  // CPU each relay burns with no traffic at all (its timers and background work).
  const idle = new Map<TargetKey, number>();
  const idleProcs: [TargetKey, Proc][] = [
    ['bare', bare],
    ['router', router],
    ...(replicas
      ? [['replicas', replicas.two] as [TargetKey, Proc], ['failover', replicas.failover] as [TargetKey, Proc]]
      : []),
    ...(portkey ? [['portkey', portkey] as [TargetKey, Proc]] : []),
  ];
  const before = idleProcs.map(([, p]) => cpuMs(p.pid));
  const i0 = performance.now();
  await sleep(IDLE_MS);
  const span = (performance.now() - i0) / 1000;
  idleProcs.forEach(([k, p], i) => idle.set(k, (cpuMs(p.pid) - before[i]!) / span));
  const report = renderReport({
    idleCpuMsPerS: idle,
    present: new Set(targets.map((t) => t.key)),
    tput,
    lat,
    stream: str,
    connections: o.connections,
    seconds: o.seconds,
    rounds: o.rounds,
  });
  process.stdout.write(
    `\nrouter relay benchmark: ${o.rounds} interleaved rounds of ${o.seconds} s at c=${o.connections}; c=1 n=${latPerRound * o.rounds}, stream n=${streamPerRound * o.rounds} per target; ` +
      `engine sim ttft 0, token delay 0, 16 tokens; node ${process.version}; ${((performance.now() - t0) / 1000).toFixed(0)} s\n` +
      `targets: ${ORDER.filter((k) => targets.some((t) => t.key === k)).join(', ')}\n\n` +
      report +
      '\n',
  );
}

async function profileRun(o: Options, tmp: string): Promise<void> {
  const key = randomBytes(16).toString('hex');
  const profDir = join(tmp, 'prof');
  mkdirSync(profDir, { recursive: true });
  const sim = await startSim();
  const prof = ['--cpu-prof', `--cpu-prof-dir=${profDir}`];
  const bare = o.profileBare;
  const proc = bare
    ? await startBare(sim.url, prof)
    : await startRouter(sim.url, tmp, key, { decisionLog: o.routerDecisionLog, bufferSize: o.routerBufferSize }, prof);
  const t = bare
    ? makeTarget('bare', 'bare relay', proc.url, {}, proc)
    : makeTarget('router', 'router', proc.url, { authorization: `Bearer ${key}` }, proc);
  const { plain } = bodies();
  const w = await throughputRound(t, sim, plain, o.connections, 2, ROUTER_WARMUP_REQUESTS(o));
  const s = await throughputRound(t, sim, plain, o.connections, o.seconds);
  t.agent.destroy();
  await stop(proc, 15_000);
  const files = readdirSync(profDir).filter((f) => f.endsWith('.cpuprofile'));
  if (files.length === 0) {
    log('no .cpuprofile was written');
    return;
  }
  const src = join(profDir, files[0]!);
  const kept = join(tmpdir(), 'svc-bench-router-last.cpuprofile');
  copyFileSync(src, kept);
  process.stdout.write(
    `${t.label} under --cpu-prof: warm-up ${w.ok + w.non2xx} requests (${w.rps.toFixed(0)} req/s), profiled round ${s.ok + s.non2xx} requests at c=${o.connections}: ` +
      `${s.rps.toFixed(0)} req/s, ${s.cpuPerReq.toFixed(3)} ms CPU/request from /proc (profiler overhead included)\n` +
      summarizeCpuProfile(kept, root) +
      `\n(profile kept at ${kept})\n`,
  );
}

await runBench('router', async (tmp) => {
  const o = parseArgs(process.argv.slice(2));
  for (const f of [CLI, BARE]) if (!existsSync(f)) throw new Error(`${f} is missing: run npm run build first`);
  if (o.portkey && !existsSync(GATEWAY_BIN)) {
    log('node_modules/.bin/gateway is missing: measuring without Portkey');
    o.portkey = false;
  }
  if (o.profile) await profileRun(o, tmp);
  else await mainRun(o, tmp);
});
