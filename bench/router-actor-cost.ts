/**
 * In-process cost of the router owner actor's read-and-publish step (what `startRouter`
 * wires: RouterRegistry.workloadRecords -> OwnerActor.step on an in-process bus), as a
 * function of how many terminal records the registry's ring holds (`[server] buffer_size`,
 * 10,000 by default). The step runs on the router's event loop, so its duration is a stall
 * every relayed request can wait behind; under load it runs every ~200 ms (minIntervalMs).
 *
 *   node build/bench/router-actor-cost.js
 */
import { performance } from 'node:perf_hooks';
import { OwnerActor } from '../src/actors/owner-actor.js';
import { RouterRegistry, routerReading, type ActiveRequest } from '../src/router/records/router-registry.js';
import { DEFAULT_WINDOW_CAP } from '../src/actors/window.js';
import type { TerminalRecord } from '../src/schema/terminal-record.js';
import { InProcessBus } from '../src/streams/in-process-bus.js';

let n = 0;
function request(registry: RouterRegistry): void {
  const gid = 'req_' + (++n).toString(16).padStart(32, '0');
  const now = Date.now();
  const a: ActiveRequest = {
    gid,
    requestId: gid,
    model: 'sim-model',
    route: 'chat.completions',
    startedAt: now,
    phase: 'checking',
    phaseAt: now,
    lastUpstreamAt: null,
    admissionWaitMs: null,
    estimatedPromptTokens: 3,
    estimatedCompletionTokens: 0,
    upstreamPromptTokens: null,
    upstreamCompletionTokens: null,
    sessionId: undefined,
    workbenchRunId: undefined,
    taskId: undefined,
    queuedAt: null,
    stop: undefined,
  };
  registry.begin(a);
  const ts = new Date(now).toISOString();
  const rec: TerminalRecord = {
    request_id: gid,
    model: 'sim-model',
    route: 'chat.completions',
    outcome: 'success',
    status_code: 200,
    started_at: ts,
    finished_at: ts,
    latency_ms: 0.8,
    readiness_check_ms: 0.01,
    admission_wait_ms: 0.02,
    upstream_duration_ms: 0.5,
    time_to_first_content_ms: null,
    finish_reason: 'stop',
    usage: { prompt_tokens: 2, completion_tokens: 16, prompt_source: 'upstream', completion_source: 'upstream' },
    output_limit: { requested: 16, effective: 16, clamped: false },
  };
  registry.finish(a, rec);
}

function pct(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

async function measure(bufferSize: number, perStep: number, steps: number): Promise<string> {
  const registry = new RouterRegistry({ host: 'bench', bufferSize });
  const bus = new InProcessBus();
  const actor = new OwnerActor({
    host: 'bench',
    owner: 'router',
    bus,
    staleAfterMs: 30_000,
    pollMs: 1000,
    minIntervalMs: 200,
    read: () => routerReading(registry, Date.now(), DEFAULT_WINDOW_CAP),
  });
  for (let i = 0; i < bufferSize; i++) request(registry);
  await actor.step(true);
  const stepMs: number[] = [];
  const stepCpuMs: number[] = [];
  const readCpuMs: number[] = [];
  const cpu = (): number => {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1000;
  };
  for (let s = 0; s < steps; s++) {
    for (let i = 0; i < perStep; i++) request(registry);
    const r0 = cpu();
    registry.workloadRecords(Date.now(), DEFAULT_WINDOW_CAP);
    readCpuMs.push(cpu() - r0);
    const c0 = cpu();
    const t0 = performance.now();
    await actor.step(false);
    stepMs.push(performance.now() - t0);
    stepCpuMs.push(cpu() - c0);
  }
  await bus.close();
  const p50 = pct(stepCpuMs, 0.5);
  return (
    `  ring ${String(bufferSize).padStart(6)}: step CPU p50 ${p50.toFixed(2).padStart(6)} ms (workloadRecords ${pct(readCpuMs, 0.5).toFixed(2)} ms), ` +
    `wall p50 ${pct(stepMs, 0.5).toFixed(2)} ms, p99 ${pct(stepMs, 0.99).toFixed(2)} ms; at 5 steps/s: ${(5 * p50).toFixed(0)} ms CPU per second, ` +
    `${((5 * p50) / (5 * perStep)).toFixed(3)} ms per request at ${5 * perStep} req/s`
  );
}

const out: string[] = [
  `router owner actor step cost, ${200} new terminal records between steps (1,000 req/s at one step per 200 ms), window cap ${DEFAULT_WINDOW_CAP}:`,
];
for (const size of [10, 1_000, 2_000, 10_000]) out.push(await measure(size, 200, 40));
process.stdout.write(out.join('\n') + '\n');
