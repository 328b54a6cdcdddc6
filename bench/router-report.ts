/**
 * The table of bench/router.ts: each figure per target beside its quality target
 * (DESIGN.md "Quality targets"), PASS/MISS per line, then the raw numbers.
 */
import { median, percentile, type SeqSamples, type TargetKey, type ThroughputSample } from './router-load.js';

export const ORDER: readonly TargetKey[] = ['direct', 'bare', 'router', 'replicas', 'failover', 'portkey'];

export interface Collected {
  readonly present: ReadonlySet<TargetKey>;
  readonly tput: ReadonlyMap<TargetKey, ThroughputSample[]>;
  readonly lat: ReadonlyMap<TargetKey, SeqSamples>;
  readonly stream: ReadonlyMap<TargetKey, SeqSamples>;
  readonly connections: number;
  readonly seconds: number;
  readonly rounds: number;
  /** CPU ms per second of each relay process with no traffic, after the rounds. */
  readonly idleCpuMsPerS?: ReadonlyMap<TargetKey, number>;
}

/**
 * Router quality targets, DESIGN.md revision 2 ("Quality targets"): CPU per request <= 1.5x
 * the bare relay's (it replaces the throughput ratio); added latency at c=1 <= 0.4 ms p50 and
 * <= 1.5 ms p99 over direct; time to first chunk within 0.3 ms of the bare relay; ahead of the
 * Portkey gateway by >= 8x on throughput and on CPU per request.
 */
export const GOALS = {
  cpuVsBare: 1.5,
  addedP50Ms: 0.4,
  addedP99Ms: 1.5,
  firstChunkVsBareMs: 0.3,
  portkeyThroughputX: 8,
  portkeyCpuX: 8,
  /** DESIGN.md: new router features cost <= 5% CPU per request (here: two replicas against one upstream, same build). */
  replicasCpuVsRouter: 1.05,
} as const;

interface Figures {
  rps: number;
  cpu: number;
  simCpu: number;
  latP50: number;
  latP99: number;
  latOk: number;
  latFailed: number;
  fcP50: number;
  fcP99: number;
  fcOk: number;
  fcFailed: number;
  tputFailed: number;
}

function figuresOf(c: Collected, k: TargetKey): Figures {
  const t = c.tput.get(k) ?? [];
  const l = c.lat.get(k);
  const s = c.stream.get(k);
  return {
    rps: median(t.map((x) => x.rps)),
    cpu: median(t.map((x) => x.cpuPerReq)),
    simCpu: median(t.map((x) => x.simCpuPerReq)),
    latP50: l ? percentile(l.total, 0.5) : Number.NaN,
    latP99: l ? percentile(l.total, 0.99) : Number.NaN,
    latOk: l?.ok ?? 0,
    latFailed: l?.failed ?? 0,
    fcP50: s ? percentile(s.first, 0.5) : Number.NaN,
    fcP99: s ? percentile(s.first, 0.99) : Number.NaN,
    fcOk: s?.ok ?? 0,
    fcFailed: s?.failed ?? 0,
    tputFailed: t.reduce((a, x) => a + x.non2xx + x.errors, 0),
  };
}

const f = (n: number, d = 2): string => (Number.isFinite(n) ? n.toFixed(d) : 'n/a');
const signed = (n: number, d = 2): string => (Number.isFinite(n) ? (n >= 0 ? '+' : '') + n.toFixed(d) : 'n/a');
const verdict = (ok: boolean | undefined): string => (ok === undefined ? 'n/a ' : ok ? 'PASS' : 'MISS');

function statuses(s: SeqSamples | undefined): string {
  if (!s) return '';
  return [...s.statuses.entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([k, v]) => `${k === 0 ? 'err' : k}x${v}`)
    .join(' ');
}

/** Renders the whole report (table + raw numbers) as text. */
export function renderReport(c: Collected): string {
  const keys = ORDER.filter((k) => c.present.has(k));
  const F = new Map<TargetKey, Figures>(keys.map((k) => [k, figuresOf(c, k)]));
  const get = (k: TargetKey): Figures | undefined => F.get(k);
  const d = get('direct');
  const b = get('bare');
  const r = get('router');
  const p = get('portkey');
  const col = (fn: (x: Figures, k: TargetKey) => string): string[] =>
    ORDER.map((k) => (F.has(k) ? fn(F.get(k)!, k) : 'absent'));

  const rows: { name: string; cells: string[]; goal: string; result: string }[] = [];
  const add = (name: string, cells: string[], goal = '', result = ''): void => {
    rows.push({ name, cells, goal, result });
  };
  const addedP50 = (x: Figures): number => x.latP50 - (d?.latP50 ?? Number.NaN);
  const addedP99 = (x: Figures): number => x.latP99 - (d?.latP99 ?? Number.NaN);
  const fcVsBare = (x: Figures): number => x.fcP50 - (b?.fcP50 ?? Number.NaN);
  const rpsFailNote = (x: Figures): string => (x.tputFailed > 0 ? ` (${x.tputFailed} failed)` : '');

  // (1) throughput: shown, not judged (revision 2 judges CPU per request instead)
  add(
    `req/s, c=${c.connections} non-stream (median of ${c.rounds})`,
    col((x) => f(x.rps, 0) + rpsFailNote(x)),
  );
  add(
    '  ratio to direct',
    col((x) => (d ? f(x.rps / d.rps) + 'x' : 'n/a')),
  );
  add(
    '  ratio to bare relay',
    col((x) => (b ? f(x.rps / b.rps) + 'x' : 'n/a')),
  );
  // (2) added latency at c=1
  add(
    'c=1 latency p50 (ms)',
    col((x) => f(x.latP50, 3) + (x.latFailed ? ` (${x.latFailed} failed)` : '')),
  );
  add(
    '  added p50 over direct (ms)',
    col((x, k) => (k === 'direct' ? '0' : signed(addedP50(x), 3))),
    `<= ${GOALS.addedP50Ms} ms`,
    r ? `${verdict(addedP50(r) <= GOALS.addedP50Ms)} ${signed(addedP50(r), 3)} ms` : 'n/a',
  );
  add(
    'c=1 latency p99 (ms)',
    col((x) => f(x.latP99, 3)),
  );
  add(
    '  added p99 over direct (ms)',
    col((x, k) => (k === 'direct' ? '0' : signed(addedP99(x), 3))),
    `<= ${GOALS.addedP99Ms} ms`,
    r ? `${verdict(addedP99(r) <= GOALS.addedP99Ms)} ${signed(addedP99(r), 3)} ms` : 'n/a',
  );
  // (3) first chunk
  const fcCell = (x: Figures): string =>
    x.fcOk === 0 ? `FAIL (${x.fcFailed} failed)` : f(x.fcP50, 3) + (x.fcFailed ? ` (${x.fcFailed} failed)` : '');
  add('first chunk p50, stream (ms)', col(fcCell));
  add(
    '  vs bare relay (ms)',
    col((x) => (x.fcOk === 0 ? 'n/a' : signed(fcVsBare(x), 3))),
    `<= +${GOALS.firstChunkVsBareMs} ms`,
    r ? `${verdict(r.fcOk > 0 && fcVsBare(r) <= GOALS.firstChunkVsBareMs)} ${signed(fcVsBare(r), 3)} ms` : 'n/a',
  );
  // (4) CPU per request, against the bare relay in the same run
  const cpuVsBare = r && b ? r.cpu / b.cpu : Number.NaN;
  add(
    'relay CPU per request (ms)',
    col((x, k) => (k === 'direct' ? '-' : f(x.cpu, 3))),
    `router <= ${GOALS.cpuVsBare}x bare`,
    `${verdict(Number.isFinite(cpuVsBare) ? cpuVsBare <= GOALS.cpuVsBare : undefined)} ${f(cpuVsBare)}x bare`,
  );
  add(
    '  ratio to bare relay',
    col((x, k) => (k === 'direct' || !b ? '-' : f(x.cpu / b.cpu) + 'x')),
  );
  // replicas: the same build with two upstreams, and with one of them failing (every 503 failed over)
  const rep = get('replicas');
  if (r && (rep || get('failover')))
    add(
      '  CPU/request vs router (one upstream)',
      col((x, k) => (k === 'replicas' || k === 'failover' ? `${f(x.cpu / r.cpu)}x` : '')),
      `replicas <= ${GOALS.replicasCpuVsRouter}x router`,
      rep
        ? `${verdict(rep.cpu / r.cpu <= GOALS.replicasCpuVsRouter)} ${f(rep.cpu / r.cpu)}x (failover: not judged)`
        : 'n/a',
    );
  // ahead of Portkey by a factor, on throughput and CPU per request
  if (r && p) {
    const tputX = r.rps / p.rps;
    const cpuX = p.cpu / r.cpu;
    add(
      'Portkey: router req/s over its',
      [],
      `>= ${GOALS.portkeyThroughputX}x`,
      `${verdict(Number.isFinite(tputX) ? tputX >= GOALS.portkeyThroughputX : undefined)} ${f(tputX, 1)}x (${f(r.rps, 0)} vs ${f(p.rps, 0)})`,
    );
    add(
      'Portkey: its CPU/request over router',
      [],
      `>= ${GOALS.portkeyCpuX}x`,
      `${verdict(Number.isFinite(cpuX) ? cpuX >= GOALS.portkeyCpuX : undefined)} ${f(cpuX, 1)}x (${f(p.cpu, 3)} vs ${f(r.cpu, 3)} ms)`,
    );
    if (p.fcOk === 0)
      add('Portkey: streaming', [], '', `(not judged) portkey streaming failed (${statuses(c.stream.get('portkey'))})`);
  } else add('ahead of Portkey', [], `>= ${GOALS.portkeyThroughputX}x req/s and CPU`, 'n/a  portkey not measured');

  const w0 = Math.max(...rows.map((x) => x.name.length)) + 2;
  const wc = Math.max(12, ...rows.flatMap((x) => x.cells.map((s) => s.length + 2)));
  const wg = Math.max(...rows.map((x) => x.goal.length)) + 2;
  const lines: string[] = [];
  lines.push('figure'.padEnd(w0) + ORDER.map((k) => k.padStart(wc)).join('') + '  ' + 'target'.padEnd(wg) + 'result');
  lines.push('-'.repeat(w0 + wc * ORDER.length + 2 + wg + 24));
  for (const row of rows) {
    const cells = row.cells.length ? row.cells.map((s) => s.padStart(wc)).join('') : ''.padStart(wc * ORDER.length);
    lines.push(row.name.padEnd(w0) + cells + '  ' + row.goal.padEnd(wg) + row.result);
  }
  const pass = rows.filter((x) => x.result.startsWith('PASS')).length;
  const miss = rows.filter((x) => x.result.startsWith('MISS')).length;
  lines.push('');
  lines.push(`router: ${pass} PASS, ${miss} MISS`);

  // raw numbers
  lines.push('');
  lines.push('raw numbers');
  for (const k of keys) {
    const x = F.get(k)!;
    const t = c.tput.get(k) ?? [];
    const l = c.lat.get(k);
    const s = c.stream.get(k);
    lines.push(`  ${k}:`);
    lines.push(
      `    req/s per round: ${t.map((y) => f(y.rps, 0)).join(', ')}  -> median ${f(x.rps, 0)}; status codes: ${t.map((y) => y.statusCodes || '-').join(' | ')}${x.tputFailed ? `; failed ${x.tputFailed}` : ''}`,
    );
    if (k !== 'direct') {
      const idle = c.idleCpuMsPerS?.get(k);
      lines.push(
        `    relay CPU ms/req per round: ${t.map((y) => f(y.cpuPerReq, 3)).join(', ')}  -> median ${f(x.cpu, 3)}` +
          (idle !== undefined ? `; idle afterwards: ${f(idle, 0)} ms CPU per s` : ''),
      );
    }
    lines.push(`    engine sim CPU ms/req per round: ${t.map((y) => f(y.simCpuPerReq, 3)).join(', ')}`);
    if (l)
      lines.push(
        `    c=1 non-stream: n=${l.ok} ok, ${l.failed} failed; p50 ${f(x.latP50, 3)} ms, p90 ${f(percentile(l.total, 0.9), 3)}, p99 ${f(x.latP99, 3)}, max ${f(percentile(l.total, 1), 3)} ms`,
      );
    if (s) {
      lines.push(
        `    stream: n=${s.ok} ok, ${s.failed} failed (${statuses(s)}); first chunk p50 ${f(x.fcP50, 3)} ms, p99 ${f(x.fcP99, 3)} ms; whole stream p50 ${f(percentile(s.total, 0.5), 3)} ms`,
      );
    }
  }
  return lines.join('\n');
}
