import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { AuthorizationPolicy, Grant } from '../auth/policy.js';
import { ForbiddenError, InvalidInputError, NotFoundError } from '../errors.js';
import type { FleetResult, NodeResult } from '../schema/envelopes.js';
import { parseFilterArgs, resolveFilters, type FilterArgs } from '../schema/filters.js';
import { isWorkloadTool, parseToolCall, type RequestToolName, type WorkloadToolName } from '../mcp/tools-call.js';
import { nodeResultJson } from '../schema/result-json.js';

export interface ToolsCallOptions {
  readonly policy: AuthorizationPolicy;
  /** The workload tools this process serves; another known tool is a 404 (not served here). */
  readonly tools: Partial<
    Record<WorkloadToolName, (args: FilterArgs) => NodeResult | FleetResult | Promise<NodeResult | FleetResult>>
  >;
  /** The request diagnosis tools (`requests:read`), each reading its own raw arguments. */
  readonly requestTools?: Partial<Record<RequestToolName, (args: unknown) => Promise<object>>>;
}

/**
 * `POST /tools/call`: the controller's sealed read operations. The credential is checked
 * before the body is even parsed; reads create no operation record and change nothing.
 */
export const toolsCallRoutes: FastifyPluginAsync<ToolsCallOptions> = async (app: FastifyInstance, opts) => {
  // The grants some tool here needs: a credential holding none of them is refused (403)
  // before its body is read; the one the named tool needs is checked once the name is known.
  const grants: Grant[] = opts.requestTools ? ['workloads:read', 'requests:read'] : ['workloads:read'];
  app.addHook('onRequest', async (req) => {
    const client = opts.policy.identify(req.headers.authorization);
    if (!grants.some((g) => client.grants.has(g))) throw new ForbiddenError();
  });
  app.post('/tools/call', async (req, reply) => {
    // Filters travel in the body only: a query (`?owner=router`) would otherwise be ignored
    // silently and the unfiltered answer read as the filtered one.
    if (req.url.includes('?')) throw new InvalidInputError();
    const client = opts.policy.identify(req.headers.authorization);
    const { name, args } = parseToolCall(req.body);
    if (!isWorkloadTool(name)) {
      // No grant implies another: workloads:read never reads request metadata (CONTRACT.md).
      if (!client.grants.has('requests:read')) throw new ForbiddenError();
      const run = opts.requestTools?.[name];
      if (!run) throw new NotFoundError();
      return reply.type('application/json').send(await run(args));
    }
    if (!client.grants.has('workloads:read')) throw new ForbiddenError();
    const filters = parseFilterArgs(args);
    const tool = opts.tools[name];
    if (!tool) throw new NotFoundError();
    const result = await tool(filters);
    // A node's answer is sent with its records' texts reused (nodeResultJson); a fleet's as it is.
    return reply.type('application/json').send('expected_host' in result ? nodeResultJson(result) : result);
  });
};

/** Resolves filter defaults for a node read. */
export function nodeRead(
  query: (f: ReturnType<typeof resolveFilters>) => NodeResult,
): (args: FilterArgs) => NodeResult {
  return (args) => query(resolveFilters(args));
}
