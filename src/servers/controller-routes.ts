import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { AuthorizationPolicy } from '../auth/policy.js';
import { InvalidInputError, NotFoundError } from '../errors.js';
import type { FleetResult, NodeResult } from '../schema/envelopes.js';
import { resolveFilters, type FilterArgs } from '../schema/filters.js';
import { parseToolCall, type ToolName } from './tools-call.js';
import { nodeResultJson } from '../schema/result-json.js';

export interface ToolsCallOptions {
  readonly policy: AuthorizationPolicy;
  /** The tools this process serves; another known tool is a 404 (not served here). */
  readonly tools: Partial<Record<ToolName, (args: FilterArgs) => NodeResult | FleetResult | Promise<NodeResult | FleetResult>>>;
}

/**
 * `POST /tools/call`: the controller's sealed read operations. The credential is checked
 * before the body is even parsed; reads create no operation record and change nothing.
 */
export const toolsCallRoutes: FastifyPluginAsync<ToolsCallOptions> = async (app: FastifyInstance, opts) => {
  app.addHook('onRequest', async (req) => {
    opts.policy.authorize(req.headers.authorization, 'workloads:read');
  });
  app.post('/tools/call', async (req, reply) => {
    // Filters travel in the body only: a query (`?owner=router`) would otherwise be ignored
    // silently and the unfiltered answer read as the filtered one.
    if (req.url.includes('?')) throw new InvalidInputError();
    const { name, args } = parseToolCall(req.body);
    const tool = opts.tools[name];
    if (!tool) throw new NotFoundError();
    const result = await tool(args);
    // A node's answer is sent with its records' texts reused (nodeResultJson); a fleet's as it is.
    return reply.type('application/json').send('expected_host' in result ? nodeResultJson(result) : result);
  });
};

/** Resolves filter defaults for a node read. */
export function nodeRead(query: (f: ReturnType<typeof resolveFilters>) => NodeResult): (args: FilterArgs) => NodeResult {
  return (args) => query(resolveFilters(args));
}
