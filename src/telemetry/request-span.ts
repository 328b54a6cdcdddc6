import type { Attributes, SpanContext } from '@opentelemetry/api';
import { parseTimestamp } from '../schema/primitives.js';
import type { RouteName, TerminalRecord } from '../schema/terminal-record.js';
import { endRecordSpan } from './record-span.js';
import type { RequestTrace } from './trace-context.js';
import type { Tracing } from './tracing.js';

/*
 * The router's one span per request, made from its terminal record when the record is made
 * (nothing on the request's path while it runs, beyond two phase times): named
 * `<gen_ai.operation.name> <alias>`, with the OpenTelemetry GenAI attributes and svc.* ones.
 * Only what the record holds goes in: never prompt or answer text, headers or keys.
 */

/** `gen_ai.operation.name` per route (docs/decisions/0085). */
export const OPERATION_NAME: Readonly<Record<RouteName, string>> = {
  'chat.completions': 'chat',
  completions: 'text_completion',
  embeddings: 'embeddings',
  rerank: 'rerank',
  'audio.transcriptions': 'transcription',
  responses: 'chat',
};

/** Where the engine that answered listens (`server.address`, `server.port`). */
export interface ServerAddress {
  readonly address: string;
  readonly port: number | undefined;
}

/** A span as the record describes it (pure; made into an SDK span by emitRequestSpan). */
export interface RequestSpanPlan {
  readonly name: string;
  readonly startMs: number;
  readonly endMs: number;
  readonly attributes: Attributes;
  readonly events: readonly { readonly name: string; readonly atMs: number }[];
  /** The outcome is a failure (span status ERROR). */
  readonly failed: boolean;
}

/**
 * Failed outcomes (span status ERROR): the router's or the engine's failure, or a refusal
 * answered with a 5xx. A client that left, or a request refused as the client's fault or by
 * admission, is not the server's error (its `error.type` still says what happened).
 */
function failed(r: TerminalRecord): boolean {
  return r.outcome === 'error' || r.outcome === 'timeout' || r.status_code >= 500;
}

/** The span of one terminal record. */
export function requestSpanPlan(r: TerminalRecord, t: RequestTrace, server?: ServerAddress): RequestSpanPlan {
  const op = OPERATION_NAME[r.route];
  const startMs = parseTimestamp(r.started_at);
  const endMs = Math.max(startMs, parseTimestamp(r.finished_at));
  const a: Attributes = {
    'gen_ai.operation.name': op,
    'svc.request_id': r.request_id,
    'svc.outcome': r.outcome,
    'svc.route': r.route,
  };
  // The alias (never the caller's string: a request naming no configured alias has none).
  if (r.model !== null) a['gen_ai.request.model'] = r.model;
  if (r.finish_reason !== null) a['gen_ai.response.finish_reasons'] = [r.finish_reason];
  // The engine's own counts only; the router's estimates are named as such.
  const u = r.usage;
  if (u.prompt_tokens !== null)
    a[u.prompt_source === 'upstream' ? 'gen_ai.usage.input_tokens' : 'svc.usage.input_tokens_estimated'] =
      u.prompt_tokens;
  if (u.completion_tokens !== null)
    a[u.completion_source === 'upstream' ? 'gen_ai.usage.output_tokens' : 'svc.usage.output_tokens_estimated'] =
      u.completion_tokens;
  if (server !== undefined) {
    a['server.address'] = server.address;
    if (server.port !== undefined) a['server.port'] = server.port;
  }
  if (r.status_code !== 0) a['http.response.status_code'] = r.status_code;
  if (r.outcome !== 'success') a['error.type'] = r.refusal ?? r.outcome;
  if (r.session_id !== undefined) a['session.id'] = r.session_id;
  // The record's dates are wall-clock milliseconds and the phases monotonic offsets: an event
  // can land a fraction of a millisecond past the recorded end. Each is held within the span.
  const within = (atMs: number): number => Math.min(endMs, Math.max(startMs, atMs));
  const events: { name: string; atMs: number }[] = [];
  if (t.admittedAt !== undefined) events.push({ name: 'admitted', atMs: within(t.admittedAt) });
  if (t.dispatchedAt !== undefined) events.push({ name: 'dispatched', atMs: within(t.dispatchedAt) });
  if (r.time_to_first_content_ms !== null)
    events.push({ name: 'first_content', atMs: within(startMs + r.time_to_first_content_ms) });
  return { name: spanName(r), startMs, endMs, attributes: a, events, failed: failed(r) };
}

/** `<gen_ai.operation.name> <alias>`, or the operation alone when no configured alias was named. */
function spanName(r: TerminalRecord): string {
  const op = OPERATION_NAME[r.route];
  return r.model === null ? op : `${op} ${r.model}`;
}

/** Engine URLs read so far (a routing table's few origins; emptied if it ever holds many). */
const addresses = new Map<string, ServerAddress | undefined>();
const MAX_ADDRESSES = 1024;

/** `server.address` and `server.port` of an engine URL (its host only: never a path or credentials). */
export function serverAddress(base: string): ServerAddress | undefined {
  const known = addresses.get(base);
  if (known !== undefined || addresses.has(base)) return known;
  if (addresses.size >= MAX_ADDRESSES) addresses.clear();
  const a = parseServerAddress(base);
  addresses.set(base, a);
  return a;
}

function parseServerAddress(base: string): ServerAddress | undefined {
  try {
    const u = new URL(base);
    const port = u.port === '' ? undefined : Number(u.port);
    return { address: u.hostname.replace(/^\[|\]$/g, ''), port };
  } catch {
    return undefined;
  }
}

/** Makes and ends the request's span (SpanKind SERVER), child of the caller's span when there was one. */
export function emitRequestSpan(tracing: Tracing, r: TerminalRecord, t: RequestTrace, server?: ServerAddress): void {
  if (t.spanId === undefined) return;
  const { api } = tracing;
  const remote: SpanContext | undefined =
    t.parentId === undefined
      ? undefined
      : {
          traceId: t.traceId,
          spanId: t.parentId,
          traceFlags: t.flags,
          isRemote: true,
          ...(t.traceState !== undefined ? { traceState: traceStateOf(api, t.traceState) } : {}),
        };
  const parent = remote === undefined ? api.ROOT_CONTEXT : api.trace.setSpanContext(api.ROOT_CONTEXT, remote);
  if (tracing.pipeline !== undefined) {
    // Made finished, straight from the record, through the SDK's sampler and processors (docs/decisions/0034).
    const p = requestSpanPlan(r, t, server);
    endRecordSpan(tracing.pipeline, {
      name: p.name,
      traceId: t.traceId,
      spanId: t.spanId,
      parent: remote,
      parentContext: parent,
      startMs: p.startMs,
      endMs: p.endMs,
      attributes: p.attributes,
      events: p.events,
      failed: p.failed,
    });
    return;
  }
  // Attributes after the start, not in its options: the SDK copies options' attributes twice
  // more (for the sampler, which reads none of these), measured at a few percent of a request.
  const startMs = parseTimestamp(r.started_at);
  const span = tracing.startSpanWithIds(spanName(r), { kind: api.SpanKind.SERVER, startTime: startMs }, parent, {
    traceId: t.traceId,
    spanId: t.spanId,
  });
  // Not sampled: nothing more to work out.
  if (!span.isRecording()) return;
  const p = requestSpanPlan(r, t, server);
  span.setAttributes(p.attributes);
  for (const e of p.events) span.addEvent(e.name, e.atMs);
  if (p.failed) span.setStatus({ code: api.SpanStatusCode.ERROR });
  span.end(p.endMs);
}

/** A W3C `tracestate` as the API's TraceState (a list of key=value members, already checked). */
function traceStateOf(api: Tracing['api'], s: string) {
  return api.createTraceState(s);
}
