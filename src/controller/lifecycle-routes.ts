import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type, type TSchema } from '@sinclair/typebox';
import type { AuthorizationPolicy } from '../auth/policy.js';
import { InvalidInputError } from '../errors.js';
import { BenchmarkStart, JobCancel, MediaSubmit, RecipeTarget, parseCommand } from '../jobs/commands.js';
import type { JobService } from '../jobs/job-service.js';
import { jsonResponse, problemResponses } from '../http/route-schemas.js';

export interface LifecycleOptions {
  readonly policy: AuthorizationPolicy;
  readonly jobs: JobService;
}

const TOKEN_RE = /^[0-9a-f]{48}$/;
const ID_RE = /^(op|bench|media)_[0-9a-f]{24}$/;

// These schemas are checked by Fastify (route-schemas.ts): the credential is checked before
// them (onRequest), and they refuse exactly what the route's own checks refuse, with the same
// fixed 400. The handlers keep their checks (parseCommand, the token and id patterns).
const command = <N extends string, P extends TSchema>(name: N, params: P) =>
  Type.Object({ command: Type.Literal(name), params }, { additionalProperties: false });
const PlanBody = Type.Union([
  command('benchmark.start', BenchmarkStart),
  command('benchmark.cancel', JobCancel),
  command('media.submit', MediaSubmit),
  command('media.cancel', JobCancel),
  command('recipe.apply', RecipeTarget),
  command('recipe.stop', RecipeTarget),
]);
const ApplyBody = Type.Object(
  { confirmation_token: Type.String({ pattern: TOKEN_RE.source }) },
  { additionalProperties: false },
);
const StatusParams = Type.Object({ id: Type.String({ pattern: ID_RE.source }) });
const Plan = Type.Object(
  {
    operation_id: Type.String(),
    command: Type.String(),
    plan: Type.Array(Type.String(), { description: 'what would happen, in words' }),
    confirmation_token: Type.String({ pattern: TOKEN_RE.source, description: 'send it to /v1/lifecycle/apply' }),
    expires_at: Type.String({ description: 'RFC 3339 timestamp' }),
  },
  { additionalProperties: false },
);
const Applied = Type.Object(
  { operation_id: Type.String(), job_id: Type.Optional(Type.String()) },
  { additionalProperties: false },
);
const Status = Type.Object(
  {
    id: Type.String(),
    state: Type.String(),
    outcome: Type.Union([Type.String(), Type.Null()]),
    progress: Type.Object(
      { completed: Type.Union([Type.Integer(), Type.Null()]), total: Type.Union([Type.Integer(), Type.Null()]) },
      { additionalProperties: false },
    ),
    summary: Type.Unknown({ description: "the job's bounded summary, or null" }),
  },
  { additionalProperties: false },
);
const ERRORS = problemResponses(400, 401, 403, 413, 415, 503);

/**
 * Lifecycle commands, separate from the read surface: their own grant
 * (`node-admin:lifecycle`; `workloads:read` never suffices) and a confirmation boundary:
 * `plan` says what would happen and returns a short-lived token; only `apply` with that
 * token acts. Each command is a controller operation record.
 */
export const lifecycleRoutes: FastifyPluginAsync<LifecycleOptions> = async (base: FastifyInstance, o) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  app.addHook('onRequest', async (req) => {
    o.policy.authorize(req.headers.authorization, 'node-admin:lifecycle');
    // No lifecycle route takes a parameter in its URL: a query string is refused, never ignored.
    if (req.url.includes('?')) throw new InvalidInputError();
  });
  const planSchema = {
    summary: 'Plan a lifecycle command: what would happen, and a short-lived confirmation token',
    tags: ['lifecycle'],
    body: PlanBody,
    response: { 201: jsonResponse('the plan', Plan), ...ERRORS },
  };
  app.post('/v1/lifecycle/plan', { schema: planSchema }, async (req, reply) =>
    reply.code(201).send(o.jobs.plan(parseCommand(req.body))),
  );
  const applySchema = {
    summary: 'Carry out a planned command, by its confirmation token',
    tags: ['lifecycle'],
    body: ApplyBody,
    response: { 200: jsonResponse('the operation (and the job it started)', Applied), ...ERRORS },
  };
  app.post('/v1/lifecycle/apply', { schema: applySchema }, async (req, reply) => {
    const b = req.body as { confirmation_token?: unknown } | null;
    if (
      !b ||
      typeof b !== 'object' ||
      Object.keys(b).length !== 1 ||
      typeof b.confirmation_token !== 'string' ||
      !TOKEN_RE.test(b.confirmation_token)
    ) {
      throw new InvalidInputError();
    }
    return reply.send(o.jobs.apply(b.confirmation_token));
  });
  const statusSchema = {
    summary: 'An operation or job, by its id',
    tags: ['lifecycle'],
    params: StatusParams,
    response: { 200: jsonResponse('its state', Status), ...problemResponses(400, 401, 403, 404, 503) },
  };
  app.get('/v1/lifecycle/status/:id', { schema: statusSchema }, async (req, reply) => {
    const id = req.params.id;
    if (!ID_RE.test(id)) throw new InvalidInputError();
    return reply.send(o.jobs.status(id));
  });
};
