import { spawn, type ChildProcess } from 'node:child_process';
import { formatTimestamp } from '../schema/primitives.js';
import {
  NVIDIA_SMI_ARGS,
  aggregateMemory,
  parseNvidiaSmiCsv,
  type AggregateMemory,
  type GpuCard,
} from './nvidia-smi.js';

/**
 * - `pending`: no sample taken yet;
 * - `ok`: the last run of nvidia-smi produced output (possibly zero readable cards);
 * - `absent`: the binary does not exist here: "no GPU telemetry", not a failure;
 * - `failed`: it exists but the last run failed (non-zero exit, timeout, oversized output).
 */
export type GpuStatus = 'pending' | 'ok' | 'absent' | 'failed';

/** Per-card history, keyed by the observed uuid (never by index, which can be reassigned). */
export interface CardSeries {
  readonly uuid: string;
  name: string;
  index: number;
  /** Sample times in epoch seconds (uPlot's x axis unit). */
  readonly t: number[];
  readonly memory_used_mib: (number | null)[];
  readonly utilization_pct: (number | null)[];
}

export interface GpuTelemetry {
  readonly status: GpuStatus;
  readonly sampled_at: string | null;
  readonly interval_ms: number;
  readonly cards: readonly GpuCard[];
  readonly skipped_lines: number;
  readonly aggregate: AggregateMemory;
  readonly series: readonly CardSeries[];
}

export interface GpuSamplerOptions {
  /** The nvidia-smi binary: `SVC_NVIDIA_SMI` or `nvidia-smi` on PATH. */
  readonly binary: string;
  readonly intervalMs: number;
  /** Points kept per card. */
  readonly historyPoints?: number;
}

const RUN_TIMEOUT_MS = 5_000;
const MAX_OUTPUT_BYTES = 256 * 1024;

/**
 * Samples GPU cards from nvidia-smi every `intervalMs`. Telemetry is display data only: it
 * is never turned into workload records and never changes them (it has no access to them).
 * Runs never overlap: the next one is scheduled after the previous one ends.
 */
export class GpuSampler {
  private state: GpuTelemetry;
  private readonly series = new Map<string, CardSeries>();
  private readonly listeners = new Set<(t: GpuTelemetry) => void>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly historyPoints: number;

  constructor(private readonly opts: GpuSamplerOptions) {
    this.historyPoints = opts.historyPoints ?? 120;
    this.state = {
      status: 'pending',
      sampled_at: null,
      interval_ms: opts.intervalMs,
      cards: [],
      skipped_lines: 0,
      aggregate: aggregateMemory([]),
      series: [],
    };
  }

  get current(): GpuTelemetry {
    return this.state;
  }

  start(): void {
    void this.tick();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.listeners.clear();
  }

  /** Calls `fn` after every sample; returns the unsubscribe function. */
  subscribe(fn: (t: GpuTelemetry) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** A run that outlived its timeout and has not exited yet (a wedged driver can hold it). */
  private straggler: ChildProcess | undefined;

  private async tick(): Promise<void> {
    let outcome: RunOutcome;
    if (this.straggler && this.straggler.exitCode === null && this.straggler.signalCode === null) {
      // The last run is still stuck even after SIGKILL: no second one is started beside it
      // (runs never overlap), and this round is a failure, not the old cards again.
      outcome = { kind: 'failed' };
    } else {
      this.straggler = undefined;
      outcome = await runOnce(this.opts.binary, (child) => (this.straggler = child));
    }
    if (this.stopped) return;
    this.apply(outcome, Date.now());
    for (const fn of this.listeners) fn(this.state);
    this.timer = setTimeout(() => void this.tick(), this.opts.intervalMs);
    this.timer.unref();
  }

  private apply(o: RunOutcome, now: number): void {
    if (o.kind !== 'ok') {
      // The last good cards are not shown as current: a failed run is not a sample.
      this.state = {
        ...this.state,
        status: o.kind,
        sampled_at: formatTimestamp(now),
        cards: [],
        skipped_lines: 0,
        aggregate: aggregateMemory([]),
        series: [...this.series.values()],
      };
      return;
    }
    const { cards, skipped } = parseNvidiaSmiCsv(o.stdout);
    const t = Math.round(now / 100) / 10;
    for (const c of cards) {
      let s = this.series.get(c.uuid);
      if (!s)
        this.series.set(
          c.uuid,
          (s = { uuid: c.uuid, name: c.name, index: c.index, t: [], memory_used_mib: [], utilization_pct: [] }),
        );
      s.name = c.name;
      s.index = c.index;
      s.t.push(t);
      s.memory_used_mib.push(c.memory_used_mib);
      s.utilization_pct.push(c.utilization_pct);
      if (s.t.length > this.historyPoints) {
        s.t.shift();
        s.memory_used_mib.shift();
        s.utilization_pct.shift();
      }
    }
    // A card that vanished keeps its history until it ages out of the window, then goes.
    const horizon = t - (this.historyPoints * this.opts.intervalMs) / 1000;
    for (const [uuid, s] of this.series) if ((s.t.at(-1) ?? 0) < horizon) this.series.delete(uuid);
    this.state = {
      status: 'ok',
      sampled_at: formatTimestamp(now),
      interval_ms: this.opts.intervalMs,
      cards,
      skipped_lines: skipped,
      aggregate: aggregateMemory(cards),
      series: [...this.series.values()],
    };
  }
}

type RunOutcome = { kind: 'ok'; stdout: string } | { kind: 'absent' | 'failed' };

/**
 * One run of nvidia-smi; never throws, keeps no error text (it could name paths). It runs in
 * a process group of its own. At the timeout the run is over for the sampler whether or not
 * the process is gone: the group gets SIGKILL (whatever it started included), its pipes are
 * closed, and `onStuck` is handed the process, which may still not exit (uninterruptible
 * sleep in a wedged driver).
 */
function runOnce(binary: string, onStuck: (child: ChildProcess) => void): Promise<RunOutcome> {
  return new Promise((resolve) => {
    let settled = false;
    let timer: NodeJS.Timeout | undefined;
    let child: ChildProcess;
    const settle = (o: RunOutcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve(o);
    };
    try {
      child = spawn(binary, NVIDIA_SMI_ARGS, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], windowsHide: true });
    } catch {
      settle({ kind: 'failed' });
      return;
    }
    const out: Buffer[] = [];
    let size = 0;
    const give = (o: RunOutcome): void => {
      if (settled) return;
      // Whatever the run left behind goes with it (its group outlives it only by its children).
      killGroup(child);
      child.stdout?.destroy();
      child.stderr?.destroy();
      settle(o);
    };
    child.stdout!.on('data', (c: Buffer) => {
      size += c.byteLength;
      if (size > MAX_OUTPUT_BYTES) give({ kind: 'failed' });
      else out.push(c);
    });
    child.stderr!.on('data', (c: Buffer) => {
      size += c.byteLength;
      if (size > MAX_OUTPUT_BYTES) give({ kind: 'failed' });
    });
    child.on('error', (err: NodeJS.ErrnoException) => give({ kind: err.code === 'ENOENT' ? 'absent' : 'failed' }));
    child.on('close', (code) =>
      give(code === 0 ? { kind: 'ok', stdout: Buffer.concat(out).toString('utf8') } : { kind: 'failed' }),
    );
    timer = setTimeout(() => {
      onStuck(child);
      child.unref();
      give({ kind: 'failed' });
    }, RUN_TIMEOUT_MS);
    timer.unref();
  });
}

function killGroup(child: ChildProcess): void {
  try {
    if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
  } catch {
    // already gone: the process itself is tried next
  }
  try {
    child.kill('SIGKILL');
  } catch {
    // already gone
  }
}
