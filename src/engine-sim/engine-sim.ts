import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { ConfigError } from '../errors.js';
import type { EngineSimOptions } from './engine-sim-options.js';
import { handleEmbeddings, handleRerank, handleTranscription } from './engine-sim-extras.js';
import { handleGeneration, simulatedFailure, type SimContext } from './engine-sim-generate.js';
import { handleResponses } from './engine-sim-responses.js';
import { ResponseStore, handleStoredResponse } from './engine-sim-response-store.js';
import {
  clearSimTimers,
  isJsonRequest,
  parseJsonObject,
  readBody,
  requestId,
  sendBody,
  sendError,
  sendJson,
  type SimResponse,
} from './engine-sim-http.js';

/**
 * `svc-serving engine sim`: an OpenAI-compatible engine stand-in (vLLM's OpenAI server shape)
 * with controllable timing, for router tests, benchmarks and the demo. It is the upstream in
 * throughput benchmarks, so it is plain node:http with keep-alive, no per-request logging and
 * string templates on the hot path. Per-request behaviour comes from `sim:key=value` words in
 * the prompt (see engine-sim-directives.ts).
 */
export interface EngineSimStats {
  /** Requests other than GET /health. */
  requests: number;
  /** Requests whose client went away before the response was complete. */
  aborted: number;
  /** Requests in flight now (health checks included). */
  open: number;
  /** GET /health calls (readiness-caching tests count them). */
  health: number;
}

export interface EngineSim {
  url: string;
  close(): Promise<void>;
  setHealth(h: { ok: boolean; delayMs: number }): void;
  stats(): EngineSimStats;
}

const RESPONSE_PATH = '/v1/responses/';

const LOOPBACK = new Set(['127.0.0.1', '::1', '::ffff:127.0.0.1']);

/** What the sim's handlers share and change: counts, the health it reports, whether it is closing. */
interface SimState {
  readonly counts: EngineSimStats;
  health: { ok: boolean; delayMs: number };
  /**
   * Every inference request answered with this status (failover tests: a replica that is up but
   * failing), or 0 for normal service. Set through /sim/health's `fail_status`.
   */
  failStatus: number;
  closing: boolean;
}

export async function startEngineSim(
  opts: EngineSimOptions & { host: string; port: number; logger: Logger },
): Promise<EngineSim> {
  checkOptions(opts);
  const options: EngineSimOptions = {
    ttftMs: opts.ttftMs,
    tokenDelayMs: opts.tokenDelayMs,
    tokens: opts.tokens,
    model: opts.model,
    maxModelLen: opts.maxModelLen,
  };
  const state: SimState = {
    counts: { requests: 0, aborted: 0, open: 0, health: 0 },
    health: { ok: true, delayMs: 0 },
    failStatus: 0,
    closing: false,
  };
  const ctx = simContext(options);
  const server = createSimServer(state, simRoutes(ctx, state, modelsBody(options)));
  await listenOn(server, opts.host, opts.port);
  const addr = server.address();
  const port = typeof addr === 'object' && addr !== null ? addr.port : opts.port;
  const url = `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host}:${port}`;
  opts.logger.info({ url, model: options.model }, 'listening');

  return {
    url,
    setHealth(h) {
      state.health = { ok: h.ok, delayMs: Math.max(0, Math.floor(h.delayMs)) };
    },
    stats: () => ({ ...state.counts }),
    close() {
      state.closing = true;
      ctx.responses.clear();
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        // In-flight streams end now; their close listeners clear the timers.
        server.closeAllConnections();
      });
    },
  };
}

function simContext(options: EngineSimOptions): SimContext {
  const idPrefix = randomBytes(6).toString('hex');
  let counter = 0;
  return {
    opts: options,
    modelJson: JSON.stringify(options.model),
    nextId: () => idPrefix + (++counter).toString(16),
    responses: new ResponseStore(),
  };
}

/** GET /v1/models: the one served model, as vLLM lists it (with its context length). */
function modelsBody(options: EngineSimOptions): string {
  return JSON.stringify({
    object: 'list',
    data: [
      {
        id: options.model,
        object: 'model',
        created: Math.floor(Date.now() / 1000),
        owned_by: 'svc-sim',
        max_model_len: options.maxModelLen,
      },
    ],
  });
}

/** The sim's routes by path and method: vLLM's OpenAI-compatible ones, /health, and its own /sim/health switch. */
function simRoutes(ctx: SimContext, state: SimState, models: string): (req: IncomingMessage, res: SimResponse) => void {
  return (req, res) => {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const method = req.method;
    if (path === '/health' && method === 'GET') {
      state.counts.health++;
      if (state.health.delayMs > 0) res.simTimer = setTimeout(answerHealth, state.health.delayMs, state, req, res);
      else answerHealth(state, req, res);
      return;
    }
    state.counts.requests++;
    if (state.failStatus !== 0 && method === 'POST' && path.startsWith('/v1/'))
      return sendJson(req, res, state.failStatus, simulatedFailure(state.failStatus));
    // A kept Response: retrieve and cancel (vLLM's routes under /v1/responses/{id}).
    if (path.startsWith(RESPONSE_PATH))
      return handleStoredResponse(ctx.responses, req, res, path.slice(RESPONSE_PATH.length), method);
    switch (path) {
      case '/v1/chat/completions':
        if (method === 'POST') return onJson(req, res, (b) => handleGeneration(ctx, req, res, b, 'chat'));
        break;
      case '/v1/completions':
        if (method === 'POST') return onJson(req, res, (b) => handleGeneration(ctx, req, res, b, 'completion'));
        break;
      case '/v1/responses':
        if (method === 'POST') return onJson(req, res, (b) => handleResponses(ctx, req, res, b));
        break;
      case '/v1/embeddings':
        if (method === 'POST') return onJson(req, res, (b) => handleEmbeddings(ctx, req, res, b));
        break;
      case '/v1/rerank':
      case '/rerank':
      case '/v2/rerank':
        if (method === 'POST') return onJson(req, res, (b) => handleRerank(ctx, req, res, b));
        break;
      case '/v1/audio/transcriptions':
        if (method === 'POST') return readBody(req, res, (buf) => handleTranscription(ctx, req, res, buf));
        break;
      case '/v1/models':
        if (method === 'GET') return sendJson(req, res, 200, models);
        break;
      case '/sim/health':
        if (method === 'POST') return onHealthToggle(state, req, res);
        break;
      default:
        return sendError(req, res, 404, 'Not Found', 'invalid_request_error', 404);
    }
    sendError(req, res, 405, 'Method Not Allowed', 'invalid_request_error', 405);
  };
}

function answerHealth(state: SimState, req: IncomingMessage, res: ServerResponse): void {
  if (state.health.ok) {
    const rid = requestId(req);
    res.writeHead(200, rid !== undefined ? ['content-length', '0', 'x-request-id', rid] : ['content-length', '0']);
    res.end();
  } else {
    sendError(req, res, 503, 'engine is not healthy', 'server_error', 503);
  }
}

/** Reads a JSON object body and hands it on; anything else is answered 400 here. */
function onJson(req: IncomingMessage, res: SimResponse, handle: (body: Record<string, unknown>) => void): void {
  if (!isJsonRequest(req)) {
    sendError(req, res, 400, 'Content-Type must be application/json', 'invalid_request_error');
    return;
  }
  readBody(req, res, (buf) => {
    const body = parseJsonObject(buf);
    if (body === undefined)
      sendError(req, res, 400, 'We could not parse the JSON body of your request.', 'invalid_request_error');
    else handle(body);
  });
}

/** POST /sim/health `{"ok", "delay_ms", "fail_status"?}`: what /health (and, with fail_status, every inference route) answers from now on (loopback callers only). */
function onHealthToggle(state: SimState, req: IncomingMessage, res: SimResponse): void {
  if (!LOOPBACK.has(req.socket.remoteAddress ?? '')) {
    sendError(req, res, 403, 'only accepted from loopback', 'permission_error', 403);
    return;
  }
  onJson(req, res, (b) => {
    const ok = b['ok'];
    const delay = b['delay_ms'] ?? 0;
    const fail = b['fail_status'] ?? 0;
    if (
      !(fail === 0 || (Number.isInteger(fail) && (fail as number) >= 500 && (fail as number) <= 599)) ||
      typeof ok !== 'boolean' ||
      typeof delay !== 'number' ||
      !Number.isInteger(delay) ||
      delay < 0 ||
      delay > 600_000
    ) {
      sendError(
        req,
        res,
        400,
        'expected {"ok": boolean, "delay_ms": non-negative integer, "fail_status"?: 0 or 500-599}',
        'invalid_request_error',
      );
      return;
    }
    state.health = { ok, delayMs: delay };
    state.failStatus = fail as number;
    sendJson(req, res, 200, JSON.stringify({ ok, delay_ms: delay }));
  });
}

/**
 * The sim's HTTP server: keep-alive like uvicorn's, no whole-request deadline (long streams
 * are the point), one shared close listener, and a 500 rather than a crash for a handler that throws.
 */
function createSimServer(state: SimState, route: (req: IncomingMessage, res: SimResponse) => void): Server {
  const counts = state.counts;
  // One listener shared by every response (state lives on the response), so no closure per request.
  function onResponseClose(this: SimResponse): void {
    counts.open--;
    clearSimTimers(this);
    if (!this.writableFinished && this.simCut !== true && !state.closing) counts.aborted++;
  }
  const server = createServer(
    { keepAlive: true, noDelay: true, keepAliveTimeout: 65_000 },
    (req, res: ServerResponse) => {
      counts.open++;
      res.once('close', onResponseClose);
      // A client that resets mid-upload makes the request emit 'error'; it is already counted via close.
      req.on('error', ignore);
      try {
        route(req, res as SimResponse);
      } catch {
        // Never crash the engine on one request; answer 500 when nothing was sent yet.
        if (!res.headersSent)
          sendBody(
            req,
            res,
            500,
            'application/json',
            '{"error":{"message":"internal error","type":"server_error","param":null,"code":500}}',
          );
        else res.destroy();
      }
    },
  );
  // Idle keep-alive connections outlive a router's pool timeout, like uvicorn's do not; 65 s is the usual LB-safe value.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  // Long streams are the point of the sim: no whole-request deadline.
  server.requestTimeout = 0;
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
    else socket.destroy();
  });
  return server;
}

/** Thrown when: the address is taken or cannot be listened on. */
function listenOn(server: Server, host: string, port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (err: Error): void => reject(err);
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}

function ignore(): void {}

/** Thrown when: an option is not a finite non-negative integer, or the model name is empty. */
function checkOptions(o: EngineSimOptions): void {
  for (const [k, v] of [
    ['ttftMs', o.ttftMs],
    ['tokenDelayMs', o.tokenDelayMs],
    ['tokens', o.tokens],
    ['maxModelLen', o.maxModelLen],
  ] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new ConfigError(`engine sim: ${k} must be a non-negative integer`);
  }
  if (o.maxModelLen < 1) throw new ConfigError('engine sim: maxModelLen must be at least 1');
  if (typeof o.model !== 'string' || o.model.length === 0 || o.model.length > 256)
    throw new ConfigError('engine sim: model must be a non-empty name');
}
