/**
 * In-process CPU cost of the router's tracing per request alone: the request's trace (ids
 * drawn, or a client's traceparent continued) and `emitRequestSpan` on terminal records like
 * the router's (a chat request, one in eight with a client's traceparent), the spans exported
 * over OTLP/HTTP to a receiver in a child process (its CPU is not counted), against the same
 * loop making the records alone. The SDK reads the usual OTEL_* variables (protocol,
 * sampler, OTEL_BSP_*); the endpoint is the child's.
 *
 *   node build/bench/span-cost.js [--spans 100000] [--per-tick 32] [--passes 3]
 *
 * `--per-tick`: spans made between two turns of the event loop (the router makes one per
 * request, many requests a turn under load). Prints microseconds of CPU per span (user +
 * system, this process), pass by pass, and the median. Reports only; exits 0.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import pino from 'pino';
import { emitRequestSpan, serverAddress } from '../src/telemetry/request-span.js';
import { requestTrace, type RequestTrace } from '../src/telemetry/trace-context.js';
import { startTracing } from '../src/telemetry/tracing.js';
import type { TerminalRecord } from '../src/schema/terminal-record.js';

function parseArgs(argv: readonly string[]): { spans: number; perTick: number; passes: number } {
  const out = { spans: 100_000, perTick: 32, passes: 3 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const v = Number(argv[i + 1]);
    if (!Number.isInteger(v) || v <= 0) throw new Error(`${a} needs a positive whole number`);
    if (a === '--spans') out.spans = v;
    else if (a === '--per-tick') out.perTick = v;
    else if (a === '--passes') out.passes = v;
    else throw new Error(`unknown argument ${a}`);
    i++;
  }
  return out;
}

/** A receiver in a child process that reads each export whole and answers 200. */
async function startSink(): Promise<{ url: string; stop: () => void }> {
  const code = `
    const http = require('node:http');
    const s = http.createServer((req, res) => { req.on('data', () => {}); req.on('end', () => res.end()); });
    s.listen(0, '127.0.0.1', () => console.log(s.address().port));`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once('line', resolve));
  return { url: `http://127.0.0.1:${line.trim()}`, stop: () => child.kill('SIGTERM') };
}

const iso = (ms: number): string => new Date(ms).toISOString();
let seq = 0;

/** A finished chat request's record, as the router writes it. */
function record(now: number): TerminalRecord {
  const id = `req_${(++seq).toString(16).padStart(32, '0')}`;
  return {
    request_id: id,
    model: 'sim-model',
    route: 'chat.completions',
    outcome: 'success',
    status_code: 200,
    started_at: iso(now - 3),
    finished_at: iso(now),
    latency_ms: 3,
    readiness_check_ms: null,
    admission_wait_ms: 0,
    upstream_duration_ms: 2.5,
    time_to_first_content_ms: 1.2,
    finish_reason: 'stop',
    usage: { prompt_tokens: 12, completion_tokens: 16, prompt_source: 'upstream', completion_source: 'upstream' },
    output_limit: { requested: 16, effective: 16, clamped: false },
    upstream_status: 200,
    upstream_replica: 0,
    attempts: 1,
  } as TerminalRecord;
}

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
const tick = (): Promise<void> => new Promise((r) => setImmediate(r));

const o = parseArgs(process.argv.slice(2));
const sink = await startSink();
try {
  // The SDK reads process.env itself.
  const env = process.env;
  env['OTEL_EXPORTER_OTLP_ENDPOINT'] = sink.url;
  env['OTEL_SERVICE_NAME'] = 'svc-bench';
  const tracing = await startTracing(pino({ level: 'warn' }), env);
  if (tracing === undefined) throw new Error('tracing did not start');
  const server = serverAddress('http://127.0.0.1:8000');
  const parent = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };

  /** One pass: `spans` records (and spans when `emit`), `perTick` a turn; CPU microseconds a record. */
  async function pass(emit: boolean): Promise<number> {
    const c0 = process.cpuUsage();
    for (let i = 0; i < o.spans; i += o.perTick) {
      for (let k = 0; k < o.perTick; k++) {
        const now = Date.now();
        const r = record(now);
        if (!emit) continue;
        const t: RequestTrace = requestTrace((seq & 7) === 0 ? parent : {}, tracing!.ids, () => false)!;
        t.admittedAt = now - 2.9;
        t.dispatchedAt = now - 2.8;
        emitRequestSpan(tracing!, r, t, server);
      }
      await tick();
    }
    if (emit) await tracing!.flush();
    const c = process.cpuUsage(c0);
    return (c.user + c.system) / o.spans;
  }

  await pass(true); // warm-up
  const base: number[] = [];
  const spans: number[] = [];
  for (let p = 0; p < o.passes; p++) {
    base.push(await pass(false));
    spans.push(await pass(true));
    process.stdout.write(
      `pass ${p + 1}/${o.passes}: records only ${base.at(-1)!.toFixed(2)} us, with spans ${spans.at(-1)!.toFixed(2)} us: ` +
        `${(spans.at(-1)! - base.at(-1)!).toFixed(2)} us a span\n`,
    );
  }
  const cost = spans.map((s, i) => s - base[i]!);
  process.stdout.write(
    `CPU a span (median of ${o.passes} passes of ${o.spans}): ${median(cost).toFixed(2)} us ` +
      `(protocol ${env['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'] ?? env['OTEL_EXPORTER_OTLP_PROTOCOL'] ?? 'http/protobuf'})\n`,
  );
  await tracing.release();
} finally {
  sink.stop();
}
