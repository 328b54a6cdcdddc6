import { performance } from 'node:perf_hooks';
import { formatTimestamp } from '../schema/primitives.js';
import { isGenerationRoute, type FinishReason, type TerminalRecord, type Usage } from '../schema/terminal-record.js';
import type { Caller, Exchange, RelayContext, Turned } from './relay-context.js';
import { ms } from './relay-support.js';
import { estimateTokens } from './stream-observer.js';

/** Builds the one terminal record of an exchange. */
export function terminalRecord(x: Exchange, ctx: RelayContext, finishedMs: number): TerminalRecord {
  const end = performance.now();
  const o = x.obs;
  const isText = isGenerationRoute(x.route);
  const dispatched = x.dispatchAt !== null;
  const completionFromUpstream = o.completionTokens !== null;
  // Output is estimated only from an answer that was seen (a stream that began, a body that
  // arrived): a request cut off before that did unknown engine work, not zero.
  // A stream that failed or was left before its first fragment (comments or a role chunk
  // only) did unknown work, not zero.
  // A Responses answer the engine only accepted (a background one, queued) has no output yet:
  // unknown, not an estimated 0 (decision 0031).
  const estimable =
    isText &&
    dispatched &&
    x.answered &&
    x.statusCode < 400 &&
    !o.accepted &&
    (!x.streaming || o.fragments > 0 || o.done);
  const usage: Usage = {
    prompt_tokens: o.promptTokens ?? (isText && dispatched ? x.promptEstimate : null),
    completion_tokens: completionFromUpstream
      ? o.completionTokens
      : estimable
        ? x.streaming
          ? o.fragments
          : estimateTokens(o.contentChars + o.toolChars)
        : null,
    prompt_source:
      o.promptTokens !== null
        ? 'upstream'
        : isText && dispatched && x.promptEstimate !== null
          ? 'estimated'
          : 'unknown',
    completion_source: completionFromUpstream ? 'upstream' : estimable ? 'estimated' : 'unknown',
  };
  if (x.route === 'embeddings' || x.route === 'rerank') {
    // Legacy shape: these routes report usage only as the engine gives it.
    usage.prompt_tokens = o.promptTokens;
    usage.prompt_source = o.promptTokens !== null ? 'upstream' : 'unknown';
    usage.completion_tokens = null;
    usage.completion_source = 'unknown';
  }
  let finish: FinishReason | null = null;
  if (isText) {
    // The router's own verdict (a stream it cut while stopping) comes before the engine's.
    finish = x.finishOverride ?? o.finishReason;
    // An engine that failed after sending a finish reason did not finish that way: the
    // answer ended in an error (the client got the error event, not [DONE]).
    if (x.outcome === 'error' && x.finishOverride === null && dispatched) finish = 'error';
    if (finish === null && x.outcome === 'disconnected' && dispatched) finish = 'cancelled';
    if (finish === null && x.outcome === 'timeout' && dispatched) finish = 'error';
  }
  const rec: TerminalRecord = {
    request_id: x.a.requestId,
    model: x.a.model,
    route: x.route,
    outcome: x.outcome,
    status_code: x.statusCode,
    started_at: formatTimestamp(x.a.startedAt),
    finished_at: formatTimestamp(finishedMs),
    latency_ms: x.route === 'embeddings' || x.route === 'rerank' ? 0 : ms(end - x.t0),
    readiness_check_ms: isText && x.readinessMs !== null ? ms(x.readinessMs) : null,
    admission_wait_ms: isText && x.admissionWaitMs !== null ? ms(x.admissionWaitMs) : null,
    upstream_duration_ms: isText && x.dispatchAt !== null ? ms((x.upstreamEndAt ?? end) - x.dispatchAt) : null,
    time_to_first_content_ms: isText && o.firstContentAt !== null ? ms(o.firstContentAt - x.t0) : null,
    finish_reason: finish,
    usage,
    output_limit: x.outputLimit,
    upstream_status: x.upstreamStatus,
    upstream_replica: x.upstreamReplica,
    attempts: x.attempts,
  };
  if (x.outcome === 'rejected' && x.refusal !== undefined) rec.refusal = x.refusal;
  if (x.a.sessionId) rec.session_id = x.a.sessionId;
  if (x.a.workbenchRunId) rec.workbench_run_id = x.a.workbenchRunId;
  if (x.a.taskId) rec.task_id = x.a.taskId;
  rec.routing_config_hash = x.routingConfigHash;
  rec.package_version = ctx.packageVersion;
  return rec;
}

/**
 * The one terminal record of a request turned away before routing: outcome `rejected` with its
 * refusal (`error` for a graceful stop's 503, `disconnected` for a client that left during its
 * upload), `model` the alias only when it named a configured one, every phase it never reached
 * null, usage unknown. Its latency runs from the arrival of its headers: no upload is waited for
 * after the refusal.
 */
export function refusalRecord(
  c: Caller,
  t: Turned,
  statusCode: number,
  ctx: RelayContext,
  finishedMs: number,
): TerminalRecord {
  const legacyZero = c.route === 'embeddings' || c.route === 'rerank';
  const rec: TerminalRecord = {
    request_id: c.requestId,
    model: t.model ?? null,
    route: c.route,
    outcome: t.gone ? 'disconnected' : t.refusal !== null ? 'rejected' : 'error',
    status_code: t.gone ? 0 : statusCode,
    started_at: formatTimestamp(c.arrivedMs),
    finished_at: formatTimestamp(Math.max(finishedMs, c.arrivedMs)),
    latency_ms: legacyZero ? 0 : ms(performance.now() - c.arrivedAt),
    readiness_check_ms: null,
    admission_wait_ms: null,
    upstream_duration_ms: null,
    time_to_first_content_ms: null,
    finish_reason: null,
    usage: { prompt_tokens: null, completion_tokens: null, prompt_source: 'unknown', completion_source: 'unknown' },
    output_limit: null,
    upstream_status: null,
    upstream_replica: null,
    attempts: 0,
  };
  if (!t.gone && t.refusal !== null) rec.refusal = t.refusal;
  if (c.sessionId) rec.session_id = c.sessionId;
  if (c.workbenchRunId) rec.workbench_run_id = c.workbenchRunId;
  if (c.taskId) rec.task_id = c.taskId;
  rec.routing_config_hash = ctx.cfg.routingConfigHash;
  rec.package_version = ctx.packageVersion;
  return rec;
}
