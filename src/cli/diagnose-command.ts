import type { Command } from 'commander';
import {
  DIAGNOSIS_SCHEMA_ID,
  NOT_FOUND_INTERPRETATION,
  checkActiveBody,
  checkRouterStatus,
  diagnoseHistory,
  diagnoseLookup,
  type ActiveRequest,
  type DiagnosisEnvelope,
  type RouterStatus,
  type SessionEntry,
} from '../schema/diagnosis.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE } from '../schema/terminal-record.js';
import { formatActive, formatRequest, formatSession } from './format-diagnosis.js';
import { SafeReader } from './http-read.js';
import type { ReadOutcome } from './read-outcome.js';
import { UsageFailure, failureFor, runReadAction, snapshotFailure } from './read-errors.js';
import { OptionTracker, resolveDiagnoseSettings } from './settings.js';

interface RawDiagnoseOptions {
  active?: boolean;
  sessionId?: string;
  json?: boolean;
  config?: string;
  routerUrl?: string;
  authEnv?: string;
  timeout?: string;
}

type Target =
  | { mode: 'request'; path: string; id: string }
  | { mode: 'active'; path: string }
  | { mode: 'session'; path: string; sessionId: string };

/** Thrown when: not exactly one target, or its id is malformed (UsageFailure). */
function target(id: string | undefined, o: RawDiagnoseOptions): Target {
  if ([id !== undefined, o.active === true, o.sessionId !== undefined].filter(Boolean).length !== 1)
    throw new UsageFailure('target');
  if (id !== undefined) {
    if (!GENERATED_ID_RE.test(id) && !LEGACY_ID_RE.test(id)) throw new UsageFailure('requestId');
    // Dots are escaped too, so a legacy id like `..` cannot become a dot segment.
    return { mode: 'request', id, path: `/v1/requests/${encodeURIComponent(id).replace(/\./g, '%2E')}` };
  }
  if (o.active === true) return { mode: 'active', path: '/v1/requests?active=1' };
  const sid = o.sessionId!;
  if (!OPAQUE_ID_RE.test(sid)) throw new UsageFailure('sessionId');
  return { mode: 'session', path: `/v1/requests?session_id=${encodeURIComponent(sid)}&history=1`, sessionId: sid };
}

/** Router status never spoils a diagnosis: anything but a valid status is `unavailable`. */
function currentRouter(o: ReadOutcome): RouterStatus | { unavailable: true } {
  if (o.kind === 'json' && o.status === 200 && checkRouterStatus.Check(o.body)) {
    const s = o.body;
    return {
      host: s.host,
      package_version: s.package_version,
      routing_config_hash: s.routing_config_hash,
      started_at: s.started_at,
      models: [...s.models],
    };
  }
  return { unavailable: true };
}

const notServedStatus = (o: ReadOutcome): boolean => o.kind === 'status' && (o.status === 404 || o.status === 405);

/**
 * The envelope from the two reads. A lookup 404 is a valid not-found, unless the status route
 * is not served either: then this is not a router that serves diagnosis at all (exit 4).
 * Thrown when: the lookup failed (SnapshotFailure).
 */
export function buildEnvelope(t: Target, lookup: ReadOutcome, status: ReadOutcome): DiagnosisEnvelope {
  const current = currentRouter(status);
  const base = { schema: DIAGNOSIS_SCHEMA_ID } as const;
  if (lookup.kind !== 'json') {
    if (t.mode === 'request' && lookup.kind === 'status' && lookup.status === 404) {
      if (notServedStatus(status)) throw snapshotFailure('diagnosisNotServed');
      return { ...base, request: null, current_router: current, interpretation: [...NOT_FOUND_INTERPRETATION] };
    }
    throw failureFor(lookup, 'lookupNotServed');
  }
  if (lookup.status !== 200) throw snapshotFailure('malformed');
  if (t.mode === 'request') {
    const d = diagnoseLookup(t.id, lookup.body);
    if (typeof d === 'string') throw snapshotFailure(d === 'identity' ? 'lookupIdentity' : 'malformed');
    return { ...base, request: d.request, current_router: current, interpretation: d.interpretation };
  }
  if (t.mode === 'active') {
    if (!checkActiveBody.Check(lookup.body)) throw snapshotFailure('malformed');
    const { requests, truncation } = lookup.body;
    return { ...base, request: null, requests, truncation, current_router: current, interpretation: [] };
  }
  const d = diagnoseHistory('session_id', t.sessionId, lookup.body);
  if (typeof d === 'string') throw snapshotFailure(d === 'identity' ? 'lookupIdentity' : 'malformed');
  return {
    ...base,
    request: null,
    requests: d.requests,
    truncation: d.truncation,
    current_router: current,
    interpretation: d.requests.length === 0 ? [...NOT_FOUND_INTERPRETATION] : [],
  };
}

function human(t: Target, e: DiagnosisEnvelope): string {
  if (t.mode === 'request') return formatRequest(e.request, e.interpretation, e.current_router);
  const truncation = e.truncation ?? { returned: 0, omitted: null };
  if (t.mode === 'active') return formatActive((e.requests ?? []) as ActiveRequest[], truncation, e.current_router);
  return formatSession(t.sessionId, (e.requests ?? []) as SessionEntry[], truncation, e.current_router);
}

async function diagnose(id: string | undefined, o: RawDiagnoseOptions, tracker: OptionTracker): Promise<void> {
  tracker.check();
  const t = target(id, o);
  const s = resolveDiagnoseSettings(
    { routerUrl: o.routerUrl, authEnv: o.authEnv, timeout: o.timeout, config: o.config },
    process.env,
  );
  const reader = new SafeReader(s.origin, s.token, s.timeoutS);
  try {
    // Exactly two bounded metadata GETs, concurrently: the lookup and the current status.
    const [lookup, status] = await Promise.all([reader.get(t.path), reader.get('/v1/router/status')]);
    const envelope = buildEnvelope(t, lookup, status);
    process.stdout.write(o.json === true ? `${JSON.stringify(envelope, null, 2)}\n` : human(t, envelope));
  } finally {
    await reader.close();
  }
}

/** Registers `router diagnose [request-id]`. */
export function registerDiagnoseCommand(router: Command): void {
  const t = new OptionTracker();
  router
    .command('diagnose')
    .description(
      'explain a router request from its recorded evidence (svc-router-diagnosis/v1); two metadata GETs, no model request',
    )
    .argument('[request-id]', 'the request id (X-Svc-Request-Id, or a legacy caller id)')
    .option('--active', 'requests in flight: phase, elapsed, upstream silence, admission wait, token counts', t.flag())
    .option('--session-id <id>', "the session's retained requests, newest first", t.value())
    .option('--json', 'print the svc-router-diagnosis/v1 envelope, nothing else', t.flag())
    .option(
      '--config <path>',
      'settings file (default $SVC_SERVING_HOME/router-diagnostics.toml or ~/.svc-serving/)',
      t.value(),
    )
    .option(
      '--router-url <url>',
      'router origin (default SVC_ROUTER_URL, then settings, then http://127.0.0.1:8000)',
      t.value(),
    )
    .option(
      '--auth-env <ENV_NAME>',
      'environment variable holding the credential (default SVC_ROUTER_TOKEN)',
      t.value(),
    )
    .option('--timeout <seconds>', 'per socket read, not a total deadline (0 < s <= 30, default 5)', t.value())
    .action((id: string | undefined, o: RawDiagnoseOptions) => runReadAction(() => diagnose(id, o, t)));
}
