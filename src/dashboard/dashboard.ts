import { healthRoutes } from '../http/health-routes.js';
import type { Socket } from 'node:net';
import fastifyWebsocket from '@fastify/websocket';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { ErrorCode, InvalidInputError, OriginRefusedError, SvcError } from '../errors.js';
import { LineBudget } from '../http/line-budget.js';
import { createHttpApp, isLoopbackHost, listen, loopbackHosts } from '../http/http-app.js';
import { reloadableTls } from '../http/tls.js';
import { NO_CREDENTIAL, NoQuery, problemResponses } from '../http/route-schemas.js';
import {
  dashboardTls,
  fleetService,
  routerSource,
  telemetryGate,
  workloadService,
  type DashboardOptions,
  type DisabledReason,
} from './dashboard-config.js';
import { RequestsWatcher, RouterReader } from './dashboard-requests.js';
import { formatTimestamp } from '../schema/primitives.js';
import { ControllerReader, FleetReader } from './dashboard-reader.js';
import { DashboardSession, type FrameSink } from './dashboard-session.js';
import { registerPageRoutes } from './dashboard-static.js';
import { TelemetryHub } from './dashboard-telemetry.js';
import { Heartbeat, HEARTBEAT_MS } from './dashboard-heartbeat.js';

export type { DashboardOptions } from './dashboard-config.js';

export interface DashboardHandle {
  readonly url: string;
  /** `enabled`, or why workload reads are disabled. */
  readonly workloads: 'enabled' | DisabledReason;
  close(): Promise<void>;
}

/** How often the page asks for a new read while it is visible (told to it in `hello`). */
export const POLL_MS = 2_000;
const MAX_MESSAGE_BYTES = 16 * 1024;
const MAX_BUFFERED_BYTES = 1024 * 1024;
/** Open WebSockets at most (tabs across every browser); the next upgrade is a 503 problem. */
export const MAX_SOCKETS = 64;
/** Open WebSockets from one remote address at most: one client cannot take every slot. */
export const MAX_SOCKETS_PER_ADDRESS = 16;

/** The subset of the `ws` socket used here (its types are not a dependency of this package). */
interface WsSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  send(data: string): void;
  close(code: number): void;
  ping(): void;
  on(event: 'message', fn: (data: Buffer, isBinary: boolean) => void): void;
  on(event: 'close' | 'error' | 'pong', fn: () => void): void;
  terminate(): void;
}

/**
 * Frames to one socket, never silently dropped: a client with `maxBuffered` bytes or more
 * still unsent is cut (`onSlow` is told how far behind it was). A page shown with frames
 * missing (a newer result, a denial) would be wrong without knowing it; a cut page sees its
 * link lost, reconnects and reads afresh.
 */
export function boundedSink(
  socket: Pick<WsSocket, 'readyState' | 'bufferedAmount' | 'send' | 'terminate'>,
  maxBuffered: number,
  onSlow: (buffered: number) => void,
): FrameSink {
  return {
    send(frame) {
      if (socket.readyState !== 1) return;
      if (socket.bufferedAmount >= maxBuffered) {
        onSlow(socket.bufferedAmount);
        socket.terminate();
        return;
      }
      socket.send(frame);
    },
  };
}

/** A dashboard built but not yet listening (startDashboard; the OpenAPI generator builds one too). */
export interface DashboardApp {
  readonly app: FastifyInstance;
  readonly hub: TelemetryHub;
  readonly reader: ControllerReader | undefined;
  /** The fleet controller the Fleet view reads, when configured (decision 0078). */
  readonly fleet: FleetReader | undefined;
  readonly workloads: 'enabled' | DisabledReason;
  /** The router the Requests view reads, when one is configured (closed with the app). */
  readonly requests: { readonly reader: RouterReader; readonly watcher: RequestsWatcher } | undefined;
  /** Pings every page's socket and cuts silent ones (decision 0037); started once listening. */
  readonly heartbeat: Heartbeat;
  /** Serves only these Host values from now on (DNS rebinding; set once listening on loopback). */
  allowHosts(hosts: ReadonlySet<string>): void;
  /** Cuts every WebSocket and connection still open and closes the app. */
  close(): Promise<void>;
}

/** The session's collaborators (one per process), handed to each socket's DashboardSession. */
interface SocketDeps {
  readonly log: Logger;
  readonly gate: ReturnType<typeof telemetryGate>;
  readonly service: ReturnType<typeof workloadService>;
  readonly reader: ControllerReader | undefined;
  readonly hub: TelemetryHub;
  readonly requests: { readonly reader: RouterReader; readonly watcher: RequestsWatcher } | undefined;
  readonly fleet: FleetReader | undefined;
  readonly heartbeat: Heartbeat;
}

/** `/ws`: no query string; the page's own Origin; a WebSocket upgrade (documentation; the route checks them). */
const wsSchema = {
  summary: "The page's WebSocket: telemetry frames and workload reads (JSON text frames)",
  description:
    'A WebSocket upgrade from the page itself (Origin must be this server). The first frame is `hello`; the workload credential travels inside the socket, never in the URL. At most 64 sockets in all and 16 per remote address (503 beyond).',
  tags: ['dashboard'],
  security: NO_CREDENTIAL,
  querystring: NoQuery,
  response: {
    101: { description: 'switching to the WebSocket protocol' },
    ...problemResponses(400, 403, 503),
  },
};
/** `/ws`'s schema object (the OpenAPI generator lifts the `hide` that @fastify/websocket puts on it). */
export const WS_SCHEMA: { hide?: boolean } = wsSchema as { hide?: boolean };

/** Registers `/ws`; returns the open sockets (cut at shutdown). */
function registerSocketRoute(app: FastifyInstance, deps: SocketDeps): Set<WsSocket> {
  // Open sockets, cut at shutdown: a browser that never answers the close handshake must not
  // hold the process past SIGTERM.
  const sockets = new Set<WsSocket>();
  const perAddress = new Map<string, number>();
  // Cross-site WebSocket hijacking: a browser always sends Origin; only this page's is taken.
  const sameOrigin = async (req: FastifyRequest): Promise<void> => {
    const origin = req.headers.origin;
    if (
      typeof origin !== 'string' ||
      (origin !== `http://${req.headers.host}` && origin !== `https://${req.headers.host}`)
    )
      throw new OriginRefusedError();
    // `/ws` is only a WebSocket: a plain GET or HEAD gets the fixed 400 problem, not an empty 404.
    if (req.headers.upgrade?.toLowerCase() !== 'websocket') throw new InvalidInputError();
    // It takes no query string (a credential must never travel in a URL): refused, not ignored.
    if (req.url.includes('?')) throw new InvalidInputError();
    // Each socket holds a session, a telemetry subscription and its buffers: bounded in number.
    if (sockets.size >= MAX_SOCKETS) throw new SvcError(ErrorCode.UNAVAILABLE);
    if ((perAddress.get(req.socket.remoteAddress ?? '') ?? 0) >= MAX_SOCKETS_PER_ADDRESS)
      throw new SvcError(ErrorCode.UNAVAILABLE);
  };
  const openSession = sessionOpener(deps);
  app.get('/ws', { websocket: true, preValidation: sameOrigin, schema: wsSchema }, (raw, req) => {
    const socket = raw as unknown as WsSocket;
    const address = req.socket.remoteAddress ?? '';
    const fromAddress = perAddress.get(address) ?? 0;
    if (sockets.size >= MAX_SOCKETS || fromAddress >= MAX_SOCKETS_PER_ADDRESS) {
      // Upgrades that raced past the check: refused as "try again later".
      socket.close(1013);
      return;
    }
    sockets.add(socket);
    perAddress.set(address, fromAddress + 1);
    deps.heartbeat.add(socket);
    const session = openSession(socket);
    socket.on('close', () => {
      deps.heartbeat.forget(socket);
      if (sockets.delete(socket)) {
        const left = (perAddress.get(address) ?? 1) - 1;
        if (left > 0) perAddress.set(address, left);
        else perAddress.delete(address);
      }
      session.close();
    });
  });
  return sockets;
}

/** Starts a socket's session: `hello`, then its frames handled (telemetry at once when open). */
function sessionOpener(deps: SocketDeps): (socket: WsSocket) => DashboardSession {
  const { log, gate } = deps;
  const slowReaders = new LineBudget(10, (skipped) =>
    log.warn({ skipped }, 'slow websocket reader lines left out (rate bound)'),
  );
  const refusedLines = new LineBudget(10, (skipped) =>
    log.info({ skipped }, 'workload session refused lines left out (rate bound)'),
  );
  const { heartbeat } = deps;
  return (socket) => {
    const bounded = boundedSink(socket, MAX_BUFFERED_BYTES, (buffered) => {
      if (slowReaders.take(Date.now()))
        log.warn({ buffered_bytes: buffered }, 'websocket closed: the client reads too slowly');
    });
    const session = new DashboardSession({
      // Every frame counts as traffic: `beat` goes only to a socket that was sent nothing else.
      sink: {
        send(frame) {
          bounded.send(frame);
          heartbeat.sent(socket);
        },
      },
      gate,
      service: deps.service,
      reader: deps.reader,
      logger: log,
      refusedLines,
      requests: deps.requests,
      fleet: deps.fleet,
      subscribeTelemetry: (sink) => deps.hub.subscribe(sink),
    });
    socket.send(
      JSON.stringify({
        type: 'hello',
        telemetry: gate.required ? 'credential-required' : 'open',
        poll_ms: POLL_MS,
        beat_ms: heartbeat.intervalMs,
      }),
    );
    // Open telemetry (loopback, no --auth-env) needs no credential: subscribe at once.
    if (!gate.required) session.handle('{"type":"telemetry-auth"}');
    socket.on('pong', () => heartbeat.heard(socket));
    socket.on('message', (data, isBinary) => {
      heartbeat.heard(socket);
      if (!isBinary) session.handle(data.toString('utf8'));
    });
    socket.on('error', () => session.close());
    return session;
  };
}

/** The Requests view's source: this router, read with the dashboard's router credential (none: no Requests view). */
function requestsSource(router: ReturnType<typeof routerSource>): DashboardApp['requests'] {
  if (!router) return undefined;
  const reader = new RouterReader(router.origin, router.credential);
  return { reader, watcher: new RequestsWatcher(reader, POLL_MS, () => formatTimestamp(Date.now())) };
}

/**
 * The WebSocket plugin. A socket the ws library closes for a protocol error (oversized,
 * invalid UTF-8, bad opcode, unmasked) leaves one warn line with the error's name and code, at
 * most 10 a second; never its message or stack (they carry install paths and would let any
 * page flood the log).
 */
async function registerWebsocket(app: FastifyInstance, log: Logger): Promise<void> {
  const protocolErrors = new LineBudget(10, (skipped) =>
    log.warn({ skipped }, 'websocket protocol error lines left out (rate bound)'),
  );
  await app.register(fastifyWebsocket, {
    options: { maxPayload: MAX_MESSAGE_BYTES },
    errorHandler: (err, socket) => {
      if (protocolErrors.take(Date.now())) log.warn({ err }, 'websocket closed on a protocol error');
      socket.terminate();
    },
  });
}

/**
 * The dashboard's app, built but not listening: the page, `/ws`, the Host guard. Nothing is
 * started (no telemetry sampling, no socket) until startDashboard listens.
 * Thrown when: the telemetry gate is misconfigured or the page files are missing.
 */
export async function buildDashboard(
  o: DashboardOptions,
  deps: { logger: Logger; env?: NodeJS.ProcessEnv; beforeRoutes?: (app: FastifyInstance) => void },
): Promise<DashboardApp> {
  const log = deps.logger.child({ component: 'dashboard' });
  const env = deps.env ?? process.env;
  const gate = telemetryGate(o, env);
  const tls = reloadableTls(dashboardTls(o), 'dashboard', log);
  const service = workloadService(o, env, gate);
  gate.forgetToken();
  if (service.enabled) log.info({ expected_node: service.expectedNode }, 'workload reads enabled');
  else log.warn({ reason: service.reason }, 'workload reads disabled: every workload read gets the fixed denial');
  const router = routerSource(o, env);
  const reader = service.enabled ? new ControllerReader(service.origin, service.expectedNode) : undefined;
  const fleetCfg = fleetService(o, service);
  if (fleetCfg.enabled) log.info('fleet view enabled');
  else if (fleetCfg.reason !== 'not-configured') log.warn({ reason: fleetCfg.reason }, 'fleet view disabled');
  const fleet =
    fleetCfg.enabled && service.enabled ? new FleetReader(fleetCfg.origin, service.expectedNode) : undefined;
  const hub = new TelemetryHub({
    nvidiaSmi: env['SVC_NVIDIA_SMI'] || 'nvidia-smi',
    intervalMs: o.sampleIntervalMs ?? 3_000,
    routerMetricsUrl: o.routerMetricsUrl ?? (router ? `${router.origin}/metrics` : undefined),
  });
  const requests = requestsSource(router);
  const heartbeat = new Heartbeat(o.heartbeatMs ?? HEARTBEAT_MS);
  const app = createHttpApp({
    logger: log,
    bodyLimit: MAX_MESSAGE_BYTES,
    tls,
    ...(deps.beforeRoutes ? { beforeRoutes: deps.beforeRoutes } : {}),
  });
  // Every connection, upgraded or refused ones included (node:http stops tracking a socket
  // once it emits 'upgrade'): what is left at shutdown is cut, never waited on.
  const connections = new Set<Socket>();
  app.server.on('connection', (c: Socket) => {
    connections.add(c);
    c.on('close', () => connections.delete(c));
  });
  let allowedHosts: ReadonlySet<string> | undefined;
  await registerWebsocket(app, log);
  // DNS rebinding: on loopback, only Host values that name this server are served. Added after
  // the WebSocket plugin's own hook, so a refused upgrade is known as one and its socket is
  // closed with the answer (else it stayed open and held the server's close for good).
  app.addHook('onRequest', async (req) => {
    if (allowedHosts && !allowedHosts.has(req.headers.host ?? '')) throw new OriginRefusedError();
  });
  const sockets = registerSocketRoute(app, { log, gate, service, reader, hub, requests, fleet, heartbeat });
  registerPageRoutes(app);
  // Ready whenever it serves: its sources' failures are shown on the page, where they belong
  // (docs/decisions/0053). The loopback Host guard above applies to these routes too.
  await app.register(healthRoutes, { tag: 'dashboard' });
  return {
    app,
    hub,
    reader,
    fleet,
    requests,
    heartbeat,
    workloads: service.enabled ? 'enabled' : service.reason,
    allowHosts(hosts) {
      allowedHosts = hosts;
    },
    async close() {
      requests?.watcher.stop();
      heartbeat.stop();
      for (const s of sockets) s.terminate();
      const closing = app.close();
      const cut = setTimeout(() => {
        for (const c of connections) c.destroy();
      }, 1_000);
      await closing;
      clearTimeout(cut);
    },
  };
}

/**
 * `svc-serving dashboard serve`: the page, plus one WebSocket (`/ws`) per tab carrying
 * telemetry frames and workload reads. Workload reads go to the declared controller only,
 * with the credential the user typed (checked against the local policy first); telemetry is
 * gated separately by `--auth-env`. Neither the credential nor any request detail is logged.
 * Thrown when: the telemetry gate is misconfigured or the address cannot be used.
 */
export async function startDashboard(
  o: DashboardOptions,
  deps: { logger: Logger; env?: NodeJS.ProcessEnv },
): Promise<DashboardHandle> {
  const d = await buildDashboard(o, deps);
  let url: string;
  try {
    url = await listen(d.app, o.host, o.port);
  } catch (err) {
    await d.reader?.close();
    await d.fleet?.close();
    throw err;
  }
  if (isLoopbackHost(o.host)) d.allowHosts(new Set(loopbackHosts(d.app)));
  d.hub.start();
  d.heartbeat.start();
  return {
    url,
    workloads: d.workloads,
    async close() {
      d.hub.stop();
      await d.close();
      await d.reader?.close();
      await d.fleet?.close();
      await d.requests?.reader.close();
    },
  };
}
