/**
 * Coded errors. Each carries a fixed title, its HTTP status and its CLI exit code; the
 * Fastify error handler and the CLI map them, so no route or command invents error text.
 * Messages never contain operands, URLs, credentials or upstream text.
 */
export const ErrorCode = {
  INVALID_INPUT: 'SVC_ERR_INVALID_INPUT',
  UNAUTHENTICATED: 'SVC_ERR_UNAUTHENTICATED',
  FORBIDDEN: 'SVC_ERR_FORBIDDEN',
  ORIGIN_REFUSED: 'SVC_ERR_ORIGIN_REFUSED',
  NOT_FOUND: 'SVC_ERR_NOT_FOUND',
  METHOD_NOT_ALLOWED: 'SVC_ERR_METHOD_NOT_ALLOWED',
  BODY_TOO_LARGE: 'SVC_ERR_BODY_TOO_LARGE',
  UNSUPPORTED_MEDIA_TYPE: 'SVC_ERR_UNSUPPORTED_MEDIA_TYPE',
  ADMISSION_REFUSED: 'SVC_ERR_ADMISSION_REFUSED',
  CONTEXT_LENGTH: 'SVC_ERR_CONTEXT_LENGTH',
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
  readonly slug: string;
  readonly title: string;
  readonly exitCode: number;
}

/** The one registry: code -> HTTP status, problem type slug, fixed title, CLI exit code. */
export const ERRORS: Readonly<Record<ErrorCode, ErrorSpec>> = {
  SVC_ERR_INVALID_INPUT: { status: 400, slug: 'invalid-input', title: 'Invalid input', exitCode: 2 },
  SVC_ERR_UNAUTHENTICATED: {
    status: 401,
    slug: 'unauthenticated',
    title: 'Missing or unknown credential',
    exitCode: 4,
  },
  SVC_ERR_FORBIDDEN: { status: 403, slug: 'forbidden', title: 'Credential lacks the required grant', exitCode: 4 },
  SVC_ERR_ORIGIN_REFUSED: { status: 403, slug: 'forbidden', title: 'Host or Origin not allowed', exitCode: 4 },
  SVC_ERR_NOT_FOUND: { status: 404, slug: 'not-found', title: 'Not found', exitCode: 4 },
  SVC_ERR_METHOD_NOT_ALLOWED: { status: 405, slug: 'method-not-allowed', title: 'Method not allowed', exitCode: 4 },
  SVC_ERR_BODY_TOO_LARGE: { status: 413, slug: 'body-too-large', title: 'Request body too large', exitCode: 4 },
  SVC_ERR_UNSUPPORTED_MEDIA_TYPE: {
    status: 415,
    slug: 'unsupported-media-type',
    title: 'Unsupported media type',
    exitCode: 4,
  },
  SVC_ERR_ADMISSION_REFUSED: { status: 429, slug: 'admission-refused', title: 'Admission refused', exitCode: 4 },
  SVC_ERR_CONTEXT_LENGTH: {
    status: 400,
    slug: 'context-length-exceeded',
    title: "Request exceeds the model's context length",
    exitCode: 4,
  },
  SVC_ERR_UNAVAILABLE: { status: 503, slug: 'unavailable', title: 'Service unavailable', exitCode: 4 },
  SVC_ERR_UPSTREAM_FAILED: { status: 502, slug: 'upstream-failed', title: 'Upstream failed', exitCode: 4 },
  SVC_ERR_UPSTREAM_TIMEOUT: { status: 504, slug: 'upstream-timeout', title: 'Upstream timed out', exitCode: 4 },
  SVC_ERR_INTERNAL: { status: 500, slug: 'internal', title: 'Internal error', exitCode: 1 },
  SVC_ERR_CONFIG: { status: 500, slug: 'config', title: 'Invalid configuration', exitCode: 2 },
  SVC_ERR_BUS_CLOSED: { status: 503, slug: 'unavailable', title: 'Bus closed', exitCode: 4 },
  SVC_ERR_BUS_TIMEOUT: { status: 504, slug: 'upstream-timeout', title: 'Bus request timed out', exitCode: 4 },
  SVC_ERR_BUS_NO_RESPONDERS: { status: 503, slug: 'unavailable', title: 'No responders', exitCode: 4 },
};

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
/** Thrown when: configuration is invalid; `message` names the key or client id, never a secret value. */
export class ConfigError extends SvcError {
  constructor(detail: string, options?: { cause?: unknown }) {
    super(ErrorCode.CONFIG, detail, options);
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

/** The RFC 9457 body for a coded error: fixed `type`, `title` and `status` only. */
export function problemFor(code: ErrorCode): { type: string; title: string; status: number } {
  const spec = ERRORS[code];
  return { type: PROBLEM_TYPE_PREFIX + spec.slug, title: spec.title, status: spec.status };
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
