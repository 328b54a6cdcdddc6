/**
 * The fleet bench's targets (DESIGN.md "Quality targets", Fleet) and its markdown table.
 */

export interface Latency {
  readonly n: number;
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  /** The last read's summary: fleet status, failed nodes, records returned, omitted. */
  readonly last: string;
}

/** The targets that judge a run of this size, or none beyond DESIGN.md's two sizes. */
export interface Targets {
  readonly label: string;
  readonly p99Ms: number | undefined;
  readonly rssMiB: number | undefined;
}

/**
 * DESIGN.md names two sizes: 100 nodes x 120 records (p99 <= 100 ms) and 1,000 nodes x 12
 * records (p99 <= 1 s, fleet RSS <= 300 MiB). A run no larger than one of them in both
 * dimensions is held to that size's targets (a smaller fleet must do at least as well).
 */
export function targetsFor(nodes: number, records: number): Targets {
  if (nodes <= 100 && records <= 120) return { label: '100 x 120', p99Ms: 100, rssMiB: undefined };
  if (nodes <= 1000 && records <= 12) return { label: '1,000 x 12', p99Ms: 1000, rssMiB: 300 };
  return { label: 'none (larger than DESIGN.md sizes)', p99Ms: undefined, rssMiB: undefined };
}

export function percentiles(xs: readonly number[], last: string): Latency {
  const s = [...xs].sort((a, b) => a - b);
  const at = (q: number): number => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
  return { n: s.length, p50: at(0.5), p99: at(0.99), max: s[s.length - 1] ?? Number.NaN, last };
}

/** One fleet controller's figures (this build, or the `--baseline` build beside it). */
export interface FleetFigures {
  readonly name: string;
  readonly alive: Latency;
  readonly closed: Latency | undefined;
  readonly frozen: Latency | undefined;
  readonly rss: { idleMiB: number; afterMiB: number; peakMiB: number };
  readonly cpuMsPerRead: number;
}

export interface Report {
  readonly nodes: number;
  readonly records: number;
  readonly procs: number;
  readonly timeoutMs: number;
  readonly dead: number;
  readonly fleets: readonly FleetFigures[];
  readonly costs: {
    answerBytes: number;
    nodeCpuMsPerAnswer: number;
    natsCpuMsPerRead: number;
    /** The nats-server's RSS after the alive reads (every node and fleet connected). */
    natsRssMiB: number;
    parentCpuMsPerRead: number;
  };
  readonly load: { before: number; after: number };
  /** Cores, CPU model and Node version, for the dated results file. */
  readonly machine: string;
}

const f1 = (x: number): string => (Number.isFinite(x) ? x.toFixed(1) : '-');
const verdict = (ok: boolean | undefined): string => (ok === undefined ? '-' : ok ? 'PASS' : 'MISS');

/** The markdown table and the per-node costs beneath it. */
export function renderReport(r: Report): string {
  const t = targetsFor(r.nodes, r.records);
  const lines: string[] = [];
  const both = r.fleets.length > 1;
  lines.push(
    `fleet_workloads (default query, over /tools/call of a real \`fleet serve\`) on ${r.nodes} nodes x ${r.records} records, one nats-server,`,
  );
  lines.push(
    `nodes in ${r.procs} child processes (one NATS connection each), node_timeout_ms ${r.timeoutMs}; targets of size ${t.label}; load average ${r.load.before.toFixed(2)} -> ${r.load.after.toFixed(2)}`,
  );
  lines.push(`${new Date().toISOString().slice(0, 16)}Z, ${r.machine}`);
  if (both)
    lines.push(
      `${r.fleets.map((x) => x.name).join(' and ')} side by side: the same nodes, reads alternating between them (order swapped each round)`,
    );
  lines.push('');
  lines.push('| case | reads | p50 ms | p99 ms | max ms | target | result | last read |');
  lines.push('|---|---|---|---|---|---|---|---|');
  const row = (name: string, m: Latency, target: string, ok: boolean | undefined): void => {
    lines.push(
      `| ${name} | ${m.n} | ${f1(m.p50)} | ${f1(m.p99)} | ${f1(m.max)} | ${target} | ${verdict(ok)} | ${m.last} |`,
    );
  };
  const p99Target = t.p99Ms === undefined ? '-' : `p99 <= ${t.p99Ms} ms`;
  for (const x of r.fleets) {
    const who = both ? ` (${x.name})` : '';
    row(`all alive${who}`, x.alive, p99Target, t.p99Ms === undefined ? undefined : x.alive.p99 <= t.p99Ms);
    // Closed nodes have no responders: NATS says so at once, so they must cost nothing.
    if (x.closed)
      row(
        `${r.dead} closed (no responders)${who}`,
        x.closed,
        p99Target,
        t.p99Ms === undefined ? undefined : x.closed.p99 <= t.p99Ms,
      );
    // Frozen nodes cost the node timeout once when asked in parallel, `dead` times in series.
    if (x.frozen)
      row(
        `${r.dead} frozen (never answer)${who}`,
        x.frozen,
        `max < 2 x timeout (${2 * r.timeoutMs} ms)`,
        x.frozen.max < 2 * r.timeoutMs,
      );
    lines.push(
      `| fleet RSS (peak, VmHWM)${who} | - | - | - | ${f1(x.rss.peakMiB)} MiB | ${t.rssMiB === undefined ? '-' : `<= ${t.rssMiB} MiB`} | ${verdict(t.rssMiB === undefined ? undefined : x.rss.peakMiB <= t.rssMiB)} | idle ${f1(x.rss.idleMiB)}, after the alive reads ${f1(x.rss.afterMiB)} MiB |`,
    );
  }
  lines.push('');
  for (const x of r.fleets) {
    const who = both ? `${x.name}: ` : '';
    if (x.frozen)
      lines.push(
        `${who}frozen p50 / node timeout = ${(x.frozen.p50 / r.timeoutMs).toFixed(2)} (1.0 = one timeout; asked in series it would be ${r.dead}.0)`,
      );
    lines.push(
      `${who}fleet CPU ${f1(x.cpuMsPerRead)} ms/read = ${(x.cpuMsPerRead / r.nodes).toFixed(3)} ms/node answer; RSS growth idle -> peak ${f1(x.rss.peakMiB - x.rss.idleMiB)} MiB = ${(((x.rss.peakMiB - x.rss.idleMiB) * 1024) / r.nodes).toFixed(1)} KiB per node`,
    );
  }
  if (both) {
    const [a, b] = r.fleets as [FleetFigures, FleetFigures];
    lines.push(
      `${a.name} / ${b.name}: alive p50 ${(a.alive.p50 / b.alive.p50).toFixed(2)}x, p99 ${(a.alive.p99 / b.alive.p99).toFixed(2)}x, fleet CPU/read ${(a.cpuMsPerRead / b.cpuMsPerRead).toFixed(2)}x, peak RSS ${(a.rss.peakMiB / b.rss.peakMiB).toFixed(2)}x`,
    );
  }
  const c = r.costs;
  lines.push(
    `per read of ${r.nodes} nodes (alive phase${both ? ', per fleet read' : ''}): node answer ${c.answerBytes} bytes (${f1((c.answerBytes * r.nodes) / 1024)} KiB a read); ` +
      `node CPU ${c.nodeCpuMsPerAnswer.toFixed(3)} ms/answer; nats-server CPU ${f1(c.natsCpuMsPerRead)} ms/read = ${(c.natsCpuMsPerRead / r.nodes).toFixed(3)} ms/node answer, ` +
      `RSS ${f1(c.natsRssMiB)} MiB with ${r.nodes + r.fleets.length} connections; ` +
      `bench parent (HTTP client) ${f1(c.parentCpuMsPerRead)} ms/read`,
  );
  return lines.join('\n');
}
