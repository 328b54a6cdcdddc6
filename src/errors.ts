/**
 * Coded errors. Each carries a fixed title, its HTTP status and its CLI exit code; the
 * Fastify error handler and the CLI map them, so no route or command invents error text.
 * Messages never contain operands, URLs, credentials or upstream text.
 */
export const ErrorCode = {
  INVALID_INPUT: 'SVC_ERR_INVALID_INPUT',
  INVALID_JSON: 'SVC_ERR_INVALID_JSON',
  INVALID_ENCODING: 'SVC_ERR_INVALID_ENCODING',
  INVALID_FRAMING: 'SVC_ERR_INVALID_FRAMING',
  INVALID_HEADERS: 'SVC_ERR_INVALID_HEADERS',
  INVALID_EXPECTATION: 'SVC_ERR_INVALID_EXPECTATION',
  INCOMPLETE_BODY: 'SVC_ERR_INCOMPLETE_BODY',
  INVALID_MODEL: 'SVC_ERR_INVALID_MODEL',
  INVALID_OUTPUT_LIMIT: 'SVC_ERR_INVALID_OUTPUT_LIMIT',
  UNAUTHENTICATED: 'SVC_ERR_UNAUTHENTICATED',
  FORBIDDEN: 'SVC_ERR_FORBIDDEN',
  ORIGIN_REFUSED: 'SVC_ERR_ORIGIN_REFUSED',
  NOT_FOUND: 'SVC_ERR_NOT_FOUND',
  ROUTE_NOT_FOUND: 'SVC_ERR_ROUTE_NOT_FOUND',
  MODEL_NOT_FOUND: 'SVC_ERR_MODEL_NOT_FOUND',
  RESPONSE_NOT_FOUND: 'SVC_ERR_RESPONSE_NOT_FOUND',
  RESPONSE_ROUTE_NOT_SERVED: 'SVC_ERR_RESPONSE_ROUTE_NOT_SERVED',
  RESPONSE_QUERY_REFUSED: 'SVC_ERR_RESPONSE_QUERY_REFUSED',
  MODEL_QUERY_REFUSED: 'SVC_ERR_MODEL_QUERY_REFUSED',
  METHOD_NOT_ALLOWED: 'SVC_ERR_METHOD_NOT_ALLOWED',
  BODY_TOO_LARGE: 'SVC_ERR_BODY_TOO_LARGE',
  UNSUPPORTED_MEDIA_TYPE: 'SVC_ERR_UNSUPPORTED_MEDIA_TYPE',
  ADMISSION_REFUSED: 'SVC_ERR_ADMISSION_REFUSED',
  UPSTREAM_RATE_LIMITED: 'SVC_ERR_UPSTREAM_RATE_LIMITED',
  CONTEXT_LENGTH: 'SVC_ERR_CONTEXT_LENGTH',
  UPSTREAM_REJECTED: 'SVC_ERR_UPSTREAM_REJECTED',
  UNAVAILABLE: 'SVC_ERR_UNAVAILABLE',
  UPSTREAM_FAILED: 'SVC_ERR_UPSTREAM_FAILED',
  UPSTREAM_TIMEOUT: 'SVC_ERR_UPSTREAM_TIMEOUT',
  INTERNAL: 'SVC_ERR_INTERNAL',
  CONFIG: 'SVC_ERR_CONFIG',
  BUS_CLOSED: 'SVC_ERR_BUS_CLOSED',
  BUS_TIMEOUT: 'SVC_ERR_BUS_TIMEOUT',
  BUS_NO_RESPONDERS: 'SVC_ERR_BUS_NO_RESPONDERS',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

interface ErrorSpec {
  readonly status: number;
  /** The problem type's last segment (`urn:svc-serving:problem:<slug>`). */
  readonly slug: string;
  readonly title: string;
  readonly exitCode: number;
  /** The stable snake_case code: problem `code`, OpenAI error `code` (CONTRACT.md, HTTP). */
  readonly code: string;
  /** The fixed sentence a data-plane error and an MCP tool error carry: what is wrong, and where. */
  readonly message: string;
  /** The request parameter the error is about, or null (a fixed name, never the caller's). */
  readonly param: string | null;
}

const spec = (
  status: number,
  slug: string,
  title: string,
  exitCode: number,
  code: string,
  message: string,
  param: string | null = null,
): ErrorSpec => ({ status, slug, title, exitCode, code, message, param });

/**
 * The one registry: code -> HTTP status, problem type slug, fixed title, CLI exit code, stable
 * code, fixed message and parameter. Every error shape (problem+json, OpenAI error object,
 * MCP tool error) is made from it, so no route invents error text.
 */
export const ERRORS: Readonly<Record<ErrorCode, ErrorSpec>> = {
  SVC_ERR_INVALID_INPUT: spec(400, 'invalid-input', 'Invalid input', 2, 'invalid_input', 'The request is not valid'),
  SVC_ERR_INVALID_JSON: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_json',
    'The request body must be one JSON object, with no member named twice and no __proto__ or constructor.prototype member',
  ),
  SVC_ERR_INVALID_ENCODING: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_encoding',
    'The request body is not valid UTF-8',
  ),
  SVC_ERR_INVALID_FRAMING: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_framing',
    'The request framing is refused: a header that may appear once is repeated, Host is missing, Transfer-Encoding is not plain chunked, or the chunked body is malformed',
  ),
  SVC_ERR_INVALID_HEADERS: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_headers',
    'The request head could not be read: an unknown method, a malformed header line, a control character in a header value, or headers over 16 KiB in all',
  ),
  SVC_ERR_INVALID_EXPECTATION: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_expectation',
    'The Expect header is refused: only 100-continue is accepted',
  ),
  SVC_ERR_INCOMPLETE_BODY: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'incomplete_body',
    'The request body did not arrive whole within the time this server allows for it',
  ),
  SVC_ERR_INVALID_MODEL: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_model',
    'The model parameter is required and must be a non-empty string',
    'model',
  ),
  SVC_ERR_INVALID_OUTPUT_LIMIT: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'invalid_output_limit',
    'The output limit (max_tokens, max_completion_tokens) must be a non-negative integer',
    'max_tokens',
  ),
  SVC_ERR_UNAUTHENTICATED: spec(
    401,
    'unauthenticated',
    'Missing or unknown credential',
    4,
    'unauthenticated',
    'The Authorization header must carry a known bearer credential',
  ),
  SVC_ERR_FORBIDDEN: spec(
    403,
    'forbidden',
    'Credential lacks the required grant',
    4,
    'forbidden',
    'The credential does not carry the grant this route needs',
  ),
  SVC_ERR_ORIGIN_REFUSED: spec(
    403,
    'forbidden',
    'Host or Origin not allowed',
    4,
    'origin_refused',
    'The Host or Origin header does not name this server',
  ),
  SVC_ERR_NOT_FOUND: spec(404, 'not-found', 'Not found', 4, 'not_found', 'The requested resource does not exist'),
  SVC_ERR_ROUTE_NOT_FOUND: spec(
    404,
    'not-found',
    'Not found',
    4,
    'route_not_found',
    "This router serves no such route: its OpenAI-compatible routes are under /v1 (an SDK's base URL ends in /v1): chat/completions, completions, responses, embeddings, rerank, audio/transcriptions and models",
  ),
  SVC_ERR_MODEL_NOT_FOUND: spec(
    404,
    'not-found',
    'Not found',
    4,
    'model_not_found',
    'The model parameter names no model served by this router',
    'model',
  ),
  SVC_ERR_RESPONSE_NOT_FOUND: spec(
    404,
    'not-found',
    'Not found',
    4,
    'response_not_found',
    'The response_id names no response this router relayed, or one it no longer remembers or can reach',
    'response_id',
  ),
  SVC_ERR_RESPONSE_ROUTE_NOT_SERVED: spec(
    404,
    'not-found',
    'Not found',
    4,
    'not_served',
    'The engines behind this router serve no such Responses API route: a response can be retrieved and cancelled, not deleted, and its input items are not listed',
  ),
  SVC_ERR_RESPONSE_QUERY_REFUSED: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'unsupported_parameter',
    'Retrieving or cancelling a response through the router takes no query parameters: stream, starting_after and include are not relayed',
  ),
  SVC_ERR_MODEL_QUERY_REFUSED: spec(
    400,
    'invalid-input',
    'Invalid input',
    2,
    'unsupported_parameter',
    'Listing or retrieving models takes no query parameters',
  ),
  SVC_ERR_METHOD_NOT_ALLOWED: spec(
    405,
    'method-not-allowed',
    'Method not allowed',
    4,
    'method_not_allowed',
    'This method is not allowed on this path; the Allow header lists the ones that are',
  ),
  SVC_ERR_BODY_TOO_LARGE: spec(
    413,
    'body-too-large',
    'Request body too large',
    4,
    'body_too_large',
    'The request body is larger than this server accepts',
  ),
  SVC_ERR_UNSUPPORTED_MEDIA_TYPE: spec(
    415,
    'unsupported-media-type',
    'Unsupported media type',
    4,
    'unsupported_media_type',
    'The Content-Type header must be application/json (multipart/form-data for audio transcriptions)',
  ),
  SVC_ERR_ADMISSION_REFUSED: spec(
    429,
    'admission-refused',
    'Admission refused',
    4,
    'rate_limited',
    "The model's admission queue is full or its wait timed out; retry later",
  ),
  SVC_ERR_UPSTREAM_RATE_LIMITED: spec(
    429,
    'admission-refused',
    'Admission refused',
    4,
    'rate_limited',
    "The model's engine is rate limiting requests; retry later",
  ),
  SVC_ERR_CONTEXT_LENGTH: spec(
    400,
    'context-length-exceeded',
    "Request exceeds the model's context length",
    4,
    'context_length_exceeded',
    "Request exceeds the model's context length: shorten the messages or lower the output limit",
    'messages',
  ),
  SVC_ERR_UPSTREAM_REJECTED: spec(
    400,
    'upstream-rejected',
    "The model's engine refused the request",
    4,
    'upstream_rejected',
    "The model's engine refused the request as invalid",
  ),
  SVC_ERR_UNAVAILABLE: spec(
    503,
    'unavailable',
    'Service unavailable',
    4,
    'unavailable',
    'The service cannot take this request now; retry later',
  ),
  SVC_ERR_UPSTREAM_FAILED: spec(
    502,
    'upstream-failed',
    'Upstream failed',
    4,
    'upstream_failed',
    "The model's engine failed or could not be reached",
  ),
  SVC_ERR_UPSTREAM_TIMEOUT: spec(
    504,
    'upstream-timeout',
    'Upstream timed out',
    4,
    'upstream_timeout',
    "The model's engine did not answer in time",
  ),
  SVC_ERR_INTERNAL: spec(500, 'internal', 'Internal error', 1, 'internal_error', 'An internal error occurred'),
  SVC_ERR_CONFIG: spec(
    500,
    'config',
    'Invalid configuration',
    2,
    'invalid_configuration',
    'The configuration is invalid',
  ),
  SVC_ERR_BUS_CLOSED: spec(503, 'unavailable', 'Bus closed', 4, 'unavailable', 'The message bus is closed'),
  SVC_ERR_BUS_TIMEOUT: spec(
    504,
    'upstream-timeout',
    'Bus request timed out',
    4,
    'upstream_timeout',
    'The request over the message bus timed out',
  ),
  SVC_ERR_BUS_NO_RESPONDERS: spec(
    503,
    'unavailable',
    'No responders',
    4,
    'unavailable',
    'Nothing on the message bus answers this request',
  ),
};

/** The OpenAI error `type` of an HTTP status (CONTRACT.md, HTTP). */
export function openAiType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/** The content type of an OpenAI error object. */
export const OPENAI_ERROR_CONTENT_TYPE = 'application/json';

/** An OpenAI error object (data plane); `over` replaces the parameter or, for a relayed engine refusal only, the message. */
export interface OpenAiError {
  error: { message: string; type: string; param: string | null; code: string };
}

/**
 * The OpenAI error object of a coded error: the registry's fixed message and parameter, or
 * `over.param` (a fixed name of ours); `over.message` only for UPSTREAM_REJECTED (the engine's
 * own text, cleaned by engineMessage) and `over.status` for its relayed status.
 */
export function openAiError(
  code: ErrorCode,
  over?: { readonly param?: string | null; readonly message?: string; readonly status?: number },
): OpenAiError {
  const s = ERRORS[code];
  return {
    error: {
      message: over?.message ?? s.message,
      type: openAiType(over?.status ?? s.status),
      param: over?.param !== undefined ? over.param : s.param,
      code: s.code,
    },
  };
}

/** Longest engine message relayed to the caller (characters). */
export const ENGINE_MESSAGE_MAX = 1024;

/**
 * The engine's own error text from its JSON error body (`error.message`, `message` or
 * `detail`), control characters removed and cut to ENGINE_MESSAGE_MAX; undefined when it has
 * none. The text goes to the caller only: never logged, stored or recorded.
 */
export function engineMessage(body: Buffer): string | undefined {
  let v: unknown;
  try {
    v = JSON.parse(body.toString('utf8'));
  } catch {
    return undefined;
  }
  if (typeof v !== 'object' || v === null) return undefined;
  const o = v as Record<string, unknown>;
  const err = o['error'];
  const candidates = [
    typeof err === 'object' && err !== null ? (err as Record<string, unknown>)['message'] : undefined,
    typeof err === 'string' ? err : undefined,
    o['message'],
    o['detail'],
  ];
  for (const c of candidates) {
    if (typeof c !== 'string') continue;
    // C0, DEL and C1 controls, and the line and paragraph separators: nothing that moves a terminal.
    const clean = c.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, '').trim();
    if (clean.length === 0) continue;
    return Array.from(clean).slice(0, ENGINE_MESSAGE_MAX).join('');
  }
  return undefined;
}

export const PROBLEM_TYPE_PREFIX = 'urn:svc-serving:problem:';

/** Base of every coded error. `message` is the fixed title unless a safe detail is given. */
export class SvcError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown }) {
    super(message ?? ERRORS[code].title, options);
    this.code = code;
    this.name = new.target.name;
  }
  get status(): number {
    return ERRORS[this.code].status;
  }
  get exitCode(): number {
    return ERRORS[this.code].exitCode;
  }
}

/** Thrown when: a filter, body member or parameter is malformed, repeated, unknown or out of range. */
export class InvalidInputError extends SvcError {
  constructor(options?: { cause?: unknown }) {
    super(ErrorCode.INVALID_INPUT, undefined, options);
  }
}
/**
 * Thrown when: one named argument of a tool call is wrong. `name` and `reason` are fixed texts
 * of the tool's own (never a value the caller sent); the message is `name: reason`, and a
 * problem answer names them in `invalid_params` (CONTRACT.md).
 */
export class InvalidArgumentError extends SvcError {
  constructor(
    readonly argument: string,
    readonly reason: string,
  ) {
    super(ErrorCode.INVALID_INPUT, `${argument}: ${reason}`);
  }
}
export class UnauthenticatedError extends SvcError {
  constructor() {
    super(ErrorCode.UNAUTHENTICATED);
  }
}
export class ForbiddenError extends SvcError {
  constructor() {
    super(ErrorCode.FORBIDDEN);
  }
}
/** A Host or Origin header that does not name this server (DNS rebinding, cross-site pages). */
export class OriginRefusedError extends SvcError {
  constructor() {
    super(ErrorCode.ORIGIN_REFUSED);
  }
}
export class NotFoundError extends SvcError {
  constructor() {
    super(ErrorCode.NOT_FOUND);
  }
}
/** Thrown when: the node is not set up for a command (e.g. no `recipes_dir`) or cannot read its authority now. */
export class UnavailableError extends SvcError {
  constructor() {
    super(ErrorCode.UNAVAILABLE);
  }
}
/**
 * Thrown when: configuration is invalid; `message` names the key or client id, never a secret
 * value. `member`: the JSON pointer of the member at fault when a rule across members knows it
 * (`/models/2/alias`), for `config check` to place it.
 */
export class ConfigError extends SvcError {
  readonly member: string | undefined;
  constructor(detail: string, options?: { cause?: unknown; member?: string }) {
    super(ErrorCode.CONFIG, detail, options);
    this.member = options?.member;
  }
}
export class BusClosedError extends SvcError {
  constructor() {
    super(ErrorCode.BUS_CLOSED);
  }
}
export class BusTimeoutError extends SvcError {
  constructor(options?: { cause?: unknown }) {
    super(ErrorCode.BUS_TIMEOUT, undefined, options);
  }
}
export class BusNoRespondersError extends SvcError {
  constructor(options?: { cause?: unknown }) {
    super(ErrorCode.BUS_NO_RESPONDERS, undefined, options);
  }
}

/** The one content type of every problem answer, from Fastify routes and the raw relay alike. */
export const PROBLEM_CONTENT_TYPE = 'application/problem+json; charset=utf-8';

/** One failing input of a problem's `invalid_params`: a fixed member or filter name and a fixed phrase. */
export interface InvalidParam {
  readonly name: string;
  readonly reason: string;
}

/** The RFC 9457 body for a coded error: fixed `type`, `title`, `status` and `code`, and the failing inputs when known. */
export function problemFor(
  code: ErrorCode,
  invalidParams?: readonly InvalidParam[],
): { type: string; title: string; status: number; code: string; invalid_params?: InvalidParam[] } {
  const spec = ERRORS[code];
  const p = { type: PROBLEM_TYPE_PREFIX + spec.slug, title: spec.title, status: spec.status, code: spec.code };
  return invalidParams && invalidParams.length > 0
    ? { ...p, invalid_params: invalidParams.map((i) => ({ name: i.name, reason: i.reason })) }
    : p;
}

/**
 * The problem for a thrown coded error: an InvalidArgumentError's member and reason in
 * `invalid_params` (CONTRACT.md), as the HTTP error handler answers them; for answers sent
 * without Fastify (the router's lookups over NATS).
 */
export function problemOf(err: SvcError): ReturnType<typeof problemFor> {
  return problemFor(
    err.code,
    err instanceof InvalidArgumentError ? [{ name: err.argument, reason: err.reason }] : undefined,
  );
}

/** System error codes that say a configured path itself is wrong (a configuration error, exit 2), not the disk or the machine. */
const PATH_ERROR_CODES: ReadonlySet<string> = new Set([
  'EACCES',
  'EPERM',
  'ENOENT',
  'ENOTDIR',
  'EISDIR',
  'EROFS',
  'ELOOP',
  'ENAMETOOLONG',
  'EEXIST',
  'ENOTREG',
]);

/**
 * The error for a file a configured path names that cannot be written: ConfigError with
 * `configMessage` when the path is at fault, else (a full disk, an I/O error) a start-up
 * failure that names the code (exit 1).
 */
export function pathFailure(err: unknown, configMessage: string): SvcError {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && !PATH_ERROR_CODES.has(code))
    return new SvcError(ErrorCode.UNAVAILABLE, `${configMessage.replace(/^[a-z]+ configuration: /, '')} now (${code})`);
  return new ConfigError(configMessage);
}

// Uncoded errors: each is thrown and caught inside one module (or the CLI) and never answered
// as a problem. They live here so every error class of the project is in one file, with its
// `name` and message unchanged; the module that throws it re-exports it.

/** Thrown when: a job store's file was removed or replaced while open; writes are refused until a restart. */
export class StoreGoneError extends Error {
  override readonly name = 'StoreGoneError';
  readonly code = 'SVC_STORE_GONE';
}

/** Thrown when: the directory itself cannot be listed (the authority is unreadable). */
export class ConfigDirUnreadableError extends Error {
  constructor(options?: { cause?: unknown }) {
    super('configuration directory is not readable', options);
    this.name = 'ConfigDirUnreadableError';
  }
}

/** How the container runtime failed to answer (RuntimeUnreachableError). */
export type RuntimeFailure = 'connect' | 'timeout' | 'status' | 'malformed';

/**
 * Thrown when: the container runtime cannot be asked (socket missing, connection refused),
 * does not answer in time, answers with an unexpected status, or answers with something that
 * is not the Engine API's JSON. Its message is fixed; the cause is kept for debugging only
 * and never printed.
 */
export class RuntimeUnreachableError extends Error {
  constructor(
    readonly failure: RuntimeFailure,
    options?: { cause?: unknown },
  ) {
    super('container runtime is not reachable or answered malformed data', options);
    this.name = 'RuntimeUnreachableError';
  }
}

/** A decision log write that failed after `lines` whole lines of it reached the file. */
export class WriteFailed extends Error {
  override name = 'WriteFailed';
  constructor(
    override readonly cause: unknown,
    readonly lines: number,
  ) {
    super('decision log write failed');
  }
}

/** Thrown when: a request body to the router is over its limit. */
export class BodyTooLarge extends Error {
  override name = 'BodyTooLarge';
}
/** Thrown when: the client left before its request body arrived whole. */
export class BodyAborted extends Error {
  override name = 'BodyAborted';
}
/** Thrown when: a request body would exceed the router's budget for bodies being uploaded. */
export class UploadsFull extends Error {
  override name = 'UploadsFull';
}

/** A whole upstream body longer than its limit: the upstream request was aborted. */
export class UpstreamBodyTooLarge extends Error {
  override name = 'UpstreamBodyTooLarge';
}

/** The upstream exchange was ended by the router (the client left, the deadline passed, a stop). */
export class UpstreamCancelled extends Error {
  override name = 'UpstreamCancelled';
}

/** Why admission refused a request. */
export type AdmissionRefusal = 'full' | 'timeout' | 'aborted';

/** Thrown when: the router's admission queue refuses a request (AdmissionRefusal). */
export class AdmissionRefused extends Error {
  constructor(readonly reason: AdmissionRefusal) {
    super(`admission refused: ${reason}`);
    this.name = 'AdmissionRefused';
  }
}

/**
 * The CLI's usage errors, each a fixed message (src/cli/read-errors.ts prints them). SPEC.md:
 * usage errors omit operands, so no message here is built from user input.
 */
export const USAGE = {
  duplicate: 'an option was given more than once',
  missingConnection: 'all three connection options are required: the server URL, --auth-env and --expected-node',
  filter: 'a filter value is invalid or out of range',
  filterOwner: '--owner must be one of router, controller, benchmark, media, recipe, manifest',
  filterKind: '--kind must be one of router-request, controller-operation, benchmark-job, media-job, recipe-serve',
  filterState:
    '--state must be one workload state (checking, admitted, dispatched, streaming, queued, running, terminal, configured, absent, unavailable, unsupported)',
  filterHost: '--host must be a host ID (a letter, then letters, digits, _ or -; at most 64)',
  filterRecentSeconds: '--recent-seconds must be an integer from 1 to 86400, in plain digits',
  filterLimit: '--limit must be an integer from 1 to 1000, in plain digits',
  expectedNode: '--expected-node must be a host ID (a letter, then letters, digits, _ or -; at most 64)',
  origin: 'the URL must be an origin: http(s)://host[:port] with no path, query, fragment or credentials',
  plainHttp: 'plain HTTP is allowed only to a loopback or private IP address; a DNS name needs HTTPS',
  authEnv: 'the credential variable name must be an environment variable name (letters, digits, _)',
  noCredential: 'the credential environment variable is unset or empty',
  badCredential: 'the credential is not a valid bearer token (printable ASCII without spaces)',
  target: 'give exactly one of: a request id, --active, --session-id',
  requestId: 'the request id is not a valid request identifier',
  sessionId: 'the session id is not a valid session identifier',
  taskId: 'the task id is not a valid task identifier',
  workbenchRunId: 'the workbench run id is not a valid workbench run identifier',
  fleetTarget: 'give exactly one of: a request id, --session-id, --task-id, --workbench-run-id',
  fleetConnection: 'both connection options are required: --fleet-url and --auth-env',
  timeout: '--timeout must be a number of seconds greater than 0 and at most 30',
  settingsUnreadable: 'the settings file given with --config is not readable',
  settingsInvalid: 'the settings file is not valid (keys: router_url, auth_env, credential_env_file, timeout)',
  credentialFile: 'the declared credential file is not readable or is not KEY=VALUE lines',
} as const;
export type UsageKey = keyof typeof USAGE;

/** Thrown when: a CLI command is used wrongly (exit 2); the message is the fixed USAGE text. */
export class UsageFailure extends Error {
  constructor(readonly key: UsageKey) {
    super(USAGE[key]);
    this.name = 'UsageFailure';
  }
}

/** Thrown when: an authenticated CLI read did not yield a trustworthy snapshot (exit 4); the message is fixed (src/cli/read-errors.ts). */
export class SnapshotFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SnapshotFailure';
  }
}

/** Every message `recipe status` prints on failure: fixed, never a path, name or runtime text. */
export const RECIPE_ERRORS = {
  name: 'the recipe name must be 1-63 lowercase letters, digits, _ or -, starting with a letter or digit',
  dirUnreadable: 'the recipes directory is not readable',
  unknown: 'unknown recipe: no valid recipe file in the recipes directory has this name',
  duplicate: 'the recipe is defined by more than one file in the recipes directory',
  runtime: 'the container runtime is not reachable, or did not answer as a Docker Engine API',
  failure: 'unexpected failure',
} as const;

/** Thrown when: `recipe status` fails; the message is the fixed RECIPE_ERRORS text, printed with `exitCode`. */
export class RecipeFailure extends Error {
  constructor(
    readonly key: keyof typeof RECIPE_ERRORS,
    readonly exitCode: number,
  ) {
    super(RECIPE_ERRORS[key]);
  }
}
