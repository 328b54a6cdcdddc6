import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { AuthorizationPolicy } from '../auth/policy.js';
import { InvalidInputError } from '../errors.js';
import { parseCommand } from '../jobs/commands.js';
import type { JobService } from '../jobs/job-service.js';

export interface LifecycleOptions {
  readonly policy: AuthorizationPolicy;
  readonly jobs: JobService;
}

const TOKEN_RE = /^[0-9a-f]{48}$/;
const ID_RE = /^(op|bench|media)_[0-9a-f]{24}$/;

/**
 * Lifecycle commands, separate from the read surface: their own grant
 * (`node-admin:lifecycle`; `workloads:read` never suffices) and a confirmation boundary:
 * `plan` says what would happen and returns a short-lived token; only `apply` with that
 * token acts. Each command is a controller operation record.
 */
export const lifecycleRoutes: FastifyPluginAsync<LifecycleOptions> = async (app: FastifyInstance, o) => {
  app.addHook('onRequest', async (req) => {
    o.policy.authorize(req.headers.authorization, 'node-admin:lifecycle');
    // No lifecycle route takes a parameter in its URL: a query string is refused, never ignored.
    if (req.url.includes('?')) throw new InvalidInputError();
  });
  app.post('/v1/lifecycle/plan', async (req, reply) => reply.code(201).send(o.jobs.plan(parseCommand(req.body))));
  app.post('/v1/lifecycle/apply', async (req, reply) => {
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
  app.get('/v1/lifecycle/status/:id', async (req, reply) => {
    const id = (req.params as { id: string }).id;
    if (!ID_RE.test(id)) throw new InvalidInputError();
    return reply.send(o.jobs.status(id));
  });
};
