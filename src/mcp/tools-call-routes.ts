import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type, type TSchema } from '@sinclair/typebox';
import type { AuthorizationPolicy, Grant } from '../auth/policy.js';
import { ForbiddenError, InvalidInputError, NotFoundError, SvcError } from '../errors.js';
import { FleetResult, NodeResult } from '../schema/envelopes.js';
import { FilterArgs, parseFilterArgs, resolveFilters } from '../schema/filters.js';
import { FleetDiagnosis } from '../schema/diagnosis-search.js';
import { literalUnion } from '../schema/primitives.js';
import {
  TOOL_NAMES,
  isWorkloadTool,
  parseToolCall,
  type RequestToolName,
  type WorkloadToolName,
} from './tools-call.js';
import { RequestDiagnosisArgs, SessionDiagnosisArgs } from './request-tools.js';
import { nodeResultJson } from '../schema/result-json.js';
import { NoQuery, jsonResponse, parsedByHandler, problemResponses } from '../http/route-schemas.js';
import type { Context } from '@opentelemetry/api';
import type { ReadSpan, ReadSpans } from '../telemetry/read-spans.js';

export interface ToolsCallOptions {
  readonly policy: AuthorizationPolicy;
  /** The workload tools this process serves; another known tool is a 404 (not served here). */
  readonly tools: Partial<
    Record<
      WorkloadToolName,
      (args: FilterArgs, trace?: Context) => NodeResult | FleetResult | Promise<NodeResult | FleetResult>
    >
  >;
  /** The request diagnosis tools (`requests:read`), each reading its own raw arguments. */
  readonly requestTools?: Partial<Record<RequestToolName, (args: unknown) => Promise<object>>>;
  /** One span per call, while traces are exported (the tool gets its context for spans under it). */
  readonly spans?: ReadSpans | undefined;
}

/** `/tools/call`'s body as parseToolCall and each tool's own parser read it. */
const ToolCall = Type.Object(
  {
    name: literalUnion(TOOL_NAMES),
    arguments: Type.Optional(
      Type.Union([FilterArgs, RequestDiagnosisArgs, SessionDiagnosisArgs], {
        description:
          "the tool's arguments: the workload filters (only those present; no nulls), {request_id}, or exactly one of {session_id}, {task_id}, {workbench_run_id}",
      }),
    ),
  },
  { additionalProperties: false },
);

// Read by the route after the credential and the named tool's grant are checked (a schema
// check would come first and answer 400 where the route answers 403), and the arguments by
// the tool's own parser, whose errors name the failing argument.
const toolCallBody = parsedByHandler(ToolCall, "parseToolCall and the tool's own parser");

/** The answers of the tools this process serves (node_workloads, fleet_workloads, the diagnosis tools). */
function toolsCallSchema(opts: ToolsCallOptions): object {
  const answers: TSchema[] = [];
  if (opts.tools.node_workloads) answers.push(NodeResult);
  if (opts.tools.fleet_workloads) answers.push(FleetResult);
  if (opts.requestTools) answers.push(FleetDiagnosis);
  return {
    summary: `Run a sealed read operation: ${[...Object.keys(opts.tools), ...Object.keys(opts.requestTools ?? {})].join(', ')}`,
    description:
      'Workload tools need workloads:read; request_diagnosis and session_diagnosis need requests:read. Reads change nothing and create no operation record.',
    tags: ['tools'],
    querystring: NoQuery,
    body: toolCallBody,
    response: {
      200: jsonResponse("the tool's result", answers.length === 1 ? answers[0]! : Type.Union(answers)),
      ...problemResponses(400, 401, 403, 404, 413, 415, 503, 504),
    },
  };
}

/**
 * `POST /tools/call`: the controller's sealed read operations. The credential is checked
 * before the body is even parsed; reads create no operation record and change nothing.
 */
export const toolsCallRoutes: FastifyPluginAsync<ToolsCallOptions> = async (base: FastifyInstance, opts) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  // The grants some tool here needs: a credential holding none of them is refused (403)
  // before its body is read; the one the named tool needs is checked once the name is known.
  const grants: Grant[] = opts.requestTools ? ['workloads:read', 'requests:read'] : ['workloads:read'];
  app.addHook('onRequest', async (req) => {
    const client = opts.policy.identify(req.headers.authorization);
    if (!grants.some((g) => client.grants.has(g))) throw new ForbiddenError();
  });
  app.post('/tools/call', { schema: toolsCallSchema(opts) }, async (req, reply) => {
    // Filters travel in the body only: a query (`?owner=router`) would otherwise be ignored
    // silently and the unfiltered answer read as the filtered one.
    if (req.url.includes('?')) throw new InvalidInputError();
    const client = opts.policy.identify(req.headers.authorization);
    const { name, args } = parseToolCall(req.body);
    const remote = { traceparent: req.headers.traceparent, tracestate: req.headers.tracestate };
    const span = opts.spans?.start(`tools/call ${name}`, 'server', remote, {
      'svc.tool': name,
      'http.route': '/tools/call',
    });
    try {
      const answer = await callTool(opts, client, name, args, span);
      span?.end({ 'http.response.status_code': 200 });
      return reply.type('application/json').send(answer);
    } catch (err) {
      span?.end(undefined, err instanceof SvcError ? err.code : 'internal');
      throw err;
    }
  });
};

/** Runs the named tool for this client (its grant checked); the answer as it is sent. Thrown when: not granted, not served, bad arguments. */
async function callTool(
  opts: ToolsCallOptions,
  client: ReturnType<AuthorizationPolicy['identify']>,
  name: ReturnType<typeof parseToolCall>['name'],
  args: unknown,
  span: ReadSpan | undefined,
): Promise<unknown> {
  if (!isWorkloadTool(name)) {
    // No grant implies another: workloads:read never reads request metadata (CONTRACT.md).
    if (!client.grants.has('requests:read')) throw new ForbiddenError();
    const run = opts.requestTools?.[name];
    if (!run) throw new NotFoundError();
    return run(args);
  }
  if (!client.grants.has('workloads:read')) throw new ForbiddenError();
  const filters = parseFilterArgs(args);
  const tool = opts.tools[name];
  if (!tool) throw new NotFoundError();
  const result = await tool(filters, span?.context);
  // A node's answer is sent with its records' texts reused (nodeResultJson); a fleet's as it is.
  return 'expected_host' in result ? nodeResultJson(result) : result;
}

/** Resolves filter defaults for a node read. */
export function nodeRead(
  query: (f: ReturnType<typeof resolveFilters>) => NodeResult,
): (args: FilterArgs) => NodeResult {
  return (args) => query(resolveFilters(args));
}
