import type { FastifyInstance, FastifyPluginAsync } from 'fastify';
import { Type } from '@sinclair/typebox';
import { InvalidArgumentError } from '../errors.js';
import { QUERY_PARAM } from '../schema/query-string.js';
import { NO_CREDENTIAL, NoQuery, jsonResponse, problemResponses } from './route-schemas.js';
import type { Bus } from '../streams/bus.js';
import { NatsBus } from '../streams/nats-bus.js';

/** Why a query string on a health route is refused (the problem names `query`). */
const NO_QUERY_REASON = 'must be empty: this route takes no parameters';

/** The names of the checks that fail now (bounded, configured names only; never a URL or a secret). */
export type ReadinessChecks = () => Promise<readonly string[]> | readonly string[];

export interface HealthRoutesOptions {
  /** What `/readyz` asks; absent: ready whenever the server serves. */
  readonly failing?: ReadinessChecks;
  /**
   * How long a `/readyz` answer is reused (0: each request asks; concurrent requests share one
   * evaluation either way). The checks may cache on their own (the router's replica probes do).
   */
  readonly cacheMs?: number;
  readonly now?: () => number;
  /** The server's tag in the OpenAPI document (router, controller, fleet, dashboard). */
  readonly tag?: string;
}

const Ok = Type.Object({ status: Type.Literal('ok') }, { additionalProperties: false });
const Unready = Type.Object(
  {
    status: Type.Literal('unready'),
    failing: Type.Array(
      Type.String({ description: 'a check name, e.g. alias:<alias>, decision-log, nats, store:<owner>' }),
    ),
  },
  { additionalProperties: false },
);

function healthSchema(tag: string, summary: string, ready: boolean): object {
  return {
    summary,
    tags: [tag],
    security: NO_CREDENTIAL,
    querystring: NoQuery,
    response: {
      200: jsonResponse('the server serves', Ok),
      ...(ready ? { 503: jsonResponse('some checks fail: their names', Unready) } : {}),
      ...problemResponses(400),
    },
  };
}

const OK = '{"status":"ok"}';

/**
 * `GET /healthz` (the process serves: always 200) and `GET /readyz` (200 `{"status":"ok"}`,
 * or 503 `{"status":"unready","failing":[check names]}`), `application/json`, no credential
 * (CONTRACT.md HTTP). They pass the server's own request checks (Host, framing, and the
 * dashboard's loopback Host guard), like every route. docs/decisions/0053.
 */
export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app: FastifyInstance, o) => {
  const now = o.now ?? Date.now;
  let cached: { at: number; failing: readonly string[] } | undefined;
  let inFlight: Promise<readonly string[]> | undefined;
  const evaluate = async (): Promise<readonly string[]> => {
    if (!o.failing) return [];
    if (cached && now() - cached.at < (o.cacheMs ?? 0)) return cached.failing;
    inFlight ??= Promise.resolve(o.failing()).finally(() => {
      inFlight = undefined;
    });
    const failing = await inFlight;
    cached = { at: now(), failing };
    return failing;
  };
  const tag = o.tag ?? 'controller';
  app.get(
    '/healthz',
    { schema: healthSchema(tag, 'Liveness: 200 while the process serves', false) },
    async (req, reply) => {
      if (req.url.includes('?')) throw new InvalidArgumentError(QUERY_PARAM, NO_QUERY_REASON);
      return reply.type('application/json').send(OK);
    },
  );
  app.get(
    '/readyz',
    { schema: healthSchema(tag, 'Readiness: 200, or 503 naming the failing checks', true) },
    async (req, reply) => {
      if (req.url.includes('?')) throw new InvalidArgumentError(QUERY_PARAM, NO_QUERY_REASON);
      const failing = await evaluate();
      if (failing.length === 0) return reply.type('application/json').send(OK);
      return reply
        .code(503)
        .header('cache-control', 'no-store')
        .type('application/json')
        .send(JSON.stringify({ status: 'unready', failing }));
    },
  );
};

/**
 * Follows a bus's connection for `/readyz`: `down()` is true while a NATS bus is not
 * connected (an in-process bus is never down). `stop()` ends the watch.
 */
export function watchNats(bus: Bus): { down(): boolean; stop(): void } {
  if (!(bus instanceof NatsBus)) return { down: () => false, stop: () => undefined };
  let connected = true;
  const sub = bus.state$.subscribe((s) => {
    connected = s === 'connected';
  });
  return { down: () => !connected, stop: () => sub.unsubscribe() };
}
