import type { FastifyInstance, FastifyRequest } from 'fastify';
import { Type } from '@sinclair/typebox';
import { NoQuery, OPTIONAL_CREDENTIAL, problemResponses } from './route-schemas.js';
import { Counter, Gauge, type Registry } from 'prom-client';
import type { AuthorizationPolicy } from '../auth/policy.js';
import { ForbiddenError, InvalidInputError } from '../errors.js';
import type { Bus } from '../streams/bus.js';
import { NatsBus } from '../streams/nats-bus.js';

/** Outcomes of a read (a workload or request read over HTTP, MCP or NATS), by what its caller got. */
export const READ_OUTCOMES = ['ok', 'refused', 'invalid', 'error'] as const;
export type ReadOutcome = (typeof READ_OUTCOMES)[number];

/** The outcome an HTTP status means: 2xx/3xx ok, 401/403 refused, another 4xx invalid, 5xx error. */
export function readOutcome(status: number): ReadOutcome {
  if (status < 400) return 'ok';
  if (status === 401 || status === 403) return 'refused';
  return status < 500 ? 'invalid' : 'error';
}

/**
 * `svc_nats_connected` (0/1) and `svc_nats_reconnects_total` for a process on NATS
 * (CONTRACT.md "Telemetry (revision 2)"). A process on the in-process bus has no NATS
 * connection: neither series exists there (docs/decisions/0062-controller-and-fleet-metrics.md).
 * Returns the unsubscribe.
 */
export function natsMetrics(registry: Registry, bus: Bus): () => void {
  if (!(bus instanceof NatsBus)) return () => undefined;
  let connected = 1;
  let last = 'connected';
  const reconnects = new Counter({
    name: 'svc_nats_reconnects_total',
    help: 'Times the NATS connection came back after it was lost',
    registers: [registry],
  });
  new Gauge({
    name: 'svc_nats_connected',
    help: '1 while the NATS connection is up, 0 while it is lost or closed',
    registers: [registry],
    collect() {
      this.set(connected);
    },
  });
  const sub = bus.state$.subscribe((s) => {
    if (s === 'connected' && last === 'disconnected') reconnects.inc();
    connected = s === 'connected' ? 1 : 0;
    last = s;
  });
  return () => sub.unsubscribe();
}

/**
 * `GET /metrics`: the registry in Prometheus text. Takes no parameters (a query is a 400, as
 * on the router); `authorize`, when given, runs first (`metrics_require_auth`).
 */
export function metricsRoute(
  app: FastifyInstance,
  registry: Registry,
  authorize?: (req: FastifyRequest) => void,
  tag = 'controller',
): void {
  const schema = {
    summary: 'Prometheus metrics (labels: bounded sets, never a request id or key)',
    description: 'Needs a credential (workloads:read or requests:read) only when `metrics_require_auth = true`.',
    tags: [tag],
    security: OPTIONAL_CREDENTIAL,
    querystring: NoQuery,
    response: {
      200: { description: 'the Prometheus text exposition', content: { 'text/plain': { schema: Type.String() } } },
      ...problemResponses(400, 401, 403),
    },
  };
  app.get('/metrics', { schema }, async (req, reply) => {
    authorize?.(req);
    const q = req.url.indexOf('?');
    if (q >= 0 && q < req.url.length - 1) throw new InvalidInputError();
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}

/**
 * Counts each answer of the named routes by how it ended, when its last byte is sent (an MCP
 * answer is written past Fastify, so no reply hook sees it).
 */
export function countAnswers(
  app: FastifyInstance,
  routes: Readonly<Record<string, string>>,
  count: (via: string, outcome: ReadOutcome) => void,
): void {
  app.addHook('onRequest', async (req, reply) => {
    const url = req.routeOptions.url;
    const via = url !== undefined && Object.hasOwn(routes, url) ? routes[url] : undefined;
    if (via === undefined) return;
    reply.raw.once('finish', () => count(via, readOutcome(reply.raw.statusCode)));
  });
}

/**
 * A scrape of `/metrics` when `metrics_require_auth` is set: a policy client holding
 * `workloads:read` or `requests:read`. Thrown when: no known credential (401), neither grant (403).
 */
export function metricsAuth(policy: AuthorizationPolicy, authorization: string | string[] | undefined): void {
  const client = policy.identify(authorization);
  if (!client.grants.has('workloads:read') && !client.grants.has('requests:read')) throw new ForbiddenError();
}
