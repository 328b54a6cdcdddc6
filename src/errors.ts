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
  SVC_ERR_UNAUTHENTICATED: { status: 401, slug: 'unauthenticated', title: 'Missing or unknown credential', exitCode: 4 },
  SVC_ERR_FORBIDDEN: { status: 403, slug: 'forbidden', title: 'Credential lacks the required grant', exitCode: 4 },
  SVC_ERR_ORIGIN_REFUSED: { status: 403, slug: 'forbidden', title: 'Host or Origin not allowed', exitCode: 4 },
  SVC_ERR_NOT_FOUND: { status: 404, slug: 'not-found', title: 'Not found', exitCode: 4 },
  SVC_ERR_METHOD_NOT_ALLOWED: { status: 405, slug: 'method-not-allowed', title: 'Method not allowed', exitCode: 4 },
  SVC_ERR_BODY_TOO_LARGE: { status: 413, slug: 'body-too-large', title: 'Request body too large', exitCode: 4 },
  SVC_ERR_UNSUPPORTED_MEDIA_TYPE: { status: 415, slug: 'unsupported-media-type', title: 'Unsupported media type', exitCode: 4 },
  SVC_ERR_ADMISSION_REFUSED: { status: 429, slug: 'admission-refused', title: 'Admission refused', exitCode: 4 },
  SVC_ERR_CONTEXT_LENGTH: { status: 400, slug: 'context-length-exceeded', title: "Request exceeds the model's context length", exitCode: 4 },
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
const PATH_ERROR_CODES: ReadonlySet<string> = new Set(['EACCES', 'EPERM', 'ENOENT', 'ENOTDIR', 'EISDIR', 'EROFS', 'ELOOP', 'ENAMETOOLONG', 'EEXIST', 'ENOTREG']);

/**
 * The error for a file a configured path names that cannot be written: ConfigError with
 * `configMessage` when the path is at fault, else (a full disk, an I/O error) a start-up
 * failure that names the code (exit 1).
 */
export function pathFailure(err: unknown, configMessage: string): SvcError {
  const code = (err as { code?: unknown })?.code;
  if (typeof code === 'string' && !PATH_ERROR_CODES.has(code)) return new SvcError(ErrorCode.UNAVAILABLE, `${configMessage.replace(/^[a-z]+ configuration: /, '')} now (${code})`);
  return new ConfigError(configMessage);
}
