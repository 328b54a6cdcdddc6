/**
 * The OpenAPI 3.1 documents of every server, generated from the routes each one registers
 * (docs/decisions/0040-route-schemas-document-the-parsers.md). Each server's app is built in
 * this process exactly as the server builds it, without listening, with @fastify/swagger
 * registered before its routes; the swagger plugin is never part of a running server.
 */
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { pino } from 'pino';
import type { AuthorizationPolicy } from '../../src/auth/policy.js';
import type { RouterConfig } from '../../src/config/router-config.js';
import { buildControllerApp } from '../../src/controller/controller.js';
import { WS_SCHEMA, buildDashboard } from '../../src/dashboard/dashboard.js';
import { buildFleetApp } from '../../src/fleet/fleet.js';
import { ControllerMetrics } from '../../src/controller/controller-metrics.js';
import { Registry } from 'prom-client';
import { createHttpApp } from '../../src/http/http-app.js';
import { healthRoutes } from '../../src/http/health-routes.js';
import type { JobService } from '../../src/jobs/job-service.js';
import type { RequestAsker } from '../../src/mcp/request-tools.js';
import { inferenceRouteDocs } from '../../src/router/inference-docs.js';
import type { RouterRegistry } from '../../src/router/records/router-registry.js';
import type { RouterMetrics } from '../../src/router/metrics.js';
import type { DataPlaneKeys } from '../../src/auth/api-keys.js';
import { routerRoutes, type RouterRoutesOptions } from '../../src/router/router-routes.js';
import { responsesRoutes } from '../../src/router/responses-routes.js';
import type { RelayContext } from '../../src/router/relay-context.js';
import type { NodeView } from '../../src/streams/node-view.js';
import { PACKAGE_VERSION } from '../../src/version.js';

export const SERVERS = ['router', 'controller', 'fleet', 'dashboard'] as const;
export type ServerName = (typeof SERVERS)[number];

/** Where each server's document is kept, relative to the repository root. */
export const documentPath = (server: ServerName): string => `docs/reference/openapi-${server}.json`;

/** The command that rewrites the documents (named by the test when one is out of date). */
export const REGENERATE = 'npm run docs:openapi';

const DESCRIPTIONS: Readonly<Record<ServerName, string>> = {
  router:
    'The router: OpenAI-compatible inference relayed to engines (errors are OpenAI error objects), request lookups, its own workload inventory and Prometheus metrics (errors are RFC 9457 problems).',
  controller:
    'A node controller: node_workloads and the request diagnosis tools over /tools/call and MCP, and the lifecycle commands (plan, then apply).',
  fleet: 'The fleet controller: fleet_workloads and the request diagnosis tools over /tools/call and MCP.',
  dashboard:
    'The local dashboard: its page and the WebSocket that carries telemetry and workload reads (no HTTP credential: the workload credential travels inside the socket).',
};

// Stand-ins for what the routes reach only while answering a request: building the routes
// touches none of them, and no request is ever sent to these apps.
const unused = <T>(): T => ({}) as T;

function describe(server: ServerName): (app: FastifyInstance) => void {
  return (app) => {
    void app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: { title: `svc-serving ${server}`, version: PACKAGE_VERSION, description: DESCRIPTIONS[server] },
        components: {
          securitySchemes: {
            bearerAuth: {
              type: 'http',
              scheme: 'bearer',
              description: 'Authorization: Bearer <token>; a 401 carries WWW-Authenticate: Bearer',
            },
          },
        },
        security: [{ bearerAuth: [] }],
      },
      // Shared schemas (Problem, OpenAIError) under their own names in components.schemas.
      refResolver: { buildLocalReference: (json, _base, _fragment, i) => String(json['$id'] ?? `def-${i}`) },
    });
  };
}

/** Builds `server`'s app (not listening) with the document generator registered before its routes. */
async function buildApp(server: ServerName): Promise<{ app: FastifyInstance; close: () => Promise<void> }> {
  const logger = pino({ level: 'silent' });
  const beforeRoutes = describe(server);
  const policy = unused<AuthorizationPolicy>();
  const requests = unused<RequestAsker>();
  if (server === 'router') {
    const app = createHttpApp({ logger, beforeRoutes });
    await app.register(healthRoutes, { tag: 'router' });
    await app.register(routerRoutes, {
      cfg: unused<RouterConfig>(),
      routing: unused<RouterRoutesOptions['routing']>(),
      keys: unused<DataPlaneKeys>(),
      knownCredential: () => false,
      policy,
      registry: unused<RouterRegistry>(),
      metrics: unused<RouterMetrics>(),
      workloads: unused<RouterRoutesOptions['workloads']>(),
      startedAt: '',
      packageVersion: PACKAGE_VERSION,
    });
    await app.register(responsesRoutes, { ctx: unused<RelayContext>(), authRefused: () => undefined });
    // Served by the relay in front of Fastify (router.ts); described here.
    await app.register(inferenceRouteDocs);
    return { app, close: () => app.close() };
  }
  if (server === 'controller') {
    const app = await buildControllerApp({
      logger,
      policy,
      view: unused<NodeView>(),
      jobs: unused<JobService>(),
      requests,
      allowedHosts: () => undefined,
      metrics: {
        metrics: new ControllerMetrics({ owners: [], staleAfterMs: 1, snapshot: unused }),
        requireAuth: false,
      },
      beforeRoutes,
    });
    return { app, close: () => app.close() };
  }
  if (server === 'fleet') {
    const app = await buildFleetApp({
      logger,
      policy,
      run: async () => unused(),
      requests,
      metrics: { registry: new Registry(), requireAuth: false },
      beforeRoutes,
    });
    return { app, close: () => app.close() };
  }
  const d = await buildDashboard({ host: '127.0.0.1', port: 0 }, { logger, env: {}, beforeRoutes });
  return { app: d.app, close: () => d.close() };
}

/** Object keys sorted at every level (arrays keep their order): the same code gives the same bytes. */
function sortedKeys(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(sortedKeys);
  if (v === null || typeof v !== 'object') return v;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(v).sort()) out[k] = sortedKeys((v as Record<string, unknown>)[k]);
  return out;
}

/** `server`'s OpenAPI document as the text kept in docs/reference (2-space JSON, keys sorted, final newline). */
export async function openApiDocument(server: ServerName): Promise<string> {
  const { app, close } = await buildApp(server);
  try {
    await app.ready();
    // @fastify/websocket marks every WebSocket route `hide` (on the route's schema object,
    // WS_SCHEMA itself); `/ws` is a route of the dashboard all the same, and is described.
    delete WS_SCHEMA.hide;
    return `${JSON.stringify(sortedKeys(app.swagger()), null, 2)}\n`;
  } finally {
    await close();
  }
}
