/**
 * bench/fleet: `fleet_workloads` as an operator reads it. One real nats-server; the fleet
 * controller is `svc-serving fleet serve` in its own process (so its RSS and CPU are its
 * own), asked over `/tools/call` from this process one read at a time; the N simulated nodes
 * live in P child processes (bench/fleet-node-host.ts: each node its own NATS connection and
 * `serveNodeWorkloads` over a real snapshot), so this process only asks and times.
 * Then again with `--dead` nodes closed (their connections gone: no responders) and frozen
 * (subscribed, never answering: each would cost a full node timeout if asked in series).
 * Prints a markdown table with DESIGN.md's targets; always exits 0.
 *
 *   node build/bench/fleet.js [--nodes 100] [--records 12 | --heavy (= 120)] [--procs 4]
 *        [--iterations 200] [--timeout-ms 500] [--dead 10] [--max-seconds 90] [--profile]
 *        [--baseline DIR]
 *
 * `--profile` runs the fleet under `node --cpu-prof` and prints where its time went.
 * `--baseline DIR` (a built checkout) starts its fleet too, on the same nodes, and alternates
 * reads between the two: a before/after measured side by side, as noise hits both alike.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { startNatsServer } from '../test/support/nats-server.js';
import { writeTestPolicy } from '../test/support/policy.js';
import type { HostCommand, HostEvent, HostStats } from './fleet-node-host.js';
import { percentiles, renderReport, type FleetFigures, type Latency } from './fleet-report.js';
import { cpuMs, runBench, spawnNode, stop, type Proc } from './router-procs.js';
import { summarizeCpuProfile } from './router-profile.js';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const CLI = join(root, 'dist', 'cli', 'main.js');
const HOST = join(here, 'fleet-node-host.js');

function flag(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return dflt;
  const v = Number(process.argv[i + 1]);
  if (!Number.isSafeInteger(v) || v < 0) throw new Error(`--${name} takes a whole number`);
  return v;
}
const NODES = flag('nodes', 100);
const RECORDS = process.argv.includes('--heavy') ? 120 : flag('records', 12);
const PROCS = Math.max(1, Math.min(NODES, flag('procs', 4)));
const ITER = flag('iterations', 200);
const TIMEOUT_MS = flag('timeout-ms', 500);
const DEAD = Math.min(NODES, flag('dead', 10));
/** Bound on each measured phase, so a slow machine still ends in minutes. */
const MAX_MS = flag('max-seconds', 90) * 1000;
const PROFILE = process.argv.includes('--profile');
const BASELINE = ((i) => (i < 0 ? undefined : resolve(process.argv[i + 1] ?? '.')))(process.argv.indexOf('--baseline'));

/** One child process hosting some nodes, driven over its IPC channel. */
class NodeHost {
  readonly #child: ChildProcess;
  #waiters: ((e: HostEvent) => void)[] = [];
  constructor(natsUrl: string, hosts: string[]) {
    this.#child = fork(HOST, [natsUrl, String(RECORDS), ...hosts], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.#child.on('message', (e: HostEvent) => this.#waiters.shift()?.(e));
    // This process may die on anything: the hosts go with it.
    process.once('exit', () => this.#child.kill('SIGKILL'));
  }
  /** The next event from the child (commands are answered in order). */
  next(timeoutMs = 180_000): Promise<HostEvent> {
    return new Promise((res, rej) => {
      const t = setTimeout(() => rej(new Error('a node host did not answer')), timeoutMs);
      this.#child.once('exit', (code) => rej(new Error(`a node host exited (${code})`)));
      this.#waiters.push((e) => {
        clearTimeout(t);
        res(e);
      });
    });
  }
  async ask(c: HostCommand): Promise<HostEvent> {
    const e = this.next();
    this.#child.send(c);
    return e;
  }
  kill(): void {
    this.#child.kill('SIGKILL');
  }
}

function rssMiB(pid: number, field: 'VmRSS' | 'VmHWM'): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

const parentCpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

await runBench('fleet', async (tmp) => {
  const load0 = loadavg()[0]!;
  // 1,000 nodes and the fleet are 1,001 clients: far below the server's default of 64K, but
  // written down so that a larger --nodes is a one-line change. Replies stay under the
  // default 1 MiB max_payload (a 120-record node answer is about 45 KiB).
  const nats = await startNatsServer({ configText: 'max_connections: 20000\n' });
  const hostsAll: NodeHost[] = [];
  try {
    const declared = Array.from({ length: NODES }, (_, i) => `node-${String(i).padStart(4, '0')}`);
    // Round robin, so the dead nodes (every NODES/DEAD-th) are spread over the hosts.
    const groups: string[][] = Array.from({ length: PROCS }, () => []);
    declared.forEach((h, i) => groups[i % PROCS]!.push(h));
    const t0 = performance.now();
    for (const g of groups) hostsAll.push(new NodeHost(nats.url, g));
    await Promise.all(hostsAll.map((h) => h.next()));
    process.stdout.write(
      `${NODES} nodes up in ${PROCS} processes after ${((performance.now() - t0) / 1000).toFixed(1)} s\n`,
    );

    const policy = writeTestPolicy(tmp);
    const cfg = join(tmp, 'fleet.toml');
    writeFileSync(
      cfg,
      [
        '[fleet]',
        'listen = "127.0.0.1:0"',
        `nats_url = "${nats.url}"`,
        'authorization_policy = "policy.toml"',
        `node_timeout_ms = ${TIMEOUT_MS}`,
        '',
        ...declared.flatMap((h) => ['[[nodes]]', `host_id = "${h}"`, '']),
      ].join('\n'),
    );
    const profDir = join(tmp, 'prof');
    if (PROFILE) mkdirSync(profDir);
    const builds = [
      { name: 'this build', cli: CLI },
      ...(BASELINE ? [{ name: 'baseline', cli: join(BASELINE, 'dist', 'cli', 'main.js') }] : []),
    ];
    const fleets: { name: string; proc: Proc; rssIdle: number }[] = [];
    for (const b of builds) {
      const proc = await spawnNode({
        name: `fleet (${b.name})`,
        args: [
          ...(PROFILE && b.cli === CLI ? ['--cpu-prof', '--cpu-prof-dir', profDir] : []),
          b.cli,
          'fleet',
          'serve',
          '--config',
          cfg,
        ],
        env: { ...process.env, ...policy.env },
        listenLine: true,
      });
      fleets.push({ name: b.name, proc, rssIdle: rssMiB(proc.pid, 'VmRSS') });
    }

    const read = async (url: string): Promise<string> => {
      const res = await fetch(`${url}/tools/call`, {
        method: 'POST',
        headers: { authorization: `Bearer ${policy.tokens.reader}`, 'content-type': 'application/json' },
        body: '{"name":"fleet_workloads","arguments":{}}',
      });
      const body = await res.text();
      if (res.status !== 200) throw new Error(`fleet answered ${res.status}: ${body.slice(0, 200)}`);
      return body;
    };
    /** `n` rounds; each reads every fleet once, in an order swapped every round. */
    const measure = async (n: number): Promise<Latency[]> => {
      const times: number[][] = fleets.map(() => []);
      const bodies: string[] = fleets.map(() => '');
      const end = performance.now() + MAX_MS;
      for (let i = 0; i < n && performance.now() < end; i++) {
        for (let k = 0; k < fleets.length; k++) {
          const j = i % 2 === 0 ? k : fleets.length - 1 - k;
          const s = performance.now();
          bodies[j] = await read(fleets[j]!.proc.url);
          times[j]!.push(performance.now() - s);
        }
      }
      // Read after the clock stops: the client's parse is not the fleet's time.
      return bodies.map((body, j) => {
        const r = JSON.parse(body) as {
          status: string;
          nodes: { condition?: string }[];
          truncation: { returned: number; omitted: number | null };
        };
        const failed = new Map<string, number>();
        for (const x of r.nodes)
          if (x.condition !== undefined) failed.set(x.condition, (failed.get(x.condition) ?? 0) + 1);
        const f = [...failed].map(([c, k]) => `${k} ${c}`).join(', ') || 'none failed';
        return percentiles(
          times[j]!,
          `${r.status}, ${f}, ${r.truncation.returned} returned, omitted ${r.truncation.omitted}`,
        );
      });
    };
    const stats = async (reset: boolean): Promise<HostStats[]> =>
      (await Promise.all(hostsAll.map((h) => h.ask({ cmd: 'stats', reset })))).map(
        (e) => (e as { stats: HostStats }).stats,
      );

    await measure(10); // warm-up: JIT, connections, the nodes' record texts
    await stats(true);
    const cpu0 = fleets.map((x) => cpuMs(x.proc.pid));
    const [nc0, pc0] = [cpuMs(nats.pid!), parentCpuMs()];
    const alive = await measure(ITER);
    const cpu1 = fleets.map((x) => cpuMs(x.proc.pid));
    const [nc1, pc1] = [cpuMs(nats.pid!), parentCpuMs()];
    const hs = await stats(false);
    const rssAfter = fleets.map((x) => rssMiB(x.proc.pid, 'VmRSS'));
    const natsRss = rssMiB(nats.pid!, 'VmRSS');
    const answers = hs.reduce((a, s) => a + s.answers, 0);

    let closed: Latency[] | undefined;
    let frozen: Latency[] | undefined;
    if (DEAD > 0) {
      const dead = Array.from({ length: DEAD }, (_, i) => declared[Math.floor((i * NODES) / DEAD)]!);
      const byHost = (cmd: 'close' | 'freeze') =>
        Promise.all(hostsAll.map((h, i) => h.ask({ cmd, hosts: dead.filter((d) => groups[i]!.includes(d)) })));
      await byHost('close');
      closed = await measure(Math.min(ITER, 50));
      await byHost('freeze');
      frozen = await measure(Math.min(ITER, 20));
    }
    const figures: FleetFigures[] = fleets.map((x, j) => ({
      name: x.name,
      alive: alive[j]!,
      closed: closed?.[j],
      frozen: frozen?.[j],
      rss: { idleMiB: x.rssIdle, afterMiB: rssAfter[j]!, peakMiB: rssMiB(x.proc.pid, 'VmHWM') },
      cpuMsPerRead: (cpu1[j]! - cpu0[j]!) / alive[j]!.n,
    }));
    for (const x of fleets) await stop(x.proc);

    const reads = alive[0]!.n * fleets.length;
    process.stdout.write(
      '\n' +
        renderReport({
          nodes: NODES,
          records: RECORDS,
          procs: PROCS,
          timeoutMs: TIMEOUT_MS,
          dead: DEAD,
          fleets: figures,
          costs: {
            answerBytes: hs[0]!.answerBytes,
            nodeCpuMsPerAnswer: hs.reduce((a, s) => a + s.cpuMs, 0) / Math.max(1, answers),
            natsCpuMsPerRead: (nc1 - nc0) / reads,
            natsRssMiB: natsRss,
            parentCpuMsPerRead: (pc1 - pc0) / reads,
          },
          load: { before: load0, after: loadavg()[0]! },
          machine: `${cpus().length} cores (${cpus()[0]?.model ?? 'unknown'}), node ${process.version}`,
        }) +
        '\n',
    );
    if (PROFILE) {
      const file = readdirSync(profDir).find((f) => f.endsWith('.cpuprofile'));
      process.stdout.write(
        file
          ? `\nfleet process profile (this build; whole run, warm-up and dead-node phases included):\n${summarizeCpuProfile(join(profDir, file), root, 20)}\n`
          : '\nno fleet profile written\n',
      );
    }
  } finally {
    for (const h of hostsAll) h.kill();
    await nats.stop();
  }
});
