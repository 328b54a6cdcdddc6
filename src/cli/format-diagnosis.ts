import type { Truncation } from '../schema/envelopes.js';
import type { ActiveRequest, InterpretationCode, RouterStatus, SessionEntry } from '../schema/diagnosis.js';
import { isGenerationRoute, type TerminalRecord } from '../schema/terminal-record.js';

/**
 * Plain-words output of `router diagnose`. It explains evidence, never more: timing codes are
 * descriptions, not root causes, and the current router is not the one that served an earlier
 * request. Server strings without a fixed grammar (ids, model, version) are printed through
 * `safe`, so a hostile server cannot write terminal escapes.
 */

function safe(s: string): string {
  return s.replace(/[^\x20-\x7e]/g, '?');
}

/** `812 ms` below a second, `3.2 s` above; "not measured" for null. */
export function formatMs(ms: number | null): string {
  if (ms === null) return 'not measured';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(1)} s`;
}

const NOT_FOUND_CAUSES = [
  '  1. it is still active (try: svc-serving router diagnose --active);',
  "  2. it was evicted from the router's bounded buffer and no retained decision log holds it;",
  '  3. it is outside the retained history (rotated away, or the router restarted without a decision log);',
  '  4. this router does not serve request lookup (a documented command does not prove the installed router has it).',
];

/** Short phrases for one-line summaries (`--session-id`). */
const SHORT: Readonly<Record<InterpretationCode, string>> = {
  startup_dominated: 'startup dominated',
  completion_dominated: 'completion dominated',
  length_finish: 'length finish (check output ceiling and reasoning budget)',
  refused_before_routing: 'refused before routing',
  context_rejected: 'context rejected',
  upstream_rejected: 'engine refused the request as invalid',
  client_cancelled: 'client went away',
  tool_call_transition: 'tool-call transition',
  usage_estimated: 'usage estimated',
  usage_unknown: 'usage unknown',
  output_clamped: 'output limit clamped',
  admission_rejected: 'admission refused',
  upstream_rate_limited: 'engine refused (429)',
  upstream_not_ready: 'engine not ready',
  upstream_failed: 'upstream failed',
  router_ended: 'ended by the router (stopping or killed)',
  upstream_timeout: 'upstream timed out',
  latency_unmeasured: 'latency not measured',
  not_found_maybe_active_or_evicted: 'not found',
};

/** What each ending-related code means, in full sentences. */
const ENDING: Partial<Readonly<Record<InterpretationCode, string>>> = {
  length_finish:
    "Finished because of length: the output reached a token ceiling. Examine the effective output limit and the model's reasoning budget; a length finish does not prove the visible answer was complete.",
  tool_call_transition:
    "Finished with tool calls: a protocol transition handing control to the caller's tools. It is not successful tool execution and says nothing about quality.",
  refused_before_routing:
    'Refused before routing: the router turned the request away before choosing a model alias or calling any engine (see Refusal), so no engine saw it and every phase measurement is empty. The caller was told what was wrong in the error object.',
  context_rejected:
    "Rejected with HTTP 400: the request did not fit the model's context length (prompt plus requested output).",
  upstream_rejected:
    "Rejected by the engine as invalid (its own 4xx answer, relayed with its status and message to the caller only): a client mistake such as a malformed parameter, not an engine failure and not a context or rate limit. The engine's message is never recorded; the caller's SDK showed it.",
  admission_rejected:
    "Rejected with HTTP 429: admission refused; the alias's queue was full or the wait exceeded its queue timeout.",
  upstream_rate_limited:
    "Rejected with HTTP 429 by the engine, not by this router's admission: the engine was called (upstream time recorded) and refused it (its own queue or rate limit). Look at the engine's load, not at max_queue or queue_timeout_ms.",
  upstream_not_ready:
    "Rejected with HTTP 502 before anything was sent: the engine's readiness check failed (its health endpoint did not answer 2xx, or the connection failed). Look at the engine, not at this request.",
  client_cancelled:
    'The client went away before the answer finished; output seen before that is estimated from its fragments (the Usage line says whether any was seen).',
  upstream_failed:
    'The upstream failed: the engine answered with an error, could not be reached or broke off its stream (raw upstream errors are never recorded).',
  router_ended:
    'The router ended this request, not the engine: the router was stopping (503; cut before anything was sent; or a stream it cut, finish cancelled), or it was killed and recorded the request at its next start (status 0, no measurements: how it ended is not known; it may have finished just before the kill, before its own record was written).',
  upstream_timeout: "The upstream missed the router's deadline.",
  latency_unmeasured:
    'Total latency is not measured for embeddings and rerank requests (the stored 0 is a legacy placeholder, shown as not measured).',
};

/** What each recorded refusal means. */
const REFUSAL_WORDS: Readonly<Record<NonNullable<TerminalRecord['refusal']>, string>> = {
  unknown_model: 'the model parameter named no alias this router serves',
  invalid_request:
    'the request itself was malformed: its method, framing, JSON, UTF-8, model or output limit, or a query string where none is taken',
  body_too_large: "the body was larger than the router's max_body_bytes",
  unsupported_media_type: 'the Content-Type was not one the route takes',
  admission_full: "the router's admission was full (the alias's queue, or the bytes of bodies arriving at once)",
  context_length_exceeded: "the engine said the request exceeds the model's context length",
  upstream_rejected: 'the engine refused the request as invalid',
  rate_limited: 'the engine answered 429 (its own queue or rate limit)',
};

/**
 * A stored-response request (retrieve, cancel, delete, input items: decision 0032) the router
 * refused itself. Its record names no alias, and 404 on that route is no malformed request:
 * an id the router did not relay (or has forgotten), or a route no engine serves.
 */
function isStoredRefusal(r: TerminalRecord): boolean {
  return r.route === 'responses' && r.model === null && r.refusal === 'invalid_request' && r.status_code === 404;
}
const STORED_REFUSAL_WORDS =
  'the response id names no response this router relayed or still remembers (retrieve, cancel), or the call was a delete or an input-items list, which no engine behind the router serves';
const STORED_REFUSAL_ENDING =
  'Refused by the router itself, without calling any engine (see Refusal), so every phase measurement is empty. The caller was told what was wrong in the error object.';

/** The engine's side: its status and the attempts made; unknown for records older than revision 2. */
function upstreamLine(r: TerminalRecord): string {
  if (r.attempts === undefined && r.upstream_status === undefined)
    return 'Engine: not recorded (a record written before the router kept engine status and attempts).';
  if (r.attempts === 0) return 'Engine: not called (no upstream attempt was made).';
  const status =
    r.upstream_status == null
      ? 'no answer status (no connection, or none before it ended)'
      : `answered HTTP ${r.upstream_status}`;
  const replica = r.upstream_replica == null ? '' : `, replica ${r.upstream_replica}`;
  return `Engine: ${status}; ${r.attempts ?? 'unknown'} attempt(s)${replica}.`;
}

function timingLine(r: TerminalRecord, codes: readonly InterpretationCode[]): string {
  const split = `${formatMs(r.time_to_first_content_ms)} of ${formatMs(r.latency_ms)}`;
  if (codes.includes('startup_dominated')) {
    return `Timing: startup dominated: the first content came after more than half of the recorded time (${split}). Look at what precedes the first token (readiness, admission, prompt processing, model load). ${isGenerationRoute(r.route) ? 'A non-streaming request shows its content only when the whole answer arrives, so it always reads this way; a streamed one spent that time before its first token. ' : ''}This describes timing; it is not a root cause.`;
  }
  if (codes.includes('completion_dominated')) {
    return `Timing: completion dominated: the first content came within the first half of the recorded time (${split}); most of it went into generating and relaying the rest. This describes timing; it is not a root cause.`;
  }
  return 'Timing: the split between startup and completion is unknown (first content or total not measured; tool-only or buffered output can have no first-content time).';
}

function usageSide(tokens: number | null, source: string): string {
  const count = tokens === null ? 'unknown' : `${tokens} tokens`;
  if (source === 'upstream') return `${count}, reported by the engine`;
  if (source === 'estimated') return `${count}, estimated by the router (a local approximation, not an engine count)`;
  return `${count}, provenance unknown (an unknown count is not proof of zero work)`;
}

function outputLimitLine(r: TerminalRecord): string {
  const o = r.output_limit;
  if (o === null) {
    return isGenerationRoute(r.route)
      ? 'Output limit: not recorded for this request (it was recorded after the router stopped, or by an older version).'
      : 'Output limit: none recorded for this route.';
  }
  const requested = o.requested === null ? 'none requested' : `requested ${o.requested}`;
  const effective = o.effective === null ? 'effective unknown' : `effective ${o.effective}`;
  const clamp = o.clamped ? "clamped by the router to the alias's ceiling" : 'not clamped by the router';
  return `Output limit: ${requested}, ${effective}: ${clamp}. An upstream may impose further limits.`;
}

/**
 * `unavailableNote`: what to say when there is no current router status (default: the status
 * read failed; the fleet never reads it, and says so).
 */
function currentRouterLines(
  r: TerminalRecord | null,
  current: RouterStatus | { unavailable: true },
  unavailableNote?: string,
): string[] {
  const out: string[] = [];
  if (r) {
    const v = r.package_version ? safe(r.package_version) : 'not recorded';
    const h =
      r.routing_config_hash ??
      "not recorded (an older record, or one recorded at a restart without its process's identity)";
    out.push(`Recorded at request time: router version ${v}, routing configuration hash ${h}.`);
  }
  if ('unavailable' in current) {
    out.push(
      unavailableNote ??
        "Current router: unavailable (the status read failed); the diagnosis above stands on the request's own evidence.",
    );
    return out;
  }
  out.push(
    `Current router (a separate status read, now): host ${current.host}, version ${safe(current.package_version)}, routing configuration hash ${current.routing_config_hash}, started ${current.started_at}.`,
  );
  let note = 'It identifies the router answering now; it does not prove which configuration served an earlier request.';
  if (r?.routing_config_hash)
    note +=
      r.routing_config_hash === current.routing_config_hash
        ? ' The recorded hash equals the current one.'
        : ' The recorded hash differs from the current one: the routing configuration has changed since.';
  out.push(note);
  return out;
}

/** The diagnosis of one request (or the four causes of not-found). */
export function formatRequest(
  r: TerminalRecord | null,
  codes: readonly InterpretationCode[],
  current: RouterStatus | { unavailable: true },
  unavailableNote?: string,
): string {
  if (r === null) {
    return (
      [
        `No terminal record for this request id. A not-found can mean:`,
        ...NOT_FOUND_CAUSES,
        '',
        ...currentRouterLines(null, current, unavailableNote),
      ].join('\n') + '\n'
    );
  }
  const stored = isStoredRefusal(r);
  const subject = stored
    ? `${r.route} (a stored response, by its id)`
    : `${r.route} on ${r.model === null ? 'no model alias (the request named none this router serves)' : `model ${safe(r.model)}`}`;
  const lines = [
    `Request ${safe(r.request_id)}: ${subject}, outcome ${r.outcome} (HTTP ${r.status_code}), finish ${r.finish_reason ?? 'not recorded'}`,
    `Started ${r.started_at}, finished ${r.finished_at}`,
  ];
  if (r.refusal !== undefined)
    lines.push(`Refusal: ${r.refusal} (${stored ? STORED_REFUSAL_WORDS : REFUSAL_WORDS[r.refusal]})`);
  lines.push(upstreamLine(r));
  const lineage = [
    r.session_id && `session ${safe(r.session_id)}`,
    r.workbench_run_id && `workbench run ${safe(r.workbench_run_id)}`,
    r.task_id && `task ${safe(r.task_id)}`,
  ].filter(Boolean);
  if (lineage.length > 0) lines.push(`Lineage: ${lineage.join(', ')}`);
  lines.push(
    '',
    'Where the time went (from router backend entry to the terminal outcome; client upload, transit and final delivery excluded):',
    `  total            ${formatMs(r.latency_ms)}`,
    `  readiness check  ${formatMs(r.readiness_check_ms)}  (upstream readiness, a cached result included; not engine queue time)`,
    `  admission wait   ${formatMs(r.admission_wait_ms)}  (waiting for a concurrency slot on this router)`,
    `  upstream         ${formatMs(r.upstream_duration_ms)}  (the engine call and its stream, transport and client backpressure included; not pure GPU time)`,
    `  first content    ${formatMs(r.time_to_first_content_ms)}  (after entry, the first nonempty content fragment)`,
    '',
    timingLine(r, codes),
  );
  const endings = codes
    .map((c) => (stored && c === 'refused_before_routing' ? STORED_REFUSAL_ENDING : ENDING[c]))
    .filter((x): x is string => x !== undefined);
  // Routes without upstream timing cannot tell the router's admission from the engine's 429.
  const i =
    codes.includes('admission_rejected') && !isGenerationRoute(r.route)
      ? endings.indexOf(ENDING.admission_rejected!)
      : -1;
  if (i >= 0)
    endings[i] = `${endings[i]} (This route records no upstream time, so an engine's own 429 reads the same.)`;
  if (endings.length === 0)
    lines.push(
      r.outcome === 'success'
        ? `Ending: finished normally (${r.finish_reason ?? 'finish not recorded'}).`
        : `Ending: ${r.outcome} (HTTP ${r.status_code}).`,
    );
  else lines.push(...endings.map((e) => `Ending: ${e}`));
  lines.push(
    `Usage: prompt ${usageSide(r.usage.prompt_tokens, r.usage.prompt_source)}; completion ${usageSide(r.usage.completion_tokens, r.usage.completion_source)}. Not a billing guarantee.`,
    outputLimitLine(r),
    '',
    ...currentRouterLines(r, current, unavailableNote),
  );
  return lines.join('\n') + '\n';
}

function omittedText(t: Truncation): string {
  return t.omitted === null ? 'more may exist (count unknown)' : `${t.omitted} more not shown`;
}

/** `--active`: phase, elapsed, upstream silence, admission wait; engine counts apart from estimates. */
export function formatActive(
  requests: readonly ActiveRequest[],
  t: Truncation,
  current: RouterStatus | { unavailable: true },
): string {
  const lines = [`Requests in flight on this router: ${requests.length} shown, ${omittedText(t)}.`];
  if (requests.length > 0) {
    const head = [
      'REQUEST',
      'MODEL',
      'ROUTE',
      'PHASE',
      'ELAPSED',
      'SINCE-UPSTREAM',
      'ADMISSION-WAIT',
      'PROMPT-ENGINE',
      'PROMPT-EST',
      'COMPLETION-ENGINE',
      'COMPLETION-EST',
    ];
    const n = (v: number | null): string => (v === null ? '-' : String(v));
    const d = (v: number | null): string => (v === null ? '-' : formatMs(v));
    const rows = requests.map((a) => [
      safe(a.request_id),
      safe(a.model),
      a.route,
      a.phase,
      d(a.elapsed_ms),
      d(a.since_upstream_activity_ms),
      d(a.admission_wait_ms),
      n(a.tokens.prompt_upstream),
      n(a.tokens.prompt_estimated),
      n(a.tokens.completion_upstream),
      n(a.tokens.completion_estimated),
    ]);
    const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
    for (const r of [head, ...rows])
      lines.push(
        r
          .map((v, i) => v.padEnd(widths[i]!))
          .join('  ')
          .trimEnd(),
      );
    lines.push(
      '',
      'ENGINE columns are counts the engine reported; EST columns are the router\'s local estimates. They are never added together. "-" means not yet observed or unknown, not zero.',
    );
  }
  lines.push('', ...currentRouterLines(null, current));
  return lines.join('\n') + '\n';
}

/**
 * `--session-id`: retained requests newest first, one line of diagnosis each. Entries that
 * name their host (the fleet's) show it; `label` names a task or workbench run instead.
 */
export function formatSession(
  sessionId: string,
  entries: readonly (SessionEntry & { host?: string })[],
  t: Truncation,
  current: RouterStatus | { unavailable: true },
  o: { label?: string; unavailableNote?: string; emptyText?: (what: string) => string[] } = {},
): string {
  const lines = [
    `${o.label ?? 'Session'} ${safe(sessionId)}: ${entries.length} retained request${entries.length === 1 ? '' : 's'}, newest first; ${omittedText(t)}.`,
  ];
  if (entries.length === 0) {
    // Named as asked (a task or workbench run through fleet diagnose), never always "session".
    const what = (o.label ?? 'Session').toLowerCase();
    lines.push(
      ...(o.emptyText?.(what) ?? [
        `No retained terminal record for this ${what}. Its requests may still be active (try --active), may have been`,
        `evicted or rotated out of the retained history, or this router does not serve ${what} lookup; the id may also be`,
        `one this router never saw. None of these is proof that the ${what} did no work.`,
      ]),
    );
  }
  for (const { request: r, interpretation, host } of entries) {
    const summary = interpretation.map((c) => SHORT[c]).join(', ') || 'nothing notable';
    lines.push(
      `${r.finished_at}  ${host === undefined ? '' : `${host}  `}${safe(r.request_id)}  ${r.outcome} ${r.status_code}  finish ${r.finish_reason ?? '-'}  ${formatMs(r.latency_ms)}  ${summary}`,
    );
  }
  lines.push('', ...currentRouterLines(null, current, o.unavailableNote));
  return lines.join('\n') + '\n';
}
