import { existsSync, lstatSync, readlinkSync, realpathSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Subject } from 'rxjs';
import { Pool } from 'undici';
import { OwnerActor } from '../actors/owner-actor.js';
import { RouterRegistry, logWriteError, routerReading } from './records/router-registry.js';
import { DEFAULT_WINDOW_CAP } from '../actors/window.js';
import { AuthorizationPolicy, bearerToken } from '../auth/policy.js';
import type { RouterConfig } from '../config/router-config.js';
import { ConfigError, ErrorCode, pathFailure } from '../errors.js';
import type { ObservationBatch } from '../schema/envelopes.js';
import type { RouteName } from '../schema/terminal-record.js';
import type { Bus } from '../streams/bus.js';
import { NodeView } from '../streams/node-view.js';
import { openBus } from '../streams/open-bus.js';
import { ROUTER_OWNERS } from '../streams/query-node.js';
import { PACKAGE_VERSION } from '../version.js';
import { createHttpApp, lacksHost, listen, originForm } from '../http/http-app.js';
import { createNodeServer, reloadableTls } from '../http/tls.js';
import { Admission } from './admission.js';
import { DataPlaneKeys, digest, isCredentialText } from './api-keys.js';
import { DecisionLog } from './records/decision-log.js';
import { RouterMetrics } from './metrics.js';
import { Readiness } from './readiness.js';
import { cutUploads, relayInference } from './relay.js';
import type { RelayContext, Upstream } from './relay-context.js';
import { routerRoutes } from './router-routes.js';
import { serveRequestLookups } from './requests-responder.js';
import { InflightJournal, lockDecisionLog } from './records/inflight.js';
import { newGatewayId, refuseUpload, sendRawProblem } from './relay-support.js';
import { UploadBudget } from './upload-budget.js';
import { LineBudget } from '../http/line-budget.js';
import type { ServerDeps } from '../http/server-deps.js';
import type { Logger } from 'pino';
import { envVar } from '../config/env-var.js';
import { natsMetrics } from '../http/metrics-endpoint.js';

const INFERENCE: ReadonlyMap<string, RouteName> = new Map([
  ['/v1/chat/completions', 'chat.completions'],
  ['/v1/completions', 'completions'],
  ['/v1/embeddings', 'embeddings'],
  ['/v1/rerank', 'rerank'],
  ['/v1/audio/transcriptions', 'audio.transcriptions'],
  ['/v1/responses', 'responses'],
]);

/**
 * `path` with every symbolic link resolved: the file's, when it exists; a link whose target
 * does not exist yet, its target's (the file the log will be made as); else its folder's
 * plus its name.
 */
function canonicalPath(path: string, depth = 0): string {
  try {
    return realpathSync(path);
  } catch {
    // not there (yet), or a dangling link
  }
  try {
    if (depth < 16 && lstatSync(path).isSymbolicLink())
      return canonicalPath(resolve(dirname(path), readlinkSync(path)), depth + 1);
  } catch {
    // no such path at all
  }
  try {
    return join(realpathSync(dirname(path)), basename(path));
  } catch {
    return path;
  }
}

/**
 * The last line of defence for a relay that threw where nothing expected it: one log line
 * (the error's name only) and a fixed problem, never an unhandled rejection that ends the
 * process with every request in flight.
 */
function relayCrashed(res: ServerResponse, log: Logger, err: unknown): void {
  log.error({ err }, 'relay failed unexpectedly');
  if (!res.headersSent) sendRawProblem(res, ErrorCode.INTERNAL);
  else res.destroy();
}

/** Percent-encoded unreserved characters (letters, digits, `-._~`) decoded; every other escape kept. */
export function decodeUnreserved(path: string): string {
  return path.replace(/%([0-9A-Fa-f]{2})/g, (m, hex: string) => {
    const c = String.fromCharCode(parseInt(hex, 16));
    return /[A-Za-z0-9\-._~]/.test(c) ? c : m;
  });
}

/** The inference route a request's path names, or undefined. */
function inferenceRoute(req: IncomingMessage): RouteName | undefined {
  // Absolute form too (RFC 9112 3.2.2): the one place the raw URL is matched; Fastify's
  // routes see it rewritten (createHttpApp's rewriteUrl).
  const url = req.url === undefined ? undefined : originForm(req.url);
  const q = url?.indexOf('?') ?? -1;
  let path = q < 0 ? url : url!.slice(0, q);
  // `/v1/chat/completion%73` names the same resource (RFC 3986 6.2.2.2), as Fastify's
  // routes already treat it: unreserved characters are decoded before the match.
  if (path?.includes('%')) path = decodeUnreserved(path);
  return path ? INFERENCE.get(path) : undefined;
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
  close(): Promise<void>;
}

export type RouterDeps = ServerDeps;

/**
 * The router: an OpenAI-compatible gateway. Inference routes take a lean path on node:http
 * straight to the relay (no framework work per request); every other route is served by
 * Fastify on the same port. The router owner actor publishes active and recent requests on
 * the bus, and `/v1/workloads` answers from the same fold a controller uses.
 * Thrown when: the configuration, keys, policy, decision log or bus cannot be used.
 */
export async function startRouter(cfg: RouterConfig, deps: RouterDeps): Promise<RouterHandle> {
  const log = deps.logger.child({ component: 'router', host: cfg.hostId });
  const env = deps.env ?? process.env;
  const keys = DataPlaneKeys.fromEnv(cfg.apiKeysEnv, env);
  const policy = cfg.policyPath ? AuthorizationPolicy.load(cfg.policyPath, env) : undefined;
  const tls = reloadableTls(cfg.tls, 'router', log);
  // Every credential the router knows, as digests (its data-plane keys and policy clients here;
  // the engine keys and NATS secrets below): one hash and one lookup decide whether a caller
  // id is a credential (a drop decision: constant time is not needed).
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
  let decisionLog: DecisionLog | undefined;
  let unlock: (() => void) | undefined;
  if (cfg.decisionLog) {
    // One log, one name: a path that reaches the log through a symbolic link is the log's own
    // path (two routers naming one file two ways must meet at one lock).
    const logPath = canonicalPath(cfg.decisionLog.path);
    unlock = lockDecisionLog(logPath);
    decisionLog = new DecisionLog(logPath, cfg.decisionLog.maxBytes, cfg.decisionLog.maxFiles, (err, n) =>
      logWriteError(log, err, n),
    );
    // The log's file or folder was removed under the router and made again: so is its lock, or
    // a second router could start on this log. A lock another live router took meanwhile is
    // reported, not fought over.
    decisionLog.onReopened = () => {
      try {
        const release = lockDecisionLog(logPath);
        const previous = unlock;
        unlock = () => {
          previous?.();
          release();
        };
      } catch (err) {
        log.error(
          { err },
          'decision log lock could not be taken again after its file was removed; another router process may be using this log',
        );
      }
    };
    try {
      decisionLog.open();
    } catch (err) {
      unlock();
      // A path the configuration got wrong (no permission, not a directory) is a configuration
      // error; a full disk or an I/O error is not (exit 1, not 2).
      throw pathFailure(err, 'router configuration: decision_log_path cannot be opened for writing');
    }
  }
  let metrics: RouterMetrics | undefined;
  const registry = new RouterRegistry({
    host: cfg.hostId,
    bufferSize: cfg.bufferSize,
    log: decisionLog,
    logger: log,
    onFinish: (record, streamed) => metrics?.finished(record, streamed),
  });
  const upstreams = new Map<string, Upstream>();
  metrics = new RouterMetrics(
    registry,
    cfg.models.map((m) => m.alias),
    { queueDepth: (alias) => upstreams.get(alias)?.admission.queued ?? 0 },
  );
  // A journal left behind: the last router on this log was killed, and its requests of the
  // last moments may have no record at all (known before the window is restored from the log).
  if (decisionLog && existsSync(`${decisionLog.path}.inflight`)) decisionLog.markUnclean();
  // After a restart the window holds what it held before (the decision log's last day), and
  // requests the previous process died with get the one record they never had.
  const restored = registry.restore();
  if (restored > 0) log.info({ records: restored }, 'terminal records restored from the decision log');
  let journal: InflightJournal | undefined;
  let stopJournalNudges: (() => void) | undefined;
  if (decisionLog) {
    const dl = decisionLog;
    journal = new InflightJournal(
      `${decisionLog.path}.inflight`,
      registry,
      log,
      { routing_config_hash: cfg.routingConfigHash, package_version: PACKAGE_VERSION },
      () => dl.flushQuietly(),
    );
    const left = InflightJournal.read(journal.path);
    let interrupted: number;
    try {
      interrupted = registry.recordInterrupted(left.entries, left.writtenAt);
    } catch (err) {
      decisionLog?.close();
      unlock?.();
      throw pathFailure(err, 'router configuration: decision_log_path cannot be written');
    }
    if (interrupted > 0)
      log.warn({ records: interrupted }, 'requests in flight when the router last stopped recorded as errors');
    journal.write();
    journal.start();
    // Rotation may delete a finished request's record: the journal must not still name that
    // request, or a kill now would record it at the next start as one the router ended.
    const j = journal;
    decisionLog.onRotated = () => j.write(true);
    // A request that began is named in the journal within the log's flush delay.
    stopJournalNudges = registry.onChange(() => j.soon());
  }
  const pools: Pool[] = [];
  for (const m of cfg.models) {
    let apiKey: string | undefined;
    if (m.upstreamApiKeyEnv) {
      apiKey = envVar(env, m.upstreamApiKeyEnv);
      if (!apiKey?.trim())
        throw new ConfigError(
          `router configuration: environment variable ${m.upstreamApiKeyEnv} (upstream key of "${m.alias}") ${apiKey === undefined ? 'is not set' : 'is empty'}`,
        );
      // Sent as `Authorization: Bearer <key>`: one a header cannot carry would fail every request.
      apiKey = apiKey.trim();
      if (!isCredentialText(apiKey))
        throw new ConfigError(
          `router configuration: environment variable ${m.upstreamApiKeyEnv} (upstream key of "${m.alias}") is not 1-4096 printable ASCII characters without spaces`,
        );
    }
    const pool = new Pool(m.upstreamOrigin, {
      connections: m.maxConcurrency + 2,
      keepAliveTimeout: 30_000,
      pipelining: 1,
    });
    pools.push(pool);
    upstreams.set(m.alias, {
      route: m,
      pool,
      admission: new Admission(m.maxConcurrency, m.maxQueue, m.queueTimeoutMs),
      apiKey,
    });
    if (apiKey !== undefined) credentials.add(digest(apiKey));
  }
  // The NATS secrets are credentials the router holds too: a caller id carrying one is dropped.
  for (const name of [cfg.nats?.passwordEnv, cfg.nats?.tokenEnv]) {
    const v = name === undefined ? undefined : envVar(env, name);
    if (v) credentials.add(digest(v));
  }
  const startedAt = new Date().toISOString();
  const m = metrics;
  // A request refused before authentication has no id (and no record): counted apart, by status.
  const countRefusal = (res: ServerResponse): void => {
    if (!res.hasHeader('x-svc-request-id')) m.authRefused(res.statusCode);
  };
  const knownCredential = (authorization: string | string[] | undefined): boolean => {
    const token = policy ? bearerToken(authorization) : undefined;
    return token !== undefined && policy!.authenticate(token) !== undefined;
  };
  const ctx: RelayContext = {
    cfg,
    registry,
    keys,
    knownCredential,
    isCredential: (v) => credentials.has(digest(v)),
    readiness: new Readiness(cfg.readinessTtlMs),
    upstreams,
    logger: log,
    packageVersion: PACKAGE_VERSION,
    stopping: { value: false },
    uploading: new Set(),
    uploadBudget: new UploadBudget(Math.max(UPLOAD_BUDGET_BYTES, 4 * cfg.maxBodyBytes)),
    failureLines: new LineBudget(FAILURE_LINES_PER_SECOND, (skipped) =>
      log.info({ skipped }, 'request lines left out (rate bound); every routed request has its terminal record'),
    ),
  };

  const bus = deps.bus ?? (await openBus(cfg.nats, env, log, `svc-serving router ${cfg.hostId}`));
  const ownsBus = deps.bus === undefined;
  const stopNatsMetrics = natsMetrics(metrics.registry, bus);
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

  const app = createHttpApp({
    logger: log,
    tls,
    // An authenticated inference request refused by node:http itself still gets its id.
    refusedHeaders: (req) =>
      inferenceRoute(req) !== undefined && keys.accepts(req.headers.authorization)
        ? { 'x-svc-request-id': newGatewayId() }
        : undefined,
    serverFactory: (handler) =>
      createNodeServer(
        tls,
        { keepAliveTimeout: 65_000, requestTimeout: ROUTER_REQUEST_TIMEOUT_MS, requireHostHeader: false },
        (req: IncomingMessage, res: ServerResponse) => {
          const route = inferenceRoute(req);
          if (route === undefined) handler(req, res);
          else if (req.method === 'POST')
            relayInference(req, res, route, ctx).then(
              () => countRefusal(res),
              (err: unknown) => relayCrashed(res, log, err),
            );
          else {
            // An authenticated inference route answers with its identifier, errors included.
            if (keys.accepts(req.headers.authorization)) res.setHeader('x-svc-request-id', newGatewayId());
            if (lacksHost(req)) refuseUpload(req, res, ErrorCode.INVALID_INPUT);
            else {
              res.setHeader('allow', 'POST');
              refuseUpload(req, res, ErrorCode.METHOD_NOT_ALLOWED);
            }
          }
        },
      ),
  });
  await app.register(routerRoutes, {
    cfg,
    keys,
    knownCredential,
    policy,
    registry,
    metrics,
    startedAt,
    packageVersion: PACKAGE_VERSION,
    workloads: async (f) => {
      await actor.refresh();
      return view.query(f);
    },
  });
  const closeAll = async (): Promise<void> => {
    stopChanges();
    // The last queued records may still rotate the log as it closes: the journal is gone by
    // then (a graceful stop leaves none behind), so no rotation rewrites it.
    if (decisionLog) decisionLog.onRotated = undefined;
    stopJournalNudges?.();
    journal?.stop();
    lookups.stop();
    actor.stop();
    view.stop();
    await Promise.all(pools.map((p) => p.close().catch(() => undefined)));
    stopNatsMetrics();
    if (ownsBus) await bus.close();
    decisionLog?.close();
    unlock?.();
  };
  let url: string;
  try {
    url = await listen(app, cfg.listen.host, cfg.listen.port);
  } catch (err) {
    await closeAll();
    throw err;
  }
  return {
    url,
    registry,
    bus,
    async close() {
      // Stop taking requests; requests in flight finish (and are recorded) or are cut at 5 s.
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
      // Connections are closed; a relay may still be writing its record (bounded wait).
      for (let i = 0; i < 50 && registry.active.size > 0; i++) await new Promise((r) => setTimeout(r, 20));
      await closeAll();
    },
  };
}
