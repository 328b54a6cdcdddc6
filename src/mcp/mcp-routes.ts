import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import {
  CallToolRequestSchema,
  InitializeRequestSchema,
  ListToolsRequestSchema,
  PingRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { AuthorizationPolicy, Client, Grant } from '../auth/policy.js';
import { InvalidInputError, OriginRefusedError, SvcError } from '../errors.js';
import { FilterArgs, parseFilterArgs, type FilterArgs as FilterArgsT } from '../schema/filters.js';
import { isNonIntegerNumber } from '../schema/json-numbers.js';
import { PACKAGE_VERSION } from '../version.js';
import { NoQuery, jsonResponse, parsedByHandler, problemResponses } from '../http/route-schemas.js';
import type { Context } from '@opentelemetry/api';
import type { ReadSpans, RemoteTrace } from '../telemetry/read-spans.js';

/**
 * One tool. A workload tool declares neither `inputSchema` nor `parse` (its arguments are the
 * workload filters); any other tool declares both: its own schema and its own strict parser,
 * whose InvalidArgumentError names the failing argument in a fixed sentence.
 */
/** Where a call's spans go: the process's read spans and the caller's `traceparent` (undefined: no spans). */
interface CallTrace {
  readonly spans: ReadSpans;
  /** The caller's `traceparent` and `tracestate` headers. */
  readonly remote: RemoteTrace;
}

export interface McpTool<A = FilterArgsT> {
  readonly description: string;
  readonly grant: Grant;
  /** JSON Schema of the tool's structured result. */
  readonly outputSchema: object;
  /** JSON Schema of the tool's arguments (default: the workload filters). */
  readonly inputSchema?: object;
  /** Reads the raw `arguments` (default: the workload filters' parser). */
  readonly parse?: (raw: unknown) => A;
  readonly run: (args: A, trace?: Context) => Promise<object> | object;
}

export interface McpRoutesOptions {
  readonly policy: AuthorizationPolicy;
  // Each tool reads its own argument type: the map holds tools of different argument types.
  // biome-ignore lint/suspicious/noExplicitAny: a heterogeneous map of tools, each typed at its definition
  readonly tools: Readonly<Record<string, McpTool<any>>>;
  /** `host:port` values a request's Host header may carry (DNS-rebinding guard). */
  /** Host values served (undefined: any, when not on loopback). */
  readonly allowedHosts: () => readonly string[] | undefined;
  /** One span per tool call, while traces are exported. */
  readonly spans?: ReadSpans | undefined;
}

// The filters' JSON Schema straight from the TypeBox schema: absent options are omitted, never null.
const INPUT_SCHEMA = JSON.parse(JSON.stringify(FilterArgs)) as { type: 'object' };

/** The fixed text of each JSON-RPC error code: never the SDK's or a validator's own words. */
const RPC_ERROR_TEXT: ReadonlyMap<number, string> = new Map([
  [-32700, 'Parse error'],
  [-32600, 'Invalid Request'],
  [-32601, 'Method not found'],
  [-32602, 'Invalid params'],
  [-32603, 'Internal error'],
]);

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The params each method this server answers must have. The SDK parses params inside its
 * request handling and answers a mismatch as -32603 with the validator's message; checked
 * here first, a mismatch is -32602 `Invalid params`, as JSON-RPC says.
 */
const PARAMS_FIT: Readonly<Record<string, (p: unknown) => boolean>> = {
  // The SDK's own request schemas, so that every shape it would refuse (nested members such as
  // `capabilities.roots`, `clientInfo.title`, `_meta.progressToken`, `task`) is refused here.
  'tools/call': (p) => CallToolRequestSchema.safeParse({ method: 'tools/call', params: p }).success,
  'tools/list': (p) =>
    ListToolsRequestSchema.safeParse({ method: 'tools/list', ...(p === undefined ? {} : { params: p }) }).success,
  ping: (p) => PingRequestSchema.safeParse({ method: 'ping', ...(p === undefined ? {} : { params: p }) }).success,
  initialize: (p) => InitializeRequestSchema.safeParse({ method: 'initialize', params: p }).success,
};

/**
 * A JSON-RPC error answer with its code's fixed text (the `data` member, if any, dropped).
 * The SDK says -32700 `Parse error` for a body that is JSON but not a JSON-RPC message: that
 * is -32600 here (a body that is not JSON is answered -32700 before it, by the route's
 * error handler).
 */
function fixedError(message: unknown): unknown {
  if (!isObject(message) || !isObject(message['error'])) return message;
  const raw = message['error']['code'];
  const code = raw === -32700 ? -32600 : raw;
  const text = typeof code === 'number' ? RPC_ERROR_TEXT.get(code) : undefined;
  return { ...message, error: { code, message: text ?? 'Error' } };
}

/** The request's headers as a Fetch `Headers` (repeated ones joined, as node:http does). */
function webHeaders(h: FastifyRequest['headers']): Headers {
  const out = new Headers();
  for (const [k, v] of Object.entries(h)) {
    if (typeof v === 'string') out.set(k, v);
    else if (Array.isArray(v)) out.set(k, v.join(', '));
  }
  return out;
}

/** Host and Origin must name this server (DNS rebinding, cross-site pages). Thrown when: they do not (OriginRefusedError). */
function guardHostAndOrigin(req: FastifyRequest, allowedHosts: McpRoutesOptions['allowedHosts']): void {
  const host = req.headers.host;
  if (!host) throw new OriginRefusedError();
  // On loopback only the server's own names (DNS rebinding); elsewhere, the Host asked for,
  // and an Origin must name the same.
  const allowed = allowedHosts() ?? [host.toLowerCase()];
  if (!allowed.includes(host.toLowerCase())) throw new OriginRefusedError();
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let ok = false;
    try {
      const u = new URL(origin);
      ok = (u.protocol === 'http:' || u.protocol === 'https:') && allowed.includes(u.host.toLowerCase());
    } catch {
      ok = false;
    }
    if (!ok) throw new OriginRefusedError();
  }
}

/**
 * A body that is not JSON at all is JSON-RPC's -32700 `Parse error` (HTTP 400), as an MCP
 * client expects; every other refusal (credential, Host, size, a member named twice) keeps
 * the app's fixed problem answer (the parent error handler).
 */
function parseErrorAsRpc(err: Error & { code?: unknown }, _req: FastifyRequest, reply: FastifyReply): FastifyReply {
  if (err.code === 'FST_ERR_CTP_INVALID_JSON_BODY' || err.code === 'FST_ERR_CTP_EMPTY_JSON_BODY') {
    return reply
      .code(400)
      .type('application/json')
      .send({ jsonrpc: '2.0', id: null, error: { code: -32700, message: RPC_ERROR_TEXT.get(-32700) } });
  }
  throw err;
}

/**
 * The JSON-RPC error this server answers itself before the SDK sees `body`, or undefined when
 * the SDK may take it (a `tools/call` argument named `constructor` is renamed on the way).
 */
function refusedBeforeSdk(body: unknown): { status: 200 | 400; answer: object } | undefined {
  // One message per POST. MCP (2025-06-18) has no JSON-RPC batches; an array is refused
  // whole, never handed to the SDK element by element without the checks below.
  // An id written with a fraction (`7.0`) reaches here as the parser's marker: it would be
  // echoed back as something no client can match to its request.
  if (Array.isArray(body) || (isObject(body) && isNonIntegerNumber(body['id'])))
    return {
      status: 400,
      answer: { jsonrpc: '2.0', id: null, error: { code: -32600, message: RPC_ERROR_TEXT.get(-32600) } },
    };
  if (
    !isObject(body) ||
    typeof body['method'] !== 'string' ||
    (typeof body['id'] !== 'string' && typeof body['id'] !== 'number')
  )
    return undefined;
  // The SDK's validator throws on an argument named `constructor` (an Internal error);
  // renamed to a name no filter has, it is refused like any other unknown filter (a tool
  // error, not Invalid params).
  const params = body['params'];
  if (
    body['method'] === 'tools/call' &&
    isObject(params) &&
    isObject(params['arguments']) &&
    Object.hasOwn(params['arguments'], 'constructor')
  ) {
    const args = params['arguments'];
    args['\u0000constructor'] = args['constructor'];
    delete args['constructor'];
  }
  const fits = Object.hasOwn(PARAMS_FIT, body['method']) ? PARAMS_FIT[body['method']] : undefined;
  if (fits && !fits(body['params']))
    return {
      status: 200,
      answer: { jsonrpc: '2.0', id: body['id'], error: { code: -32602, message: RPC_ERROR_TEXT.get(-32602) } },
    };
  return undefined;
}

/**
 * The SDK's Fetch-API transport answers one message: its whole answer comes back as a
 * Response that passes through here, so every error it writes (its transport-level ones
 * included: a missing Accept, an unsupported protocol version with the header's text in it)
 * leaves with its code's fixed text, nothing of the request.
 */
async function answerWithSdk(
  tools: McpRoutesOptions['tools'],
  client: Client,
  req: FastifyRequest,
  reply: FastifyReply,
  spans: ReadSpans | undefined,
): Promise<FastifyReply> {
  const server = buildServer(
    tools,
    client,
    spans && { spans, remote: { traceparent: req.headers.traceparent, tracestate: req.headers.tracestate } },
  );
  const transport = new WebStandardStreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  try {
    await server.connect(transport);
    const web = new Request('http://mcp.invalid/mcp', { method: 'POST', headers: webHeaders(req.headers) });
    const res = await transport.handleRequest(web, { parsedBody: req.body });
    const text = await res.text();
    reply.code(res.status);
    if (text.length === 0) return reply.send();
    let answer: unknown;
    try {
      answer = JSON.parse(text);
    } catch {
      // Not JSON (the SDK only streams events when asked to, which this server never is).
      return reply
        .code(500)
        .type('application/json')
        .send({ jsonrpc: '2.0', id: null, error: { code: -32603, message: RPC_ERROR_TEXT.get(-32603) } });
    }
    return reply.type('application/json').send(Array.isArray(answer) ? answer.map(fixedError) : fixedError(answer));
  } finally {
    void transport.close();
    void server.close();
  }
}

/** One JSON-RPC 2.0 message, as the route and then the SDK read it. */
const JsonRpcRequest = Type.Object(
  {
    jsonrpc: Type.Literal('2.0'),
    id: Type.Optional(Type.Union([Type.String(), Type.Integer()], { description: 'absent for a notification' })),
    method: Type.String({ description: 'initialize, ping, tools/list, tools/call, or a notification' }),
    params: Type.Optional(Type.Object({}, { additionalProperties: true })),
  },
  { additionalProperties: true },
);
const JsonRpcResponse = Type.Object(
  {
    jsonrpc: Type.Literal('2.0'),
    id: Type.Union([Type.String(), Type.Integer(), Type.Null()]),
    result: Type.Optional(
      Type.Object(
        {},
        {
          additionalProperties: true,
          description: 'for tools/call: structuredContent holds the tool result (NodeResult, FleetResult or diagnosis)',
        },
      ),
    ),
    error: Type.Optional(
      Type.Object(
        {
          code: Type.Integer(),
          message: Type.String({ description: "the code's fixed text" }),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

const MCP_SCHEMA = {
  summary: "MCP over Streamable HTTP (stateless, JSON responses): the tools the credential's grants allow",
  description:
    "Host and Origin must name this server. tools/list shows only the tools the caller's grants allow; a tool result is in structuredContent. GET and DELETE are 405 (no sessions, no server-initiated stream).",
  tags: ['mcp'],
  querystring: NoQuery,
  // Read by the route and the MCP SDK, after the Host, Origin and credential checks (a schema
  // check would come first, and a JSON-RPC client expects JSON-RPC errors, not a problem).
  body: parsedByHandler(JsonRpcRequest, 'the route and the MCP SDK'),
  response: {
    200: jsonResponse("a JSON-RPC response (errors with their code's fixed text)", JsonRpcResponse),
    202: { description: 'a notification, accepted (no body)' },
    400: {
      description: 'not JSON (-32700 Parse error) or a batch (-32600), as JSON-RPC; or the fixed invalid-input problem',
      content: {
        'application/json': { schema: JsonRpcResponse },
        'application/problem+json': { schema: Type.Unsafe({ $ref: 'Problem#' }) },
      },
    },
    406: jsonResponse(
      "the MCP transport's refusal (e.g. an Accept without application/json and text/event-stream), as a JSON-RPC error",
      JsonRpcResponse,
    ),
    ...problemResponses(401, 403, 413, 415),
  },
};

/**
 * MCP over Streamable HTTP (stateless: a fresh server and transport per POST). The caller's
 * credential decides which tools `tools/list` shows and which `tools/call` may run. The
 * JSON-RPC `id` stays inside the SDK's protocol handling: it is never logged or stored.
 */
export const mcpRoutes: FastifyPluginAsync<McpRoutesOptions> = async (base: FastifyInstance, o) => {
  const app = base.withTypeProvider<TypeBoxTypeProvider>();
  // Host, Origin and credential are checked on arrival, before the body is parsed: a caller
  // without a credential gets 401 whatever it sent (docs/api.md).
  const onRequest = async (req: FastifyRequest): Promise<void> => {
    guardHostAndOrigin(req, o.allowedHosts);
    o.policy.identify(req.headers.authorization);
    // Filters go in the tool call's arguments: one in the query string would be ignored, and
    // the unfiltered answer mistaken for a filtered one (as on /tools/call).
    if (req.url.includes('?')) throw new InvalidInputError();
  };
  app.post('/mcp', { onRequest, errorHandler: parseErrorAsRpc, schema: MCP_SCHEMA }, async (req, reply) => {
    // Any known client may connect; the tools it sees depend on its grants.
    const client = o.policy.identify(req.headers.authorization);
    const refused = refusedBeforeSdk(req.body);
    if (refused) return reply.code(refused.status).type('application/json').send(refused.answer);
    return answerWithSdk(o.tools, client, req, reply, o.spans);
  });
  // Stateless: no server-initiated stream (GET) and no sessions to delete (DELETE); those and
  // every other method are 405 with `Allow: POST` from the app's not-found handler.
};

function buildServer(tools: McpRoutesOptions['tools'], client: Client, trace: CallTrace | undefined): Server {
  const server = new Server({ name: 'svc-serving', version: PACKAGE_VERSION }, { capabilities: { tools: {} } });
  const visible = Object.entries(tools).filter(([, t]) => client.grants.has(t.grant));
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: visible.map(([name, t]) => ({
      name,
      description: t.description,
      inputSchema: (t.inputSchema ?? INPUT_SCHEMA) as { type: 'object' },
      outputSchema: t.outputSchema as { type: 'object' },
    })),
  }));
  server.setRequestHandler(CallToolRequestSchema, async (request) => {
    const tool = visible.find(([name]) => name === request.params.name)?.[1];
    if (!tool) return { isError: true, content: [{ type: 'text' as const, text: 'Unknown tool or not permitted' }] };
    const span = trace?.spans.start(`tools/call ${request.params.name}`, 'server', trace.remote, {
      'svc.tool': request.params.name,
      'http.route': '/mcp',
    });
    try {
      const raw = request.params.arguments ?? {};
      const result = await tool.run(tool.parse ? tool.parse(raw) : parseFilterArgs(raw), span?.context);
      span?.end();
      return {
        content: [{ type: 'text' as const, text: JSON.stringify(result) }],
        structuredContent: result as Record<string, unknown>,
      };
    } catch (err) {
      span?.end(undefined, err instanceof SvcError ? err.code : 'internal');
      const title = err instanceof SvcError ? err.message : 'Internal error';
      return { isError: true, content: [{ type: 'text' as const, text: title }] };
    }
  });
  return server;
}
