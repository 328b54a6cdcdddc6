import type { FastifyInstance } from 'fastify';
import { AuthorizationPolicy } from '../auth/policy.js';
import type { FleetConfig } from '../config/fleet-config.js';
import type { NodeAnswer } from '../schema/answer-checks.js';
import type { FleetResult } from '../schema/envelopes.js';
import { resolveFilters, type FilterArgs } from '../schema/filters.js';
import { FLEET_RESULT_JSON_SCHEMA } from '../schema/json-schemas.js';
import type { Bus } from '../streams/bus.js';
import { FleetComposer, type DeclaredNode } from '../streams/compose-fleet.js';
import { openBus } from '../streams/open-bus.js';
import { toolsCallRoutes } from '../mcp/tools-call-routes.js';
import { createHttpApp, listen, loopbackHosts } from '../http/http-app.js';
import { reloadableTls, type ReloadableTls } from '../http/tls.js';
import { mcpRoutes } from '../mcp/mcp-routes.js';
import { healthRoutes, watchNats, type ReadinessChecks } from '../http/health-routes.js';
import { workloadsSubject } from '../schema/subjects.js';
import type { ServerDeps } from '../http/server-deps.js';
import { busRequestAsker } from '../mcp/ask-routers.js';
import { requestMcpTools, requestToolsCall, type RequestAsker } from '../mcp/request-tools.js';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { metricsAuth, metricsRoute, natsMetrics } from '../http/metrics-endpoint.js';
import { FleetMetrics } from './fleet-metrics.js';
import type { Context } from '@opentelemetry/api';
import { startTracing } from '../telemetry/tracing.js';
import { ReadSpans } from '../telemetry/read-spans.js';
import { knownCredential } from '../auth/known-credentials.js';

const encoder = new TextEncoder();

/**
 * Asks every declared node at once (parallel fan-out, one timeout for all) and composes the
 * fleet result, each answer checked and cut as it arrives (FleetComposer): the fleet keeps
 * only records that were among the newest `limit` when they came, never every node's raw
 * bytes at once, and its work overlaps the wait for the slowest node. Pure composition lives
 * in FleetComposer; this only does the I/O. With `trace`, each node's read is a span of its
 * own under the read's span (`workloads <node>`, its answer in `svc.node.answer`), whose
 * W3C trace context goes with the request for the node's own span to continue.
 */
export async function fleetWorkloads(
  bus: Bus,
  nodes: readonly DeclaredNode[],
  args: FilterArgs,
  timeoutMs: number,
  now: () => number = Date.now,
  trace?: { readonly spans: ReadSpans; readonly parent: Context | undefined },
): Promise<FleetResult> {
  const payload = encoder.encode(JSON.stringify(args));
  const composer = new FleetComposer(nodes, resolveFilters(args));
  await Promise.all(
    nodes.map(async (n, i): Promise<void> => {
      if (n.sleeping) return composer.add(i, { kind: 'sleeping' });
      const span = trace?.spans.start(`workloads ${n.hostId}`, 'client', trace.parent, { 'svc.node': n.hostId });
      let answer: NodeAnswer;
      try {
        // The node's read continues this span's trace (NATS headers; decision 0058).
        const opts = span === undefined ? { timeoutMs } : { timeoutMs, headers: span.traceHeaders };
        answer = { kind: 'reply', data: await bus.request(workloadsSubject(n.hostId), payload, opts) };
      } catch {
        // No responder, a timeout, a closed or refused connection: the node did not answer.
        answer = { kind: 'unreachable' };
      }
      span?.end({ 'svc.node.answer': answer.kind }, answer.kind === 'reply' ? undefined : 'unreachable');
      composer.add(i, answer);
    }),
  );
  return composer.result(now());
}

/** The fleet's HTTP surface: `/tools/call` and MCP over its fan-out (`run`) and request finder (`requests`). */
export async function buildFleetApp(deps: {
  logger: Logger;
  policy: AuthorizationPolicy;
  run: (args: FilterArgs, trace?: Context) => Promise<FleetResult>;
  requests: RequestAsker;
  /** Spans of the reads, while traces are exported. */
  spans?: ReadSpans | undefined;
  /** `/metrics` over this registry; with `requireAuth`, only for a reader of the policy. */
  metrics?: { readonly registry: Registry; readonly requireAuth: boolean };
  /** `/readyz`'s failing checks; absent: ready while it serves. */
  failing?: ReadinessChecks;
  /** Called before any route is added (the OpenAPI generator's hook; createHttpApp). */
  beforeRoutes?: (app: FastifyInstance) => void;
  /** HTTPS, re-read on SIGHUP. */
  tls?: ReloadableTls | undefined;
}): Promise<FastifyInstance> {
  const { policy, run, requests } = deps;
  const app = createHttpApp({
    logger: deps.logger,
    tls: deps.tls,
    ...(deps.beforeRoutes ? { beforeRoutes: deps.beforeRoutes } : {}),
  });
  await app.register(healthRoutes, { ...(deps.failing ? { failing: deps.failing } : {}), tag: 'fleet' });
  if (deps.metrics)
    metricsRoute(
      app,
      deps.metrics.registry,
      deps.metrics.requireAuth ? (req) => metricsAuth(policy, req.headers.authorization) : undefined,
      'fleet',
    );
  await app.register(toolsCallRoutes, {
    policy,
    tools: { fleet_workloads: run },
    requestTools: requestToolsCall(requests),
    spans: deps.spans,
  });
  await app.register(mcpRoutes, {
    policy,
    allowedHosts: () => loopbackHosts(app),
    spans: deps.spans,
    tools: {
      fleet_workloads: {
        description:
          'Read-only workload inventory across the declared fleet (svc-workloads/v1 fleet result): one entry per declared node, failed nodes marked with their condition. Observation only.',
        grant: 'workloads:read',
        outputSchema: FLEET_RESULT_JSON_SCHEMA,
        run,
      },
      ...requestMcpTools(requests, 'across the declared fleet'),
    },
  });
  return app;
}

export interface FleetHandle {
  readonly url: string;
  readonly app: FastifyInstance;
  close(): Promise<void>;
}

/** The fleet controller: `fleet_workloads`, `request_diagnosis` and `session_diagnosis` over `/tools/call` and MCP. Thrown when: config, policy or NATS unusable. */
export async function startFleet(cfg: FleetConfig, deps: ServerDeps): Promise<FleetHandle> {
  const log = deps.logger.child({ component: 'fleet' });
  const env = deps.env ?? process.env;
  const policy = AuthorizationPolicy.load(cfg.policyPath, env);
  const tls = reloadableTls(cfg.tls, 'fleet', log);
  const bus = deps.bus ?? (await openBus(cfg.nats, env, log, 'svc-serving fleet'));
  const ownsBus = deps.bus === undefined;
  const metrics = new FleetMetrics({
    nodes: cfg.nodes,
    readConditions: () => fleetWorkloads(bus, cfg.nodes, { limit: 1 }, cfg.nodeTimeoutMs),
  });
  const stopNatsMetrics = natsMetrics(metrics.registry, bus);
  // Off unless the OTEL_* variables ask for it (the SDK is not even loaded then).
  const tracing = await startTracing(log, env);
  const spans = tracing ? new ReadSpans(tracing, knownCredential(policy, cfg.nats, env)) : undefined;
  const run = (args: FilterArgs, parent?: Context): Promise<FleetResult> =>
    metrics.timed(() => fleetWorkloads(bus, cfg.nodes, args, cfg.nodeTimeoutMs, Date.now, spans && { spans, parent }));
  const requests = busRequestAsker(bus, cfg.nodes, cfg.nodeTimeoutMs);
  // Ready while its NATS connection is up (docs/decisions/0053).
  const nats = watchNats(bus);
  const app = await buildFleetApp({
    logger: log,
    policy,
    run,
    requests,
    metrics: { registry: metrics.registry, requireAuth: cfg.metricsRequireAuth === true },
    failing: () => (nats.down() ? ['nats'] : []),
    tls,
    spans,
  });
  let url: string;
  try {
    url = await listen(app, cfg.listen.host, cfg.listen.port);
  } catch (err) {
    nats.stop();
    stopNatsMetrics();
    if (ownsBus) await bus.close();
    await tracing?.release();
    throw err;
  }
  return {
    url,
    app,
    async close() {
      await app.close();
      nats.stop();
      stopNatsMetrics();
      if (ownsBus) await bus.close();
      await tracing?.release();
    },
  };
}
