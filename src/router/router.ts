import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { Subject } from 'rxjs';
import { OwnerActor } from '../actors/owner-actor.js';
import { routerReading } from './records/router-registry.js';
import { DEFAULT_WINDOW_CAP } from '../actors/window.js';
import { AuthorizationPolicy, bearerToken } from '../auth/policy.js';
import type { RouterConfig } from '../config/router-config.js';
import { ConfigError, ErrorCode } from '../errors.js';
import type { ObservationBatch } from '../schema/envelopes.js';
import type { RouteName } from '../schema/terminal-record.js';
import type { Bus } from '../streams/bus.js';
import { NodeView } from '../streams/node-view.js';
import { openBus } from '../streams/open-bus.js';
import { ROUTER_OWNERS } from '../streams/query-node.js';
import { PACKAGE_VERSION } from '../version.js';
import { createHttpApp, listen, originForm } from '../http/http-app.js';
import { createNodeServer, reloadableTls, type ReloadableTls } from '../http/tls.js';
import { natsMetrics } from '../http/metrics-endpoint.js';
import { answerConnectionFault, recordCrash, refuseExpectation, refuseMethod } from './relay-refusal.js';
import type { RouterMetrics } from './metrics.js';
import { DataPlaneKeys, digest } from '../auth/api-keys.js';
import { cutUploads, relayInference } from './relay.js';
import type { RelayContext } from './relay-context.js';
import { routerRoutes } from './router-routes.js';
import { responsesRoutes } from './responses-routes.js';
import { ResponseIds } from './response-ids.js';
import { serveRequestLookups } from './requests-responder.js';
import { sendRawProblem } from './relay-support.js';
import type { RouterRegistry } from './records/router-registry.js';
import { openRouterRecords, type RouterRecords } from './router-records.js';
import { buildRoutingTable, closeTable, retireTable } from './routing-table.js';
import { reloadRouting, type ReloadResult, type RoutingState } from './router-reload.js';
import { routerFailing } from './router-health.js';
import { healthRoutes } from '../http/health-routes.js';
import { UploadBudget } from './upload-budget.js';
import { ID_REASON } from './request-lookups.js';
import { LineBudget } from '../http/line-budget.js';
import type { ServerDeps } from '../http/server-deps.js';
import type { Logger } from 'pino';
import { envVar } from '../config/env-var.js';
import { startTracing, type Tracing } from '../telemetry/tracing.js';
import { emitRequestSpan, serverAddress } from '../telemetry/request-span.js';
import type { TerminalRecord } from '../schema/terminal-record.js';
import type { RequestTrace } from '../telemetry/trace-context.js';

const INFERENCE: ReadonlyMap<string, RouteName> = new Map([
  ['/v1/chat/completions', 'chat.completions'],
  ['/v1/completions', 'completions'],
  ['/v1/embeddings', 'embeddings'],
  ['/v1/rerank', 'rerank'],
  ['/v1/audio/transcriptions', 'audio.transcriptions'],
  ['/v1/responses', 'responses'],
]);

/**
 * The last line of defence for a relay that threw where nothing expected it: one log line
 * (the error's name only), the fixed 500 error object (or the connection closed when an
 * answer had begun) and the request's one terminal record when it has none yet, never an
 * unhandled rejection that ends the process with every request in flight.
 */
function relayCrashed(res: ServerResponse, route: RouteName, ctx: RelayContext, err: unknown): void {
  ctx.logger.error({ err }, 'relay failed unexpectedly');
  if (!res.headersSent) sendRawProblem(res, ErrorCode.INTERNAL);
  else res.destroy();
  try {
    recordCrash(ctx, res, route);
  } catch (e) {
    ctx.logger.error({ err: e }, 'record of a failed relay not written');
  }
}

/** Percent-encoded unreserved characters (letters, digits, `-._~`) decoded; every other escape kept. */
export function decodeUnreserved(path: string): string {
  return path.replace(/%([0-9A-Fa-f]{2})/g, (m, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return /[A-Za-z0-9\-._~]/.test(c) ? c : m;
  });
}

/** A request's path as the router matches it, or undefined. */
function requestPath(req: IncomingMessage): string | undefined {
  // Absolute form too (RFC 9112 3.2.2): the one place the raw URL is matched; Fastify's
  // routes see it rewritten (createHttpApp's rewriteUrl).
  const url = req.url === undefined ? undefined : originForm(req.url);
  const q = url?.indexOf('?') ?? -1;
  const path = q < 0 ? url : url!.slice(0, q);
  // `/v1/chat/completion%73` names the same resource (RFC 3986 6.2.2.2), as Fastify's
  // routes already treat it: unreserved characters are decoded before the match.
  return path?.includes('%') ? decodeUnreserved(path) : path;
}

/** The inference route a request's path names, or undefined. */
function inferenceRoute(req: IncomingMessage): RouteName | undefined {
  const path = requestPath(req);
  return path ? INFERENCE.get(path) : undefined;
}

const OPENAI_ROUTE_TAIL =
  /\/(?:chat\/completions|completions|embeddings|rerank|audio\/transcriptions|responses(?:\/[^/]+(?:\/cancel|\/input_items)?)?|models(?:\/.*)?)\/?$/;
const CONTROL_PATH = /^\/v1\/(?:requests|router|workloads)(?:\/|$)/;

/** A path ending as an OpenAI API route does, whatever comes before it, outside the router's read routes (an id may end so). */
function asksOpenAiRoute(path: string): boolean {
  return OPENAI_ROUTE_TAIL.test(path) && !CONTROL_PATH.test(path);
}

/** The stored-response routes (responses-routes.ts), which identify and record as the inference routes do. */
const STORED_RESPONSE_PATH = /^\/v1\/responses\/[^/]+(?:\/cancel|\/input_items)?$/;

/** The route whose ids and record a request node:http answers itself gets: an inference or stored-response path. */
function recordedRoute(req: IncomingMessage): RouteName | undefined {
  const path = requestPath(req);
  if (path === undefined) return undefined;
  return INFERENCE.get(path) ?? (STORED_RESPONSE_PATH.test(path) ? 'responses' : undefined);
}

/**
 * Longest time a request may take to arrive whole at the router (node's own default, made
 * explicit): an upload of up to `max_body_bytes` of audio on a slow link needs minutes.
 */
const ROUTER_REQUEST_TIMEOUT_MS = 300_000;

/** Request body bytes held at once while they arrive, at least (4 x `max_body_bytes` when more). */
const UPLOAD_BUDGET_BYTES = 256 * 1024 * 1024;

/** How long a graceful stop lets requests in flight finish before it cuts them. */
const STOP_GRACE_MS = 5_000;

/** `request finished` lines of failed requests per second, at most (the rest are counted). */
const FAILURE_LINES_PER_SECOND = 100;

export interface RouterHandle {
  readonly url: string;
  readonly registry: RouterRegistry;
  readonly bus: Bus;
  /**
   * Reads the configuration again (SIGHUP) and puts its `[[models]]` in service; a file that
   * fails validation leaves the running configuration in place (router-reload.ts).
   */
  reload(load: () => RouterConfig): ReloadResult;
  close(): Promise<void>;
}

export interface RouterDeps extends ServerDeps {
  /**
   * Longest time a request may take to arrive whole (default ROUTER_REQUEST_TIMEOUT_MS) and how
   * often node checks it (default 30 s): tests shorten both to reach the cut in a second.
   */
  readonly requestTimeoutMs?: number;
  readonly connectionsCheckIntervalMs?: number;
}

/**
 * Every credential the router knows, as digests (its data-plane keys, policy clients and NATS
 * secrets here; the engine keys join as the routing table is built): one hash and one lookup
 * decide whether a caller id is a credential (a drop decision: constant time is not needed).
 * Thrown when: a data-plane key is also a policy client's token (ConfigError).
 */
function knownCredentials(
  cfg: RouterConfig,
  keys: DataPlaneKeys,
  policy: AuthorizationPolicy | undefined,
  env: NodeJS.ProcessEnv,
): Set<string> {
  const policyDigests = policy?.clientsByDigest() ?? new Map<string, string>();
  const credentials = new Set([...keys.digestsHex(), ...policyDigests.keys()]);
  // A data-plane key that is also a policy client's token would be two identities in one
  // credential (that client would relay inference and be refused its reads): refused at start.
  for (const d of keys.digestsHex()) {
    const client = policyDigests.get(d);
    if (client !== undefined)
      throw new ConfigError(
        `router configuration: a key in ${cfg.apiKeysEnv} is also the credential of policy client "${client}"`,
      );
  }
  for (const name of [cfg.nats?.passwordEnv, cfg.nats?.tokenEnv]) {
    const v = name === undefined ? undefined : envVar(env, name);
    if (v) credentials.add(digest(v));
  }
  return credentials;
}

/**
 * The router's own workload view: its owner actor publishes active and recent requests on the
 * bus, its view folds them, and the request lookups are served over request/reply too.
 */
function startObservation(cfg: RouterConfig, bus: Bus, registry: RouterRegistry, log: Logger) {
  // The router's own view folds its actor's batches as objects; the bus carries them (encoded)
  // only to whoever else listens, e.g. a controller over NATS.
  const own = new Subject<ObservationBatch>();
  const actor = new OwnerActor({
    host: cfg.hostId,
    owner: 'router',
    bus,
    staleAfterMs: cfg.staleAfterMs,
    pollMs: 1000,
    minIntervalMs: 200,
    logger: log,
    local: (batch) => own.next(batch),
    // A standalone router's window is read when someone asks for it, not thousands of times a
    // second for nobody; a controller on the bus gets it published as usual.
    onDemand: true,
    read: () => routerReading(registry, Date.now(), DEFAULT_WINDOW_CAP),
  });
  const stopChanges = registry.onChange(() => actor.notify());
  const view = new NodeView({
    host: cfg.hostId,
    bus,
    staleAfterMs: cfg.staleAfterMs,
    owners: ROUTER_OWNERS,
    logger: log,
    local: own,
  });
  view.start();
  actor.start();
  // The request lookups over request/reply too: the fleet and the node's controller ask here.
  const lookups = serveRequestLookups(bus, cfg.hostId, registry, log);
  return {
    workloads: async (f: Parameters<NodeView['query']>[0]) => {
      await actor.refresh();
      return view.query(f);
    },
    stopChanges,
    stop() {
      lookups.stop();
      actor.stop();
      view.stop();
    },
  };
}

/**
 * The router's HTTP server: inference routes take a lean path on node:http straight to the
 * relay (no framework work per request); every other route is served by Fastify.
 */
function routerApp(
  ctx: RelayContext,
  metrics: RouterMetrics,
  tls: ReloadableTls | undefined,
  log: Logger,
  deps: RouterDeps,
): FastifyInstance {
  const requestTimeout = deps.requestTimeoutMs ?? ROUTER_REQUEST_TIMEOUT_MS;
  // Node refuses a headers timeout longer than the request timeout.
  const timeouts = {
    requestTimeout,
    headersTimeout: Math.min(60_000, requestTimeout),
    ...(deps.connectionsCheckIntervalMs !== undefined
      ? { connectionsCheckingInterval: deps.connectionsCheckIntervalMs }
      : {}),
  };
  // A request refused before authentication has no id (and no record): counted apart, by status.
  const countRefusal = (res: ServerResponse): void => {
    if (!res.hasHeader('x-svc-request-id')) metrics.authRefused(res.statusCode);
  };
  return createHttpApp({
    logger: log,
    tls,
    // The data plane's model and stored-response routes answer OpenAI error objects
    // (CONTRACT.md, HTTP); so do the inference paths where node answers a request itself.
    openAiErrors: (path) =>
      path === '/v1/models' ||
      path.startsWith('/v1/models/') ||
      path.startsWith('/v1/responses/') ||
      INFERENCE.has(path.includes('%') ? decodeUnreserved(path) : path) ||
      asksOpenAiRoute(path),
    // What an OpenAI client asks under a wrong base URL (no /v1, another prefix, a trailing
    // slash): a 404 in its own shape that says where the routes are.
    unknownRoute: (path) => (asksOpenAiRoute(path) ? ErrorCode.ROUTE_NOT_FOUND : undefined),
    // A path parameter no route can read (bad percent-encoding, longer than any id): no alias,
    // response or record can have it, so the answer an unknown one gets, naming the parameter.
    unroutable: (path) =>
      path.startsWith('/v1/models/')
        ? { code: ErrorCode.MODEL_NOT_FOUND }
        : path.startsWith('/v1/responses/')
          ? { code: ErrorCode.RESPONSE_NOT_FOUND }
          : path.startsWith('/v1/requests/')
            ? { code: ErrorCode.INVALID_INPUT, invalid: { name: 'id', reason: ID_REASON } }
            : undefined,
    // Inference and stored-response requests node:http refuses itself (an unsupported
    // Expect), or whose connection fails while their body arrives: answered by the relay's
    // rules (an OpenAI error object; with a key, ids and one terminal record).
    answerExpectation: (req, res) => {
      const route = recordedRoute(req);
      if (route !== undefined) refuseExpectation(req, res, route, ctx);
      return route !== undefined;
    },
    answerFault: (res, err) => answerConnectionFault(ctx, res, err),
    serverFactory: (handler) =>
      createNodeServer(
        tls,
        { keepAliveTimeout: 65_000, ...timeouts, requireHostHeader: false },
        (req: IncomingMessage, res: ServerResponse) => {
          const route = inferenceRoute(req);
          if (route === undefined) handler(req, res);
          else if (req.method === 'POST')
            relayInference(req, res, route, ctx).then(
              () => countRefusal(res),
              (err: unknown) => relayCrashed(res, route, ctx, err),
            );
          // An authenticated inference route answers with its identifier (and leaves its record), errors included.
          else refuseMethod(req, res, route, ctx);
        },
      ),
  });
}

/**
 * Stops taking requests; requests in flight finish (and are recorded) or are cut at
 * STOP_GRACE_MS, each recorded as the router's error, not as a client that cancelled.
 */
async function stopGracefully(app: FastifyInstance, ctx: RelayContext, registry: RouterRegistry): Promise<void> {
  const closing = app.close();
  // A keep-alive connection whose request finishes during the close turns idle only then:
  // close it as soon as it does, or it holds the exit until the 5 s cut.
  const idle = setInterval(() => app.server.closeIdleConnections(), 100);
  let last: NodeJS.Timeout | undefined;
  const t = setTimeout(() => {
    // The cut: every request still running ends as the router's error (a stream gets a
    // closing error event, a waiting request a 503), recorded as such, not as a client
    // that cancelled. Connections still open half a second later are closed.
    ctx.stopping.value = true;
    for (const a of registry.active.values()) a.stop?.abort();
    cutUploads(ctx);
    last = setTimeout(() => app.server.closeAllConnections(), 500);
  }, STOP_GRACE_MS);
  await closing;
  clearInterval(idle);
  clearTimeout(t);
  clearTimeout(last);
  // Connections are closed; a relay may still be writing its record, and a request whose
  // upload the close cut has yet to see it cut and leave its record (bounded wait).
  for (let i = 0; i < 50 && (registry.active.size > 0 || ctx.uploading.size > 0); i++)
    await new Promise((r) => setTimeout(r, 20));
}

/**
 * A request's span from its terminal record: `server.address` is the replica that answered
 * (its host and port only), read from the routing table the request's alias has now.
 */
function requestSpans(
  tracing: Tracing,
  routing: RoutingState,
  log: Logger,
): (record: TerminalRecord, trace: RequestTrace) => void {
  return (record, trace) => {
    try {
      const replica = record.upstream_replica;
      const up = record.model === null || replica == null ? undefined : routing.table.upstreams.get(record.model);
      const target = up?.route.replicas[replica!];
      emitRequestSpan(tracing, record, trace, target ? serverAddress(target.origin) : undefined);
    } catch (err) {
      // A span is never worth a request's bookkeeping.
      log.warn({ errName: (err as Error)?.name }, 'request span not made');
    }
  };
}

/** What every relay shares: the keys and credentials, the routing table, the records and the bounds. */
function relayContext(
  cfg: RouterConfig,
  registry: RouterRegistry,
  keys: DataPlaneKeys,
  knownCredential: (authorization: string | string[] | undefined) => boolean,
  credentials: ReadonlySet<string>,
  routing: RoutingState,
  log: Logger,
  tracing: Tracing | undefined,
): RelayContext {
  return {
    cfg,
    registry,
    keys,
    knownCredential,
    isCredential: (v) => credentials.has(digest(v)),
    upstreams: routing.table.upstreams,
    logger: log,
    packageVersion: PACKAGE_VERSION,
    stopping: { value: false },
    uploading: new Map(),
    uploadBudget: new UploadBudget(Math.max(UPLOAD_BUDGET_BYTES, 4 * cfg.maxBodyBytes)),
    failureLines: new LineBudget(FAILURE_LINES_PER_SECOND, (skipped) =>
      log.info({ skipped }, 'request lines left out (rate bound); every routed request has its terminal record'),
    ),
    spanIds: tracing?.ids,
    responseIds: new ResponseIds(),
  };
}

/**
 * The router: an OpenAI-compatible gateway (routerApp), its records (router-records.ts), its
 * routing table (routing-table.ts, replaced by reload()), and its workload view: `/v1/workloads`
 * answers from the same fold a controller uses.
 * Thrown when: the configuration, keys, policy, decision log or bus cannot be used.
 */
export async function startRouter(cfg: RouterConfig, deps: RouterDeps): Promise<RouterHandle> {
  const log = deps.logger.child({ component: 'router', host: cfg.hostId });
  const env = deps.env ?? process.env;
  const keys = DataPlaneKeys.fromEnv(cfg.apiKeysEnv, env);
  const policy = cfg.policyPath ? AuthorizationPolicy.load(cfg.policyPath, env) : undefined;
  const tls = reloadableTls(cfg.tls, 'router', log);
  const credentials = knownCredentials(cfg, keys, policy, env);
  // Built before the log is opened: an unusable engine key refuses the start with nothing to undo.
  const routing: RoutingState = {
    table: buildRoutingTable(cfg.models, cfg.routingConfigHash, env, cfg.readinessTtlMs, credentials),
  };
  // Off unless the OTEL_* variables ask for it (the SDK is not even loaded then).
  const tracing = await startTracing(log, env);
  let records: RouterRecords;
  try {
    records = openRouterRecords(
      cfg,
      log,
      (alias) => routing.table.upstreams.get(alias)?.admission.queued ?? 0,
      tracing ? requestSpans(tracing, routing, log) : undefined,
    );
  } catch (err) {
    await tracing?.release();
    throw err;
  }
  const { registry, metrics } = records;
  const knownCredential = (authorization: string | string[] | undefined): boolean => {
    const token = policy ? bearerToken(authorization) : undefined;
    return token !== undefined && policy!.authenticate(token) !== undefined;
  };
  const ctx = relayContext(cfg, registry, keys, knownCredential, credentials, routing, log, tracing);
  const bus = deps.bus ?? (await openBus(cfg.nats, env, log, `svc-serving router ${cfg.hostId}`));
  const ownsBus = deps.bus === undefined;
  const stopNatsMetrics = natsMetrics(metrics.registry, bus);
  const observation = startObservation(cfg, bus, registry, log);
  const app = routerApp(ctx, metrics, tls, log, deps);
  await app.register(routerRoutes, {
    cfg,
    routing: () => routing.table,
    keys,
    knownCredential,
    policy,
    registry,
    metrics,
    startedAt: new Date().toISOString(),
    packageVersion: PACKAGE_VERSION,
    workloads: observation.workloads,
  });
  await app.register(responsesRoutes, { ctx, authRefused: (status) => metrics.authRefused(status) });
  await app.register(healthRoutes, { failing: () => routerFailing(routing.table, records.decisionLog), tag: 'router' });
  const closeAll = async (): Promise<void> => {
    observation.stopChanges();
    records.stopJournal();
    observation.stop();
    retireTable(routing.table);
    await closeTable(routing.table);
    stopNatsMetrics();
    if (ownsBus) await bus.close();
    records.close();
    // The spans of the last requests are exported before the process goes.
    await tracing?.release();
  };
  let url: string;
  try {
    url = await listen(app, cfg.listen.host, cfg.listen.port);
  } catch (err) {
    await closeAll();
    throw err;
  }
  const reloadDeps = { state: routing, ctx, started: cfg, env, credentials, metrics, identity: records.identity, log };
  return {
    url,
    registry,
    bus,
    reload: (load) => reloadRouting(reloadDeps, load),
    async close() {
      await stopGracefully(app, ctx, registry);
      await closeAll();
    },
  };
}
