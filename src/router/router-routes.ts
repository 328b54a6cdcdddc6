import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { AuthorizationPolicy } from '../auth/policy.js';
import type { RouterRegistry } from './records/router-registry.js';
import type { RouterConfig } from '../config/router-config.js';
import { ErrorCode, ForbiddenError, InvalidInputError, SvcError, UnauthenticatedError } from '../errors.js';
import { LINEAGE_KEYS } from '../schema/diagnosis.js';
import type { NodeResult } from '../schema/envelopes.js';
import { parseFilterQuery, resolveFilters, type Filters } from '../schema/filters.js';
import { splitQuery } from '../schema/query-string.js';
import { lookupActive, lookupHistory, lookupRequest } from './request-lookups.js';
import type { DataPlaneKeys } from './api-keys.js';
import type { RouterMetrics } from './metrics.js';
import { nodeResultJson } from '../schema/result-json.js';

export interface RouterRoutesOptions {
  readonly cfg: RouterConfig;
  /** The routing configuration in service now (a reload replaces it). */
  readonly routing: () => {
    readonly models: readonly { readonly alias: string }[];
    readonly routingConfigHash: string;
  };
  readonly keys: DataPlaneKeys;
  /** True for a policy client's credential (known, but not a data-plane key). */
  readonly knownCredential: (authorization: string | string[] | undefined) => boolean;
  readonly policy: AuthorizationPolicy | undefined;
  readonly registry: RouterRegistry;
  readonly metrics: RouterMetrics;
  /** Brings the router's own view up to date, then answers from it. */
  readonly workloads: (f: Filters) => Promise<NodeResult>;
  readonly startedAt: string;
  readonly packageVersion: string;
}

function rawQuery(req: FastifyRequest): string {
  const i = req.url.indexOf('?');
  return i < 0 ? '' : req.url.slice(i + 1);
}

/** `/v1/requests`'s members: `active=1`, or `history=1` with exactly one lineage key (CONTRACT.md, docs/api.md). */
const REQUESTS_QUERY_MEMBERS = ['active', 'history', ...LINEAGE_KEYS] as const;

/** A route that takes no parameters refuses a query string (400), never ignores it. */
function noQuery(req: FastifyRequest): void {
  if (rawQuery(req) !== '') throw new InvalidInputError();
}

/**
 * The router's read routes: workloads (needs `workloads:read`), request lookups and status
 * (a data-plane key, or a `requests:read` or `workloads:read` client), models, and Prometheus metrics.
 */
export const routerRoutes: FastifyPluginAsync<RouterRoutesOptions> = async (app: FastifyInstance, o) => {
  // Request metadata: a data-plane key (the caller of the requests), a `requests:read` client
  // (CONTRACT.md's grant for it), or a `workloads:read` client (accepted before that grant
  // existed; kept so no deployment loses its reads). docs/api.md, Authorization.
  const lookupAuth = (req: FastifyRequest): void => {
    if (o.keys.accepts(req.headers.authorization)) return;
    if (!o.policy) throw new UnauthenticatedError();
    const client = o.policy.identify(req.headers.authorization);
    if (!client.grants.has('requests:read') && !client.grants.has('workloads:read')) throw new ForbiddenError();
  };

  app.get('/v1/workloads', async (req, reply) => {
    // Without a policy no client can hold workloads:read: the read is disabled, not empty.
    if (!o.policy) throw new SvcError(ErrorCode.UNAVAILABLE);
    // A data-plane key is a known credential that never carries workloads:read.
    if (o.keys.accepts(req.headers.authorization)) throw new ForbiddenError();
    o.policy.authorize(req.headers.authorization, 'workloads:read');
    const f = resolveFilters(parseFilterQuery(rawQuery(req)));
    return reply.type('application/json').send(nodeResultJson(await o.workloads(f)));
  });

  app.get('/v1/models', async (req, reply) => {
    if (!o.keys.accepts(req.headers.authorization))
      throw o.knownCredential(req.headers.authorization) ? new ForbiddenError() : new UnauthenticatedError();
    noQuery(req);
    const created = Math.floor(Date.parse(o.startedAt) / 1000);
    return reply.send({
      object: 'list',
      data: o.routing().models.map((m) => ({ id: m.alias, object: 'model', created, owned_by: 'svc-serving' })),
    });
  });

  app.get('/v1/requests/:id', async (req, reply) => {
    lookupAuth(req);
    noQuery(req);
    return reply.send(await lookupRequest(o.registry, (req.params as { id: string }).id));
  });

  app.get('/v1/requests', async (req, reply) => {
    lookupAuth(req);
    const params = splitQuery(rawQuery(req), REQUESTS_QUERY_MEMBERS);
    if (params.size === 1 && params.get('active') === '1') return reply.send(lookupActive(o.registry));
    // `history=1` with exactly one of session_id, task_id, workbench_run_id.
    const key = LINEAGE_KEYS.find((k) => params.has(k));
    if (params.size === 2 && params.get('history') === '1' && key !== undefined)
      return reply.send(await lookupHistory(o.registry, key, params.get(key)!));
    throw new InvalidInputError();
  });

  app.get('/v1/router/status', async (req, reply) => {
    lookupAuth(req);
    noQuery(req);
    return reply.send({
      host: o.cfg.hostId,
      package_version: o.packageVersion,
      routing_config_hash: o.routing().routingConfigHash,
      started_at: o.startedAt,
      models: o.routing().models.map((m) => m.alias),
    });
  });

  app.get('/metrics', async (req, reply) => {
    if (o.cfg.metricsRequireAuth) lookupAuth(req);
    noQuery(req);
    return reply.type(o.metrics.registry.contentType).send(await o.metrics.registry.metrics());
  });
};
