/**
 * A retrieve (`GET /v1/responses/{id}`) or cancel (`POST /v1/responses/{id}/cancel`) of a
 * response the router relayed, sent to the replica that made it (response-ids.ts) and
 * answered with the engine's Response, relayed whole. Its one terminal record is a
 * `responses` record with no generation in it: no finish, usage unknown, no output limit.
 * docs/decisions/0032.
 */
import type { ServerResponse } from 'node:http';
import { performance } from 'node:perf_hooks';
import { ErrorCode, engineMessage } from '../errors.js';
import { formatTimestamp } from '../schema/primitives.js';
import type { Refusal, RequestOutcome, TerminalRecord } from '../schema/terminal-record.js';
import type { ActiveRequest } from './records/router-registry.js';
import type { Caller, RelayContext, Upstream } from './relay-context.js';
import { turnAway } from './relay-refusal.js';
import { ms, safeContentType, sendRawError } from './relay-support.js';
import type { Replica } from './replica-set.js';
import { UpstreamCall, type UpstreamAnswer, type UpstreamCallOptions } from './upstream-call.js';
import { upstreamTraceparent } from '../telemetry/trace-context.js';

export type StoredAction = 'retrieve' | 'cancel';

/** Largest Response relayed (one answer's whole output); error bodies are read up to 64 KiB to classify them. */
const STORED_LIMIT = 64 * 1024 * 1024;
const ERROR_BODY_LIMIT = 64 * 1024;

/** Every answer is read whole: a retrieve is relayed as one JSON Response, never a stream. */
const STORED_CALL: UpstreamCallOptions = {
  streams: () => false,
  wholeLimit: (status) => (status >= 200 && status <= 299 ? STORED_LIMIT : ERROR_BODY_LIMIT),
};

/** Engine refusals relayed with the engine's status and own message (CONTRACT.md, HTTP). */
const RELAYED_REFUSALS: ReadonlySet<number> = new Set([400, 404, 409, 413, 422]);

/** The start of a JSON object that is no error object. */
const ANSWER_HEAD = /^\s*\{/;

/** What one stored-response exchange came to, for its record. */
interface StoredOutcome {
  outcome: RequestOutcome;
  status: number;
  upstreamStatus: number | null;
  upstreamEndAt: number | null;
  refusal?: Refusal;
}

/** The replica that made response `id`, in the routing table in service now; undefined when unknown or gone. */
function homeOf(ctx: RelayContext, id: string): { up: Upstream; replica: Replica } | undefined {
  const home = ctx.responseIds?.find(id);
  if (home === undefined) return undefined;
  const up = ctx.upstreams.get(home.alias);
  const replica = up?.replicas.replicas.find((r) => r.target.base === home.base);
  return up !== undefined && replica !== undefined ? { up, replica } : undefined;
}

/**
 * Relays a retrieve or cancel of response `id` to the replica that made it and leaves its
 * one terminal record; an id the router did not relay (or forgot, or whose replica left the
 * configuration) is 404 `response_not_found`, refused before routing.
 */
export async function relayStored(
  ctx: RelayContext,
  c: Caller,
  res: ServerResponse,
  id: string,
  action: StoredAction,
): Promise<void> {
  const home = homeOf(ctx, id);
  if (home === undefined)
    return turnAway(ctx, c, res, { code: ErrorCode.RESPONSE_NOT_FOUND, refusal: 'invalid_request' }, undefined);
  const { up, replica } = home;
  const a = activeEntry(c, up.route.alias);
  ctx.registry.begin(a);
  const t0 = c.arrivedAt;
  let o: StoredOutcome = { outcome: 'error', status: 0, upstreamStatus: null, upstreamEndAt: null };
  let dispatchAt: number | null = null;
  try {
    if (ctx.stopping.value) {
      o = { ...o, status: 503 };
      sendRawError(res, ErrorCode.UNAVAILABLE);
      return;
    }
    dispatchAt = performance.now();
    o = await exchange(ctx, up, replica, a, res, id, action);
  } finally {
    const end = performance.now();
    const finishedMs = Math.max(Date.now(), a.startedAt);
    const record = storedRecord(ctx, c, up, replica.index, o, {
      latencyMs: ms(end - t0),
      upstreamMs: dispatchAt === null ? null : ms((o.upstreamEndAt ?? end) - dispatchAt),
      finishedMs,
    });
    ctx.registry.finish(a, record, finishedMs);
    if (o.outcome !== 'success' && ctx.failureLines.take(finishedMs))
      ctx.logger.info(
        { gateway_request_id: c.gid, model: a.model, outcome: o.outcome, status: o.status },
        'request finished',
      );
  }
}

/** The request in router memory while the engine answers (shown by `?active=1`, journaled). */
function activeEntry(c: Caller, alias: string): ActiveRequest {
  return {
    gid: c.gid,
    requestId: c.requestId,
    model: alias,
    route: 'responses',
    startedAt: c.arrivedMs,
    phase: 'dispatched',
    phaseAt: c.arrivedMs,
    lastUpstreamAt: null,
    admissionWaitMs: null,
    estimatedPromptTokens: null,
    estimatedCompletionTokens: 0,
    upstreamPromptTokens: null,
    upstreamCompletionTokens: null,
    sessionId: c.sessionId,
    workbenchRunId: c.workbenchRunId,
    taskId: c.taskId,
    queuedAt: null,
    stop: undefined,
    trace: c.trace,
  };
}

/**
 * One call to the replica: sent with the router's request id (and the engine key, and the
 * caller's trace), bounded by the alias's upstream deadline, cut when the client leaves or a
 * graceful stop cuts it; its answer relayed or classified.
 */
async function exchange(
  ctx: RelayContext,
  up: Upstream,
  replica: Replica,
  a: ActiveRequest,
  res: ServerResponse,
  id: string,
  action: StoredAction,
): Promise<StoredOutcome> {
  const headers: Record<string, string> = { 'x-request-id': a.gid };
  if (up.apiKey) headers['authorization'] = `Bearer ${up.apiKey}`;
  if (a.trace !== undefined) {
    headers['traceparent'] = upstreamTraceparent(a.trace);
    if (a.trace.traceState !== undefined) headers['tracestate'] = a.trace.traceState;
  }
  const call = new UpstreamCall(STORED_CALL, a);
  let gone = false;
  let timedOut = false;
  const onClose = (): void => {
    if (res.writableFinished) return;
    gone = true;
    call.cancel();
  };
  res.on('close', onClose);
  a.stop = { abort: () => call.cancel() };
  const timeoutMs = up.route.upstreamTimeoutMs;
  const deadline = setTimeout(() => {
    timedOut = true;
    call.cancel();
  }, timeoutMs);
  const path = `${replica.target.pathPrefix}/responses/${id}${action === 'cancel' ? '/cancel' : ''}`;
  try {
    replica.send(
      {
        method: action === 'cancel' ? 'POST' : 'GET',
        path,
        headers,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      },
      call,
    );
    let answer: UpstreamAnswer;
    try {
      answer = await call.answer;
    } catch {
      const cut = { outcome: 'error' as RequestOutcome, status: 0, upstreamStatus: call.status || null };
      const upstreamEndAt = performance.now();
      if (gone) return { ...cut, outcome: 'disconnected', upstreamEndAt };
      const code = timedOut
        ? ErrorCode.UPSTREAM_TIMEOUT
        : ctx.stopping.value
          ? ErrorCode.UNAVAILABLE
          : ErrorCode.UPSTREAM_FAILED;
      sendRawError(res, code);
      return { ...cut, outcome: timedOut ? 'timeout' : 'error', status: res.statusCode, upstreamEndAt };
    }
    return relayAnswer(answer, res, gone);
  } finally {
    clearTimeout(deadline);
    res.off('close', onClose);
    a.stop = undefined;
  }
}

/**
 * The engine's answer to a retrieve or cancel: a 2xx JSON object (no error object) relayed as
 * it came; the engine's refusal relayed as on the inference routes (its status and own
 * message, to this caller only; 429 `rate_limited`); anything else 502 `upstream_failed`.
 */
function relayAnswer(answer: UpstreamAnswer, res: ServerResponse, gone: boolean): StoredOutcome {
  const status = answer.status;
  const upstreamEndAt = performance.now();
  const body = answer.kind === 'whole' ? answer.body : Buffer.alloc(0);
  const base = { upstreamStatus: status, upstreamEndAt };
  if (gone) return { ...base, outcome: 'disconnected', status: 0 };
  if (status >= 200 && status <= 299 && !answer.encoded && isAnswer(body)) {
    res.writeHead(status, {
      'content-type': safeContentType(answer.contentType, 'application/json'),
      'content-length': body.byteLength,
    });
    res.end(body);
    return { ...base, outcome: 'success', status };
  }
  if (status === 429) {
    sendRawError(res, ErrorCode.UPSTREAM_RATE_LIMITED);
    return { ...base, outcome: 'rejected', status: 429, refusal: 'rate_limited' };
  }
  if (RELAYED_REFUSALS.has(status)) {
    // The engine's words go to this caller only: nothing here keeps or logs them.
    sendRawError(res, ErrorCode.UPSTREAM_REJECTED, { status, message: engineMessage(body), param: null });
    return { ...base, outcome: 'rejected', status, refusal: 'upstream_rejected' };
  }
  sendRawError(res, ErrorCode.UPSTREAM_FAILED);
  return { ...base, outcome: 'error', status: 502 };
}

/** A body that is one JSON object and no error object (an engine that failed with 200 is no answer). */
function isAnswer(body: Buffer): boolean {
  const text = body.toString('utf8');
  if (!ANSWER_HEAD.test(text)) return false;
  try {
    const v = JSON.parse(text) as Record<string, unknown>;
    return (
      typeof v === 'object' &&
      v !== null &&
      !Array.isArray(v) &&
      (v['error'] ?? null) === null &&
      v['object'] !== 'error'
    );
  } catch {
    return false;
  }
}

/**
 * The record of a retrieve or cancel: route `responses`, the alias and replica it went to, its
 * outcome and times; nothing of a generation (no finish, usage unknown, no output limit, no
 * first content), since it generated nothing: the response it reads has its own record.
 */
function storedRecord(
  ctx: RelayContext,
  c: Caller,
  up: Upstream,
  replica: number,
  o: StoredOutcome,
  t: { latencyMs: number; upstreamMs: number | null; finishedMs: number },
): TerminalRecord {
  const rec: TerminalRecord = {
    request_id: c.requestId,
    model: up.route.alias,
    route: 'responses',
    outcome: o.outcome,
    status_code: o.status,
    started_at: formatTimestamp(c.arrivedMs),
    finished_at: formatTimestamp(t.finishedMs),
    latency_ms: t.latencyMs,
    readiness_check_ms: null,
    admission_wait_ms: null,
    upstream_duration_ms: t.upstreamMs,
    time_to_first_content_ms: null,
    finish_reason: null,
    usage: { prompt_tokens: null, completion_tokens: null, prompt_source: 'unknown', completion_source: 'unknown' },
    output_limit: null,
    upstream_status: o.upstreamStatus,
    upstream_replica: t.upstreamMs === null ? null : replica,
    attempts: t.upstreamMs === null ? 0 : 1,
  };
  if (o.outcome === 'rejected' && o.refusal !== undefined) rec.refusal = o.refusal;
  if (c.sessionId) rec.session_id = c.sessionId;
  if (c.workbenchRunId) rec.workbench_run_id = c.workbenchRunId;
  if (c.taskId) rec.task_id = c.taskId;
  rec.routing_config_hash = up.routingConfigHash;
  rec.package_version = ctx.packageVersion;
  return rec;
}
