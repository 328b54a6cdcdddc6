import Fastify, {
  LogController,
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { isIPv4, type Socket } from 'node:net';
import { Server as TlsServer } from 'node:tls';
import type { Logger } from 'pino';
import {
  ERRORS,
  ErrorCode,
  InvalidArgumentError,
  InvalidInputError,
  OPENAI_ERROR_CONTENT_TYPE,
  PROBLEM_CONTENT_TYPE,
  SvcError,
  openAiError,
  problemFor,
  type InvalidParam,
} from '../errors.js';
import { hasDuplicateKey } from '../schema/json-duplicates.js';
import { withPlainIntegers } from '../schema/json-numbers.js';
import { LineBudget } from './line-budget.js';
import { repeatsSingleHeader } from './single-headers.js';
import { SHARED_SCHEMAS, serializerCompiler, validatorCompiler } from './route-schemas.js';
import type { ReloadableTls } from './tls.js';

export interface HttpAppOptions {
  readonly logger: Logger;
  /** Largest accepted request body in bytes. */
  readonly bodyLimit?: number;
  /** Build the node:http server yourself (the router puts its relay in front of Fastify). */
  readonly serverFactory?: (handler: (req: IncomingMessage, res: ServerResponse) => void) => Server;
  /**
   * Longest time a request may take to arrive whole, headers and body (default 60 s): a body
   * that never finishes gets the fixed 400 and its connection closes. Node checks every
   * `connectionsCheckIntervalMs` (default 30 s), so the cut comes up to that much later.
   * With `serverFactory` the factory's server sets its own.
   */
  readonly requestTimeoutMs?: number;
  readonly connectionsCheckIntervalMs?: number;
  /**
   * A request node:http refuses on its own after reading its headers (an `Expect` other than
   * 100-continue): true when this answered it on `res` (the router's inference routes: their
   * error object, ids and record); false leaves the fixed 400. Either way the connection
   * closes after the answer.
   */
  readonly answerExpectation?: (req: IncomingMessage, res: ServerResponse) => boolean;
  /**
   * A connection fault (a malformed chunked body, a request that did not arrive whole in
   * time, bytes no parser reads) while `res` is the answer its connection owes and none of it
   * has gone out: true when this took it (answered `res` itself, or left `res` to its own
   * request and marked the connection to close after it); false leaves the fixed 400.
   */
  readonly answerFault?: (res: ServerResponse, err: Error & { code?: string }) => boolean;
  /** Called once the app's rules are set and before any route is added (the OpenAPI generator registers @fastify/swagger here). */
  readonly beforeRoutes?: (app: FastifyInstance) => void;
  /**
   * Paths whose errors are OpenAI error objects instead of problems (the router's data-plane
   * model routes, CONTRACT.md HTTP); every other path answers problem+json.
   */
  readonly openAiErrors?: (path: string) => boolean;
  /**
   * The coded answer to a path Fastify cannot route (a parameter with bad percent-encoding, or
   * longer than any route reads), when its owner knows which parameter that is; else the
   * fixed 400 invalid-input.
   */
  readonly unroutable?: (path: string) => { readonly code: ErrorCode; readonly invalid?: InvalidParam } | undefined;
  /** The code a path no route serves is answered with, when its owner has one for it; else NOT_FOUND. */
  readonly unknownRoute?: (path: string) => ErrorCode | undefined;
  /**
   * HTTPS with this certificate and key, re-read on SIGHUP while the app is open. With
   * `serverFactory` the factory makes the HTTPS server (createNodeServer); the reload still applies.
   */
  readonly tls?: ReloadableTls | undefined;
}

/** Default time a request may take to arrive whole on a Fastify-built server (ms). */
export const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;

/** Sends a fixed RFC 9457 problem for a coded error (a 401 with its `WWW-Authenticate: Bearer`). */
export function sendProblem(
  reply: FastifyReply,
  code: ErrorCode,
  invalidParams?: readonly InvalidParam[],
): FastifyReply {
  const status = ERRORS[code].status;
  if (status === 401) reply.header('www-authenticate', 'Bearer');
  return reply.code(status).type(PROBLEM_CONTENT_TYPE).send(problemFor(code, invalidParams));
}

/** Sends the fixed OpenAI error object for a coded error (a 401 with its `WWW-Authenticate: Bearer`). */
export function sendOpenAiError(reply: FastifyReply, code: ErrorCode, param?: string | null): FastifyReply {
  const status = ERRORS[code].status;
  if (status === 401) reply.header('www-authenticate', 'Bearer');
  return reply
    .code(status)
    .type(OPENAI_ERROR_CONTENT_TYPE)
    .send(openAiError(code, param === undefined ? undefined : { param }));
}

// Fastify's own errors mapped by status to our fixed problems; nothing of their text leaves.
const BY_STATUS: Readonly<Record<number, ErrorCode>> = {
  400: ErrorCode.INVALID_INPUT,
  401: ErrorCode.UNAUTHENTICATED,
  403: ErrorCode.FORBIDDEN,
  404: ErrorCode.NOT_FOUND,
  405: ErrorCode.METHOD_NOT_ALLOWED,
  413: ErrorCode.BODY_TOO_LARGE,
  415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
  429: ErrorCode.ADMISSION_REFUSED,
  503: ErrorCode.UNAVAILABLE,
};

function isJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

/** `request` lines of requests answered 400 or more, per second and server, at most. */
const REFUSED_LINES_PER_SECOND = 100;

/** SQLite errors that mean "the store cannot be used now" (disk, locks, permissions), not a bug. */
const STORE_UNAVAILABLE = /^(?:SQLITE_(?:FULL|IOERR|CANTOPEN|READONLY|BUSY|LOCKED)(?:_|$)|SVC_STORE_GONE$)/;

/**
 * A request target in origin form: an absolute-form target (`http://host:port/v1/x?q`, which
 * RFC 9112 3.2.2 says a server must accept) loses its scheme and authority, so every match
 * on the path (routes, the 404/405 answer, the router's inference routes) sees `/v1/x?q`.
 */
export function originForm(url: string): string {
  if (url.startsWith('/')) return url;
  const m = /^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]*/.exec(url);
  if (!m) return url;
  const rest = url.slice(m[0].length);
  return rest.startsWith('/') ? rest : `/${rest}`;
}

/**
 * A Fastify instance with the project's error discipline: every error is a fixed
 * problem+json (never the URL, query values, credential or exception text), unknown routes
 * are 404 problems, route schemas never coerce, strip, default or re-serialize anything
 * (route-schemas.ts), and request logs carry method, route pattern, status and duration only
 * (no query strings, no headers).
 */
export function createHttpApp(opts: HttpAppOptions): FastifyInstance {
  const bodyLimit = opts.bodyLimit ?? 64 * 1024;
  const answer = errorAnswer(opts);
  const app = newFastify(opts, bodyLimit, answer);
  if (opts.tls && app.server instanceof TlsServer) {
    const unwatch = opts.tls.watch(app.server);
    app.addHook('onClose', async () => unwatch());
  }
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  for (const s of SHARED_SCHEMAS) app.addSchema(s);
  guardServer(app, opts);
  const routes = trackRouteMethods(app);
  app.setErrorHandler(errorHandler(answer));
  useStrictJson(app);
  refuseUnreadableRequests(app, bodyLimit, opts.openAiErrors);
  app.setNotFoundHandler((req, reply) => {
    const allowed = allowedMethods(routes, pathOf(req.url));
    if (allowed.length === 0) return answer(req, reply, opts.unknownRoute?.(pathOf(req.url)) ?? ErrorCode.NOT_FOUND);
    return answer(req, reply.header('allow', allowed.join(', ')), ErrorCode.METHOD_NOT_ALLOWED);
  });
  logRequestLines(app);
  // Before any route exists (the OpenAPI generator registers @fastify/swagger here).
  opts.beforeRoutes?.(app);
  return app;
}

/** Sends a coded error in the shape its path takes. */
type Answer = (req: { url: string }, reply: FastifyReply, code: ErrorCode, invalid?: InvalidParam) => FastifyReply;

/** The error's shape by the path asked for: an OpenAI error object on the data plane, else a problem. */
function errorAnswer(opts: HttpAppOptions): Answer {
  return (req, reply, code, invalid) => {
    if (opts.openAiErrors?.(pathOf(req.url))) return sendOpenAiError(reply, code, invalid?.name);
    return sendProblem(reply, code, invalid ? [invalid] : undefined);
  };
}

/** The Fastify instance itself, with the options every server of ours shares. */
function newFastify(opts: HttpAppOptions, bodyLimit: number, answer: Answer): FastifyInstance {
  // A missing Host is refused by the hook below with the fixed problem, not by node's bare 400.
  const server = {
    requireHostHeader: false,
    ...(opts.connectionsCheckIntervalMs !== undefined
      ? { connectionsCheckingInterval: opts.connectionsCheckIntervalMs }
      : {}),
  };
  // node:https takes node:http's server options beside the certificate and key.
  const listener = opts.tls ? { https: { ...server, ...opts.tls.options } } : { http: server };
  return Fastify({
    loggerInstance: opts.logger as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit,
    return503OnClosing: true,
    // Fastify's default is no limit at all: an authenticated client could hold a request open
    // forever by never finishing its body.
    requestTimeout: opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    // A path parameter may be as long as the ids it carries: a legacy request id is up to 128
    // characters, each up to 3 when percent-encoded (Fastify's default stops at 100).
    routerOptions: { maxParamLength: 384 },
    rewriteUrl: (req) => originForm(req.url ?? '/'),
    ...listener,
    ...(opts.serverFactory ? { serverFactory: opts.serverFactory } : {}),
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: false } },
    // A URL Fastify cannot route (bad percent-encoding, an over-long path parameter): the
    // owner's answer naming the parameter, or the fixed problem; never Fastify's text with
    // the URL in it.
    frameworkErrors: (err, req, reply) => {
      const own = opts.unroutable?.(pathOf(req.url));
      if (own) return void answer(req, reply, own.code, own.invalid);
      const sc = (err as Error & { statusCode?: unknown }).statusCode;
      void answer(req, reply, (typeof sc === 'number' ? BY_STATUS[sc] : undefined) ?? ErrorCode.INVALID_INPUT);
    },
    clientErrorHandler: clientErrorAnswer(opts),
  });
}

/** node:http settings and the requests it answers on its own, outside any route. */
function guardServer(app: FastifyInstance, opts: HttpAppOptions): void {
  // Node times a request's body only while its headers timeout is no longer than the
  // request timeout (60 s each by default).
  if (!opts.serverFactory)
    app.server.headersTimeout = Math.min(
      app.server.headersTimeout,
      opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    );
  // Every header is seen (node drops those past its 2,000th name or value without a word,
  // which hid a second Authorization, Content-Type or Host after 1,000 others from the
  // repeated-header check): the 16 KiB header bound limits how many a request can carry.
  app.server.maxHeadersCount = 0;
  // Requests node:http answers on its own, outside any route: an `Expect` other than
  // 100-continue (node's bare 417) and CONNECT (node closes without a word). Both get the
  // fixed 400, as every request the server cannot take does, in the shape their path takes.
  app.server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    res.shouldKeepAlive = false;
    if (opts.answerExpectation?.(req, res)) return;
    const openAi = opts.openAiErrors?.(pathOf(originForm(req.url ?? '/'))) === true;
    const body = openAi ? EXPECTATION_ERROR : CLIENT_ERROR;
    res
      .writeHead(400, {
        'content-type': openAi ? OPENAI_ERROR_CONTENT_TYPE : PROBLEM_CONTENT_TYPE,
        'content-length': Buffer.byteLength(body),
        connection: 'close',
      })
      .end(body);
  });
  app.server.on('connect', (req: IncomingMessage, socket: Socket) => {
    socket.on('error', () => undefined);
    socket.end(
      opts.openAiErrors?.(pathOf(originForm(req.url ?? '/'))) ? OPENAI_CLIENT_ERROR_RESPONSE : CLIENT_ERROR_RESPONSE,
    );
  });
}

type RouteMethod = { readonly match: RegExp; readonly method: string };

/** Which methods each route pattern has (filled as routes are added): a known path asked with another method is a 405. */
function trackRouteMethods(app: FastifyInstance): readonly RouteMethod[] {
  const routes: RouteMethod[] = [];
  app.addHook('onRoute', (r) => {
    const methods = Array.isArray(r.method) ? r.method : [r.method];
    const match = patternRegExp(r.url ?? r.path);
    for (const method of methods) routes.push({ match, method: String(method).toUpperCase() });
  });
  return routes;
}

/** Every error as its fixed answer; an unexpected one is logged (as data) and answered 500, or 503 for a store that cannot be used now. */
function errorHandler(answer: Answer) {
  return (err: Error, req: FastifyRequest, reply: FastifyReply): FastifyReply => {
    // The failing argument by its fixed name and reason (CONTRACT.md `invalid_params`).
    if (err instanceof InvalidArgumentError)
      return answer(req, reply, err.code, { name: err.argument, reason: err.reason });
    if (err instanceof SvcError) return answer(req, reply, err.code);
    const sc = (err as Error & { statusCode?: unknown }).statusCode;
    const status = typeof sc === 'number' ? sc : 500;
    const code = BY_STATUS[status];
    if (code) return answer(req, reply, code);
    const errCode = (err as { code?: unknown }).code;
    req.log.error({ err }, 'request failed');
    // A store that cannot be read or written now (disk full, state directory gone): the node
    // cannot serve this request at the moment, which is 503, not a fault in the request.
    if (typeof errCode === 'string' && STORE_UNAVAILABLE.test(errCode))
      return answer(req, reply, ErrorCode.UNAVAILABLE);
    return answer(req, reply, ErrorCode.INTERNAL);
  };
}

/** JSON bodies only, parsed strictly (no member twice, integers written plainly). */
function useStrictJson(app: FastifyInstance): void {
  // JSON only: a text/plain body is a 415, not a string handed to the route.
  app.removeContentTypeParser('text/plain');
  // Fastify's own JSON parser (it refuses __proto__ and constructor poisoning), plus one rule:
  // a member named twice in an object is refused (CONTRACT.md: a repeated filter is rejected,
  // not guessed; JSON.parse would keep the last one silently).
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    // No route takes it (404, or 405 for a known path): that answer, not a verdict on a body
    // nobody will read.
    if (req.is404) {
      done(null, undefined);
      return;
    }
    parseJson(req, body as string, (err: Error | null, value?: unknown) => {
      // Valid JSON refused for `__proto__` or `constructor.prototype` is not a syntax error:
      // the fixed invalid-input problem (a JSON-RPC route says "Parse error" only for non-JSON).
      if (err) done(isJson(body as string) ? new InvalidInputError() : err, undefined);
      else if (hasDuplicateKey(body as string, value)) done(new InvalidInputError(), undefined);
      // Integers are written as plain integers (`1e2` and `100.0` are refused as the HTTP
      // query and the CLI refuse them): such numbers reach the routes as a marker string.
      else done(null, withPlainIntegers(body as string, value));
    });
  });
}

/** Requests refused before any route's own checks, and bodies nobody will read settled without reading them. */
function refuseUnreadableRequests(
  app: FastifyInstance,
  bodyLimit: number,
  openAiErrors: HttpAppOptions['openAiErrors'],
): void {
  // Before any route's own checks: a repeated credential or body type is refused, not guessed.
  // A body on a GET is refused too: filters sent there would be ignored, and the unfiltered
  // answer mistaken for a filtered one.
  app.addHook('onRequest', (req, _reply, done) => {
    if (repeatsSingleHeader(req.raw.rawHeaders) || lacksHost(req.raw) || badFraming(req.raw))
      // On the data plane, the framing error the inference routes answer for the same faults.
      done(openAiErrors?.(pathOf(req.url)) ? new SvcError(ErrorCode.INVALID_FRAMING) : new InvalidInputError());
    else done(bodyOnRead(req.raw) && !req.is404 ? new InvalidInputError() : undefined);
  });
  // A body sent where no route takes it (an unknown path, or a method the path does not
  // serve) is not parsed: the answer is the 404 or 405, whatever its size or type (a 413 or
  // 415 would speak of a body no route would read). It is settled as any unread body is
  // (settleUnreadBody), and the body headers are dropped so that Fastify hands the request
  // straight to the not-found handler.
  app.addHook('preParsing', (req, reply, payload, done) => {
    if (req.is404) {
      settleUnreadBody(req.raw, reply, bodyLimit);
      const h = req.raw.headers;
      delete h['content-length'];
      delete h['transfer-encoding'];
      delete h['content-type'];
    }
    done(null, payload);
  });
  // Any other answer that goes out before its request's body was read (a refusal in
  // onRequest: a missing Host, a repeated header, a body on a read) settles it the same way.
  app.addHook('onSend', (req, reply, payload, done) => {
    settleUnreadBody(req.raw, reply, bodyLimit);
    done(null, payload);
  });
}

/** One `request` line per answered request (method, route pattern, status, ms), refused ones rate-bound. */
function logRequestLines(app: FastifyInstance): void {
  // A storm of refused requests (no credential needed to cause one) must not add a log write
  // to each: at most 100 such lines a second, the rest counted.
  const refusedLines = new LineBudget(REFUSED_LINES_PER_SECOND, (skipped) =>
    app.log.info({ skipped }, 'request lines of refused requests left out (rate bound)'),
  );
  app.addHook('onResponse', (req, reply, done) => {
    noteEarlyAnswer(req.raw);
    const route = req.routeOptions.url ?? 'unmatched';
    const line = { method: req.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 };
    // A metrics scrape that worked is routine (a dashboard scrapes every few seconds): debug.
    if (route === '/metrics' && reply.statusCode < 400) req.log.debug(line, 'request');
    else if (reply.statusCode < 400 || refusedLines.take(Date.now())) req.log.info(line, 'request');
    done();
  });
}

/**
 * A request answered before anything read its body: a declared body within `limit` is read
 * and dropped, so the connection carries the next request; a larger one, or a chunked one
 * (its size unknown), is not read at all, and the connection closes after the answer. So no
 * request that no route reads can make a server take in more than `limit` bytes of it.
 */
function settleUnreadBody(raw: IncomingMessage, reply: FastifyReply, limit: number): void {
  // Read already, or being read (a route's parser, which answers its own failures).
  if (raw.complete || raw.readableFlowing !== null) return;
  const te = raw.headers['transfer-encoding'];
  const cl = raw.headers['content-length'];
  if (te === undefined && (cl === undefined || cl === '0')) return;
  const len = Number(cl);
  if (te === undefined && Number.isSafeInteger(len) && len <= limit) raw.resume();
  else reply.header('connection', 'close');
}

/** The path of a request target (no query). */
function pathOf(url: string): string {
  const q = url.indexOf('?');
  return q < 0 ? url : url.slice(0, q);
}

/** A GET or HEAD that carries a body (a nonzero length, or any transfer coding). */
function bodyOnRead(req: IncomingMessage): boolean {
  if (req.method !== 'GET' && req.method !== 'HEAD') return false;
  const len = req.headers['content-length'];
  return req.headers['transfer-encoding'] !== undefined || (len !== undefined && len !== '0');
}

/**
 * A body framed in a way the server will not guess at: a transfer coding other than plain
 * `chunked` (`gzip, chunked` would be read as if it were not compressed; RFC 9112 6.1 says
 * an unknown coding is not understood), or any `Transfer-Encoding` on an HTTP/1.0 request
 * (which RFC 9112 6.1 says must be treated as faulty framing).
 */
export function badFraming(req: IncomingMessage): boolean {
  const te = req.headers['transfer-encoding'];
  if (te === undefined) return false;
  return te.trim().toLowerCase() !== 'chunked' || (req.httpVersionMajor === 1 && req.httpVersionMinor === 0);
}

/** An HTTP/1.1 request without a Host header (RFC 9112 3.2: answered with 400); HTTP/1.0 may omit it. */
export function lacksHost(req: IncomingMessage): boolean {
  return req.headers.host === undefined && !(req.httpVersionMajor === 1 && req.httpVersionMinor === 0);
}

/** A route pattern (`/v1/requests/:id`, `/static/*`) as a whole-path matcher. */
function patternRegExp(pattern: string): RegExp {
  const body = pattern
    .split('/')
    .map((seg) => (seg === '*' ? '.*' : seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('/');
  return new RegExp(`^${body}$`);
}

/** Methods some route serves at this path (HEAD comes with GET in Fastify). */
export function allowedMethods(routes: readonly RouteMethod[], path: string): string[] {
  const out = new Set<string>();
  for (const r of routes) if (r.match.test(path)) out.add(r.method);
  return [...out].sort();
}

const CLIENT_ERROR = JSON.stringify(problemFor(ErrorCode.INVALID_INPUT));
const CLIENT_ERROR_RESPONSE = rawAnswer(PROBLEM_CONTENT_TYPE, CLIENT_ERROR);
const EXPECTATION_ERROR = JSON.stringify(openAiError(ErrorCode.INVALID_EXPECTATION));
const FRAMING_ERROR_RESPONSE = rawAnswer(
  OPENAI_ERROR_CONTENT_TYPE,
  JSON.stringify(openAiError(ErrorCode.INVALID_FRAMING)),
);
const INCOMPLETE_BODY_RESPONSE = rawAnswer(
  OPENAI_ERROR_CONTENT_TYPE,
  JSON.stringify(openAiError(ErrorCode.INCOMPLETE_BODY)),
);
const OPENAI_CLIENT_ERROR_RESPONSE = rawAnswer(
  OPENAI_ERROR_CONTENT_TYPE,
  JSON.stringify(openAiError(ErrorCode.INVALID_INPUT)),
);
const HEADERS_ERROR_RESPONSE = rawAnswer(
  OPENAI_ERROR_CONTENT_TYPE,
  JSON.stringify(openAiError(ErrorCode.INVALID_HEADERS)),
);

/** llhttp's codes for a body whose length or coding cannot be read (framing), not a header fault. */
const FRAMING_FAULTS = new Set([
  'HPE_INVALID_TRANSFER_ENCODING',
  'HPE_UNEXPECTED_CONTENT_LENGTH',
  'HPE_INVALID_CONTENT_LENGTH',
  'HPE_INVALID_CHUNK_SIZE',
]);

/**
 * The path of the request a fault with no request object yet belongs to (its headers could
 * not be read): from the request line that node's `rawPacket` (the bytes it was parsing)
 * begins with, when it does; else undefined. Only the shape of the answer depends on it.
 */
function faultPath(err: { rawPacket?: unknown }): string | undefined {
  const raw = err.rawPacket;
  if (!Buffer.isBuffer(raw)) return undefined;
  // Request lines longer than the header bound never fit: the start of the bytes is enough.
  const m = /^[^\s]{1,32} (\S{1,16384}) HTTP\/1\.[01]\r?\n/.exec(raw.subarray(0, 16_500).toString('latin1'));
  return m ? pathOf(originForm(m[1]!)) : undefined;
}

/** The answer to a connection fault on a data-plane path, by what went wrong. */
function openAiFaultAnswer(err: { code?: string }, headersRead: boolean): string {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return INCOMPLETE_BODY_RESPONSE;
  return headersRead || FRAMING_FAULTS.has(err.code ?? '') ? FRAMING_ERROR_RESPONSE : HEADERS_ERROR_RESPONSE;
}

/** A whole 400 answer written straight on a socket, the connection closing after it. */
function rawAnswer(contentType: string, body: string): string {
  return `HTTP/1.1 400 Bad Request\r\ncontent-type: ${contentType}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/**
 * Connections whose request was answered before its body had arrived (a refusal that did not
 * wait for the upload). If that body then stalls until the request timeout, the connection
 * is closed without a second, unasked-for answer.
 */
const answeredEarly = new WeakSet<Socket>();

/** Notes that `req` was answered before its body arrived whole (see answeredEarly). */
export function noteEarlyAnswer(req: IncomingMessage): void {
  const socket = req.socket;
  if (req.complete || !socket || answeredEarly.has(socket)) return;
  answeredEarly.add(socket);
  // The rest of the body arrived after all: the connection may carry a next request, whose
  // own faults get their answer again.
  req.once('end', () => answeredEarly.delete(socket));
}

/** Longest a connection answered by `answerFault` stays open for its answer to go out. */
const FAULT_LINGER_MS = 2_000;

/** Connections answered by `answerFault`: later faults on them (more unreadable bytes) wait for that answer's close. */
const faultAnswered = new WeakSet<Socket>();

/**
 * A request node:http could not parse (a malformed request line or header, a control
 * character in a header value, headers too large, headers never finished, a malformed
 * chunked body) or that did not arrive whole in time: the fixed 400 problem (or the owner's
 * own answer, `answerFault`), then the connection closes. Nothing of the request is echoed
 * or logged.
 */
function clientErrorAnswer(
  opts: HttpAppOptions,
): (err: Error & { code?: string; rawPacket?: unknown }, socket: Socket) => void {
  return (err, socket) => {
    if (err.code === 'ECONNRESET' || socket.destroyed || faultAnswered.has(socket)) return;
    if (answeredEarly.has(socket)) {
      socket.destroy();
      return;
    }
    // Only while nothing of an answer has gone out on this connection: a request whose body
    // turned out malformed (a bad chunk size) has no answer yet and gets this one. Once a
    // response has begun, a 400 would be read as part of it; then the connection just closes.
    const current = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
    if (socket.writable && !current?.headersSent) {
      if (current && opts.answerFault?.(current, err)) {
        // Answered: closed once that answer is written (it says `Connection: close`), at the
        // latest after FAULT_LINGER_MS. Left to its request: closed after that request's answer.
        if (current.headersSent) {
          faultAnswered.add(socket);
          const t = setTimeout(() => socket.destroy(), FAULT_LINGER_MS);
          t.unref();
          socket.once('close', () => clearTimeout(t));
        }
        return;
      }
      // Its shape is that of the path whose answer the connection owes (or, when its headers
      // could not be read, of the path its request line names).
      const path = current?.req ? pathOf(originForm(current.req.url ?? '/')) : faultPath(err);
      const openAi = path !== undefined && opts.openAiErrors?.(path) === true;
      socket.end(openAi ? openAiFaultAnswer(err, current?.req !== undefined) : CLIENT_ERROR_RESPONSE);
    }
    socket.destroy();
  };
}

/** Starts listening and writes the contract's one `listening` line with the URL. */
export async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port });
  const addr = app.server.address();
  const actualPort = typeof addr === 'object' && addr ? addr.port : port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  const url = `${app.server instanceof TlsServer ? 'https' : 'http'}://${urlHost}:${actualPort}`;
  app.log.info({ url }, 'listening');
  return url;
}

/** True for the names and literals that only this machine can reach (an IPv4-mapped 127.x included). */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost' || host === '::1' || host === '[::1]') return true;
  const v4 = host.startsWith('::ffff:') ? host.slice(7) : host;
  return isIPv4(v4) && v4.startsWith('127.');
}

/**
 * Host header values that name this server when it listens on loopback (for the MCP
 * rebinding guard), or undefined when it listens elsewhere (`0.0.0.0`, a host address): the
 * operator exposed it on purpose, it may be reached by any name or through a port mapping,
 * and every request needs a credential, which a rebinding page does not have. (The dashboard
 * guards Host on loopback only, too.)
 */
export function loopbackHosts(app: FastifyInstance): string[] | undefined {
  const addr = app.server.address();
  if (!addr || typeof addr !== 'object') return [];
  const a = addr.address;
  if (!isLoopbackHost(a)) return undefined;
  const p = addr.port;
  const hosts = [`127.0.0.1:${p}`, `localhost:${p}`, `[::1]:${p}`];
  // Another loopback address it listens on (127.0.0.2) names it too.
  if (a !== '127.0.0.1' && a !== '::1') hosts.push(addr.family === 'IPv6' ? `[${a}]:${p}` : `${a}:${p}`);
  return hosts;
}
