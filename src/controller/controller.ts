import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { AuthorizationPolicy } from '../auth/policy.js';
import type { NodeConfig } from '../config/node-config.js';
import type { Bus } from '../streams/bus.js';
import { NodeView } from '../streams/node-view.js';
import { openBus } from '../streams/open-bus.js';
import { CONTROLLER_OWNERS } from '../streams/query-node.js';
import { nodeRead, toolsCallRoutes } from '../mcp/tools-call-routes.js';
import { createHttpApp, listen, loopbackHosts } from '../http/http-app.js';
import { reloadableTls, type ReloadableTls } from '../http/tls.js';
import { mcpRoutes } from '../mcp/mcp-routes.js';
import { healthRoutes, watchNats, type ReadinessChecks } from '../http/health-routes.js';
import { lifecycleRoutes } from './lifecycle-routes.js';
import { JobService } from '../jobs/job-service.js';
import { createJobActor } from '../actors/job-actor.js';
import { isCredentialText } from '../auth/api-keys.js';
import { ConfigError } from '../errors.js';
import { NODE_RESULT_JSON_SCHEMA } from '../schema/json-schemas.js';
import { serveNodeWorkloads } from './workloads-responder.js';
import { startTracing } from '../telemetry/tracing.js';
import { ReadSpans } from '../telemetry/read-spans.js';
import { knownCredential } from '../auth/known-credentials.js';
import { DEFAULT_CONTAINER_SOCKET, startRecipeActors } from '../actors/recipe-actor.js';
import { takeProcessLock } from '../stores/process-lock.js';
import { DockerEngineClient } from '../recipes/docker-api.js';
import { RecipeLifecycle } from '../recipes/recipe-lifecycle.js';
import type { ServerDeps } from '../http/server-deps.js';
import { envVar } from '../config/env-var.js';
import { busRequestAsker } from '../mcp/ask-routers.js';
import { requestMcpTools, requestToolsCall, type RequestAsker } from '../mcp/request-tools.js';
import { countAnswers, metricsAuth, metricsRoute, natsMetrics } from '../http/metrics-endpoint.js';
import { ControllerMetrics } from './controller-metrics.js';

/** How long the controller waits for its own host's router to answer a request lookup. */
const ROUTER_LOOKUP_TIMEOUT_MS = 2_000;

/** How long a `/readyz` answer is reused (its store reads are cheap, but a probe storm is not free). */
const HEALTH_CACHE_MS = 1_000;

/**
 * The controller's failing readiness checks: `nats` while its NATS connection is down, and
 * `store:<owner>` for a job store (controller, benchmark, media) that cannot be read or whose
 * file is gone. docs/decisions/0053.
 */
function controllerFailing(jobs: JobService, natsDown: () => boolean): string[] {
  const failing: string[] = natsDown() ? ['nats'] : [];
  for (const owner of ['controller', 'benchmark', 'media'] as const) {
    try {
      if (!existsSync(jobs.paths[owner])) throw new Error('store file gone');
      jobs.stores[owner].get('readyz');
    } catch {
      failing.push(`store:${owner}`);
    }
  }
  return failing;
}

export interface ControllerHandle {
  readonly url: string;
  readonly view: NodeView;
  readonly bus: Bus;
  /** The node's lifecycle side (the one-process node drives demo jobs through it). */
  readonly jobs: JobService;
  close(): Promise<void>;
}

export type ControllerDeps = ServerDeps;

/** The controller's HTTP surface over a running view (tests drive it with `inject()`). */
export async function buildControllerApp(deps: {
  logger: Logger;
  policy: AuthorizationPolicy;
  /** Spans of the reads, while traces are exported. */
  spans?: ReadSpans | undefined;
  view: NodeView;
  allowedHosts?: () => readonly string[] | undefined;
  jobs?: JobService;
  /** The request diagnosis tools' source (the node's own router over the bus). */
  requests?: RequestAsker;
  /** `/metrics`, and reads counted by how they ended. */
  metrics?: { readonly metrics: ControllerMetrics; readonly requireAuth: boolean };
  /** `/readyz`'s failing checks (controllerFailing); absent: ready while it serves. */
  failing?: ReadinessChecks;
  /** Called before any route is added (the OpenAPI generator's hook; createHttpApp). */
  beforeRoutes?: (app: FastifyInstance) => void;
  /** HTTPS, re-read on SIGHUP. */
  tls?: ReloadableTls | undefined;
}): Promise<FastifyInstance> {
  const app = createHttpApp({
    logger: deps.logger,
    tls: deps.tls,
    ...(deps.beforeRoutes ? { beforeRoutes: deps.beforeRoutes } : {}),
  });
  await app.register(healthRoutes, { ...(deps.failing ? { failing: deps.failing } : {}), cacheMs: HEALTH_CACHE_MS });
  if (deps.metrics) {
    const m = deps.metrics.metrics;
    countAnswers(app, { '/tools/call': 'http', '/mcp': 'mcp' }, (via, outcome) =>
      m.read(via as 'http' | 'mcp', outcome),
    );
    metricsRoute(
      app,
      m.registry,
      deps.metrics.requireAuth ? (req) => metricsAuth(deps.policy, req.headers.authorization) : undefined,
    );
  }
  if (deps.jobs) await app.register(lifecycleRoutes, { policy: deps.policy, jobs: deps.jobs });
  const read = nodeRead((f) => deps.view.query(f));
  await app.register(toolsCallRoutes, {
    policy: deps.policy,
    tools: { node_workloads: read },
    ...(deps.requests ? { requestTools: requestToolsCall(deps.requests) } : {}),
    spans: deps.spans,
  });
  await app.register(mcpRoutes, {
    policy: deps.policy,
    allowedHosts: deps.allowedHosts ?? (() => loopbackHosts(app)),
    spans: deps.spans,
    tools: {
      node_workloads: {
        description:
          'Read-only workload inventory of this node (svc-workloads/v1 NodeResult, all six owner sources). Observation only: it starts, stops or changes nothing.',
        grant: 'workloads:read',
        outputSchema: NODE_RESULT_JSON_SCHEMA,
        run: read,
      },
      ...(deps.requests ? requestMcpTools(deps.requests, 'on this node') : {}),
    },
  });
  return app;
}

/**
 * Where jobs send their requests: the router's URL and the first key of `router_key_env`.
 * Thrown when: the variable is unset, holds no key, or a key no header can carry (ConfigError).
 */
function routerTargetOf(
  router: NonNullable<NodeConfig['router']>,
  env: NodeJS.ProcessEnv,
): { url: string; key: string } {
  // The same variable as the router's `api_keys_env` may be named here: of a comma-separated
  // list (key rotation), the first key is the one jobs send.
  const key = (envVar(env, router.keyEnv) ?? '')
    .split(',')
    .map((k) => k.trim())
    .find((k) => k.length > 0);
  if (!key)
    throw new ConfigError(
      `node configuration: environment variable ${router.keyEnv} (router_key_env) ${envVar(env, router.keyEnv) === undefined ? 'is not set' : 'holds no key'}`,
    );
  // Sent as `Authorization: Bearer <key>`: one no header can carry would fail every job.
  if (!isCredentialText(key))
    throw new ConfigError(
      `node configuration: environment variable ${router.keyEnv} (router_key_env) holds a key that is not 1-4096 printable ASCII characters without spaces`,
    );
  return { url: router.url, key };
}

/** The controller, benchmark and media owner actors over the job stores; returns their stop. */
function startJobActors(cfg: NodeConfig, jobs: JobService, bus: Bus, log: Logger): () => Promise<void> {
  const jobActors = (['controller', 'benchmark', 'media'] as const).map((owner) =>
    createJobActor({
      host: cfg.hostId,
      owner,
      storePath: jobs.paths[owner],
      bus,
      staleAfterMs: cfg.staleAfterMs,
      logger: log,
    }),
  );
  const jobChanges = jobs.changes.subscribe((owner) => jobActors.find((a) => a.owner === owner)?.notify());
  for (const a of jobActors) a.start();
  return async () => {
    jobChanges.unsubscribe();
    for (const a of jobActors) a.stop();
    await jobs.close();
    for (const a of jobActors) a.closeStore();
  };
}

/** The node's fold (NodeView) and its metrics, started: what every read answers from. */
function startNodeFold(
  cfg: NodeConfig,
  bus: Bus,
  log: Logger,
): { view: NodeView; metrics: ControllerMetrics; stop(): void } {
  const metrics = new ControllerMetrics({
    owners: CONTROLLER_OWNERS,
    staleAfterMs: cfg.staleAfterMs,
    snapshot: () => view.snapshot,
  });
  const stopNatsMetrics = natsMetrics(metrics.registry, bus);
  const view = new NodeView({
    host: cfg.hostId,
    bus,
    staleAfterMs: cfg.staleAfterMs,
    owners: CONTROLLER_OWNERS,
    logger: log,
    onFold: metrics.folded,
  });
  view.start();
  return {
    view,
    metrics,
    stop() {
      view.stop();
      stopNatsMetrics();
    },
  };
}

/** The job stores and lifecycle operations. Thrown when: the state directory cannot be used. */
function openJobs(
  cfg: NodeConfig,
  routerTarget: { url: string; key: string } | undefined,
  log: Logger,
  env: NodeJS.ProcessEnv,
): JobService {
  // Recipe commands read env values from this environment at apply time, never earlier.
  const recipes = cfg.recipesDir
    ? new RecipeLifecycle(cfg.recipesDir, new DockerEngineClient(cfg.containerSocket ?? DEFAULT_CONTAINER_SOCKET), env)
    : undefined;
  return new JobService(cfg.stateDir, routerTarget, log, {
    ...(recipes ? { recipes } : {}),
    ...(cfg.mediaDir ? { mediaDir: cfg.mediaDir } : {}),
  });
}

/** What the node runs on its bus: the owner actors of jobs and recipes, and the NATS workload reads. */
function startBusWork(
  cfg: NodeConfig,
  bus: Bus,
  jobs: JobService,
  fold: { view: NodeView; metrics: ControllerMetrics },
  spans: ReadSpans | undefined,
  log: Logger,
): { stop(): Promise<void> } {
  const stopJobs = startJobActors(cfg, jobs, bus, log);
  const recipeActors = startRecipeActors(cfg, bus, log);
  const responder = serveNodeWorkloads(
    bus,
    cfg.hostId,
    (f) => fold.view.query(f),
    log,
    (outcome, startedMs, headers) => {
      fold.metrics.read('nats', outcome);
      // The asker's trace continued (the fleet's per-node span), checked and cleaned as over HTTP.
      spans
        ?.start(
          'node_workloads',
          'server',
          headers && { traceparent: headers.get('traceparent'), tracestate: headers.get('tracestate') },
          { 'svc.tool': 'node_workloads', 'svc.node': cfg.hostId },
          startedMs,
        )
        .end({ 'svc.outcome': outcome }, outcome === 'ok' ? undefined : outcome);
    },
  );
  return {
    async stop() {
      responder.stop();
      await recipeActors.stop();
      await stopJobs();
    },
  };
}

/**
 * The node controller: folds all six owners' observations from the bus into the node
 * snapshot, and answers `node_workloads` over `POST /tools/call` and NATS request/reply.
 * Thrown when: the configuration, policy or bus cannot be used (ConfigError and kin).
 */
export async function startController(cfg: NodeConfig, deps: ControllerDeps): Promise<ControllerHandle> {
  const log = deps.logger.child({ component: 'controller', host: cfg.hostId });
  const env = deps.env ?? process.env;
  const policy = AuthorizationPolicy.load(cfg.policyPath, env);
  const tls = reloadableTls(cfg.tls, 'node', log);
  // Everything that can refuse the start is checked before anything is opened or started.
  const routerTarget = cfg.router ? routerTargetOf(cfg.router, env) : undefined;
  // One controller per state directory: a second one would mark the first one's running jobs
  // interrupted at start while they go on, and both would write the same stores.
  const unlock = takeProcessLock(join(cfg.stateDir, 'controller.lock'), {
    busy: 'node configuration: state_dir is in use by another running controller process',
    failed: 'node configuration: state_dir cannot be locked for writing',
  });
  let bus: Bus;
  try {
    bus = deps.bus ?? (await openBus(cfg.nats, env, log, `svc-serving controller ${cfg.hostId}`));
  } catch (err) {
    unlock();
    throw err;
  }
  const ownsBus = deps.bus === undefined;
  const fold = startNodeFold(cfg, bus, log);
  let jobs: JobService;
  try {
    jobs = openJobs(cfg, routerTarget, log, env);
  } catch (err) {
    unlock();
    fold.stop();
    if (ownsBus) await bus.close();
    throw err;
  }
  // Off unless the OTEL_* variables ask for it (the SDK is not even loaded then).
  const tracing = await startTracing(log, env);
  const spans = tracing ? new ReadSpans(tracing, knownCredential(policy, cfg.nats, env, routerTarget?.key)) : undefined;
  const work = startBusWork(cfg, bus, jobs, fold, spans, log);
  const nats = watchNats(bus);
  const stopAll = async (): Promise<void> => {
    nats.stop();
    await work.stop();
    unlock();
    fold.stop();
    if (ownsBus) await bus.close();
    await tracing?.release();
  };
  let app: FastifyInstance;
  let url: string;
  try {
    app = await buildControllerApp({
      logger: log,
      policy,
      view: fold.view,
      jobs,
      requests: busRequestAsker(bus, [{ hostId: cfg.hostId }], ROUTER_LOOKUP_TIMEOUT_MS),
      metrics: { metrics: fold.metrics, requireAuth: cfg.metricsRequireAuth === true },
      failing: () => controllerFailing(jobs, nats.down),
      spans,
      tls,
    });
    url = await listen(app, cfg.listen.host, cfg.listen.port);
  } catch (err) {
    await stopAll();
    throw err;
  }
  return {
    url,
    view: fold.view,
    bus,
    jobs,
    async close() {
      await app.close();
      await stopAll();
    },
  };
}
