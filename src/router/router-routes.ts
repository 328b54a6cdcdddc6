import type { FastifyInstance, FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { AuthorizationPolicy } from '../auth/policy.js';
import type { RouterRegistry } from './records/router-registry.js';
import type { RouterConfig } from '../config/router-config.js';
import { ErrorCode, ForbiddenError, InvalidArgumentError, SvcError, UnauthenticatedError } from '../errors.js';
import {
  ActiveBody,
  LINEAGE_KEYS,
  LookupBody,
  RouterStatus,
  SessionBody,
  type LineageKey,
} from '../schema/diagnosis.js';
import { NodeResult } from '../schema/envelopes.js';
import { FilterArgs, parseFilterQuery, resolveFilters, type Filters } from '../schema/filters.js';
import { GENERATED_ID_RE, LEGACY_ID_RE, OPAQUE_ID_RE } from '../schema/terminal-record.js';
import {
  NoQuery,
  OPTIONAL_CREDENTIAL,
  jsonResponse,
  openAIErrorResponses,
  parsedByHandler,
  problemResponses,
} from '../http/route-schemas.js';
import { QUERY_PARAM, splitQuery } from '../schema/query-string.js';
import { lookupActive, lookupHistory, lookupRecent, lookupRequest } from './request-lookups.js';
import type { DataPlaneKeys } from '../auth/api-keys.js';
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

/**
 * `/v1/requests`'s members: `active=1`, `recent=1` (decision 0090), or `history=1` with
 * exactly one lineage key (CONTRACT.md, docs/api.md).
 */
const REQUESTS_QUERY_MEMBERS = ['active', 'recent', 'history', ...LINEAGE_KEYS] as const;

/** What a valid `/v1/requests` query asks for. */
type RequestsAsk = { readonly list: 'active' | 'recent' } | { readonly key: LineageKey; readonly value: string };

const REQUESTS_SHAPES =
  'must be active=1 alone, recent=1 alone, or history=1 with exactly one of session_id, task_id, workbench_run_id';

/**
 * Reads `/v1/requests`'s members (split by splitQuery): `active=1` alone, `recent=1` alone,
 * or `history=1` with exactly one lineage key.
 * Thrown when: anything else (InvalidArgumentError naming the member at fault, or `query`
 * when there is none).
 */
function requestsAsk(params: ReadonlyMap<(typeof REQUESTS_QUERY_MEMBERS)[number], string>): RequestsAsk {
  const reject = (name: string, reason: string): never => {
    throw new InvalidArgumentError(name, reason);
  };
  if (params.size === 0) reject(QUERY_PARAM, REQUESTS_SHAPES);
  for (const flag of ['active', 'recent', 'history'] as const)
    if (params.has(flag) && params.get(flag) !== '1') reject(flag, 'must be 1');
  for (const list of ['active', 'recent'] as const)
    if (params.has(list)) return params.size === 1 ? { list } : reject(list, 'must be the only member');
  const keys = LINEAGE_KEYS.filter((k) => params.has(k));
  // No active or recent: every member is history or a lineage key.
  if (!params.has('history')) reject('history', 'must be 1 beside session_id, task_id or workbench_run_id');
  if (keys.length === 0) reject('history', 'must come with exactly one of session_id, task_id, workbench_run_id');
  if (keys.length > 1) reject(keys[1]!, 'must not come with another of session_id, task_id, workbench_run_id');
  return { key: keys[0]!, value: params.get(keys[0]!)! };
}

/** An OpenAI model object for an alias (`created`: when this router started, in seconds). */
function modelObject(alias: string, created: number): Record<string, unknown> {
  return { id: alias, object: 'model', created, owned_by: 'svc-serving' };
}

/**
 * The answer to a model route naming no configured alias: the one place it is made, so that
 * the data plane's error shape (an OpenAI error object, code `model_not_found`) changes here.
 * Thrown always: SvcError MODEL_NOT_FOUND (404, code `model_not_found`, param `model`).
 */
function unknownModel(): never {
  throw new SvcError(ErrorCode.MODEL_NOT_FOUND);
}

/**
 * A route that takes no parameters refuses a query string (400), never ignores it: a problem
 * names it (`query` in `invalid_params`); a model route's error object says it in words
 * (`unsupported_parameter`, no parameter named: a query string is none of the API's).
 */
function noQuery(req: FastifyRequest, named = true): void {
  if (rawQuery(req) === '') return;
  throw named
    ? new InvalidArgumentError(QUERY_PARAM, 'must be empty: this route takes no parameters')
    : new SvcError(ErrorCode.MODEL_QUERY_REFUSED);
}

const LookupId = Type.String({
  pattern: `^(?:${GENERATED_ID_RE.source.slice(1, -1)}|${LEGACY_ID_RE.source.slice(1, -1)})$`,
  maxLength: 128,
  description: "X-Svc-Request-Id (req_ + 32 hex), or the caller's own X-Request-Id",
});
const Lineage = (header: string) =>
  Type.Optional(
    Type.String({ pattern: OPAQUE_ID_RE.source, maxLength: 128, description: `${header} of the requests` }),
  );

/** `/v1/requests`'s query as the route reads it (splitQuery, then the rule below); for the document. */
const RequestsQuery = Type.Object(
  {
    active: Type.Optional(Type.Literal('1')),
    recent: Type.Optional(Type.Literal('1')),
    history: Type.Optional(Type.Literal('1')),
    session_id: Lineage('X-Svc-Session-Id'),
    task_id: Lineage('X-Svc-Task-Id'),
    workbench_run_id: Lineage('X-Svc-Workbench-Run-Id'),
  },
  {
    additionalProperties: false,
    description:
      'either active=1 alone, recent=1 alone, or history=1 with exactly one of session_id, task_id, workbench_run_id; anything else is refused (400)',
  },
);

/** One configured alias as an OpenAI model object. */
const ModelObject = Type.Object(
  {
    id: Type.String({ description: 'the alias' }),
    object: Type.Literal('model'),
    created: Type.Integer({ description: 'the router start, in Unix seconds' }),
    owned_by: Type.Literal('svc-serving'),
  },
  { additionalProperties: false },
);

/** What `/v1/models` answers: the configured aliases as OpenAI model objects. */
const ModelList = Type.Object(
  { object: Type.Literal('list'), data: Type.Array(ModelObject) },
  { additionalProperties: false },
);

// Every query string here is read by the route itself, after its credential check (a schema
// check would come first and answer 400 where the route answers 401 or 403).
const filterQuery = parsedByHandler(FilterArgs, 'parseFilterQuery');
const requestsQuery = parsedByHandler(RequestsQuery, 'splitQuery');
const lookupParams = parsedByHandler(Type.Object({ id: LookupId }), 'lookupRequest');
const LOOKUP_ERRORS = problemResponses(400, 401, 403, 503);

const workloadsSchema = {
  summary: "This router's workload inventory (one source: router)",
  tags: ['router'],
  querystring: filterQuery,
  response: {
    200: jsonResponse('NodeResult with exactly one source (owner router)', NodeResult),
    ...problemResponses(400, 401, 403, 503),
  },
};

const modelsSchema = {
  summary: 'The configured model aliases (OpenAI model list)',
  tags: ['router'],
  querystring: NoQuery,
  response: { 200: jsonResponse('the aliases', ModelList), ...openAIErrorResponses(400, 401, 403) },
};

const modelSchema = {
  summary: 'One configured alias (OpenAI model object); an unknown name is 404',
  tags: ['router'],
  params: Type.Object({ model: Type.String({ description: 'the alias (a `/` in it percent-encoded)' }) }),
  querystring: NoQuery,
  response: { 200: jsonResponse('the alias', ModelObject), ...openAIErrorResponses(400, 401, 403, 404) },
};

const lookupSchema = {
  summary: "One request's terminal record",
  tags: ['router'],
  params: lookupParams,
  querystring: NoQuery,
  response: { 200: jsonResponse('the terminal record', LookupBody), ...LOOKUP_ERRORS, ...problemResponses(404) },
};

const requestsSchema = {
  summary:
    'Requests in flight (active=1), the terminal records finished last (recent=1), or the retained requests of one session, task or workbench run (history=1)',
  tags: ['router'],
  querystring: requestsQuery,
  response: {
    200: jsonResponse('at most 50 requests', Type.Union([ActiveBody, SessionBody])),
    ...LOOKUP_ERRORS,
  },
};

const statusSchema = {
  summary: "This router's identity: what `router diagnose` calls the current router",
  tags: ['router'],
  querystring: NoQuery,
  response: { 200: jsonResponse('the current router', RouterStatus), ...problemResponses(400, 401, 403) },
};

const metricsSchema = {
  summary: 'Prometheus metrics (labels: bounded sets, never a request id or key)',
  description: 'Needs a credential only when the router configuration asks for one.',
  tags: ['router'],
  security: OPTIONAL_CREDENTIAL,
  querystring: NoQuery,
  response: {
    200: { description: 'the Prometheus text exposition', content: { 'text/plain': { schema: Type.String() } } },
    ...problemResponses(400, 401, 403),
  },
};

/**
 * The router's read routes: workloads (needs `workloads:read`), request lookups and status
 * (a data-plane key, or a `requests:read` or `workloads:read` client), models, and Prometheus metrics.
 */
export const routerRoutes: FastifyPluginAsync<RouterRoutesOptions> = async (base: FastifyInstance, o) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  // Request metadata: a data-plane key (the caller of the requests), a `requests:read` client
  // (CONTRACT.md's grant for it), or a `workloads:read` client (accepted before that grant
  // existed; kept so no deployment loses its reads). docs/api.md, Authorization.
  const lookupAuth = (req: FastifyRequest): void => {
    if (o.keys.accepts(req.headers.authorization)) return;
    if (!o.policy) throw new UnauthenticatedError();
    const client = o.policy.identify(req.headers.authorization);
    if (!client.grants.has('requests:read') && !client.grants.has('workloads:read')) throw new ForbiddenError();
  };

  app.get('/v1/workloads', { schema: workloadsSchema }, async (req, reply) => {
    // Without a policy no client can hold workloads:read: the read is disabled, not empty.
    if (!o.policy) throw new SvcError(ErrorCode.UNAVAILABLE);
    // A data-plane key is a known credential that never carries workloads:read.
    if (o.keys.accepts(req.headers.authorization)) throw new ForbiddenError();
    o.policy.authorize(req.headers.authorization, 'workloads:read');
    const f = resolveFilters(parseFilterQuery(rawQuery(req)));
    return reply.type('application/json').send(nodeResultJson(await o.workloads(f)));
  });

  app.get('/v1/models', { schema: modelsSchema }, async (req, reply) => {
    if (!o.keys.accepts(req.headers.authorization))
      throw o.knownCredential(req.headers.authorization) ? new ForbiddenError() : new UnauthenticatedError();
    noQuery(req, false);
    const created = Math.floor(Date.parse(o.startedAt) / 1000);
    return reply.send({
      object: 'list',
      data: o.routing().models.map((m) => modelObject(m.alias, created)),
    });
  });

  // One alias, as OpenAI's `GET /v1/models/{model}` answers (client.models.retrieve): from the
  // configuration, like the list; the SDK percent-encodes an alias's `/`, decoded in the param.
  app.get('/v1/models/:model', { schema: modelSchema }, async (req, reply) => {
    if (!o.keys.accepts(req.headers.authorization))
      throw o.knownCredential(req.headers.authorization) ? new ForbiddenError() : new UnauthenticatedError();
    noQuery(req, false);
    const alias = (req.params as { model: string }).model;
    if (!o.routing().models.some((m) => m.alias === alias)) unknownModel();
    return reply.send(modelObject(alias, Math.floor(Date.parse(o.startedAt) / 1000)));
  });

  app.get('/v1/requests/:id', { schema: lookupSchema }, async (req, reply) => {
    lookupAuth(req);
    noQuery(req);
    return reply.send(await lookupRequest(o.registry, (req.params as { id: string }).id));
  });

  app.get('/v1/requests', { schema: requestsSchema }, async (req, reply) => {
    lookupAuth(req);
    const ask = requestsAsk(splitQuery(rawQuery(req), REQUESTS_QUERY_MEMBERS));
    if ('list' in ask) return reply.send(ask.list === 'active' ? lookupActive(o.registry) : lookupRecent(o.registry));
    return reply.send(await lookupHistory(o.registry, ask.key, ask.value));
  });

  app.get('/v1/router/status', { schema: statusSchema }, async (req, reply) => {
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

  app.get('/metrics', { schema: metricsSchema }, async (req, reply) => {
    if (o.cfg.metricsRequireAuth) lookupAuth(req);
    noQuery(req);
    return reply.type(o.metrics.registry.contentType).send(await o.metrics.registry.metrics());
  });
};
