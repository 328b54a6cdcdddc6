import { createHash, timingSafeEqual } from 'node:crypto';
import { AuthorizationPolicy } from '../auth/policy.js';
import { checkOrigin } from '../auth/origin-policy.js';
import { ConfigError } from '../errors.js';
import { isLoopbackHost } from '../http/http-app.js';
import { isHostId } from '../schema/primitives.js';
import { envVar } from '../config/env-var.js';
import type { TlsFiles } from '../config/tls-settings.js';
import { resolve } from 'node:path';

/** What `dashboard serve` was given, before any check (commander hands over raw strings). */
export interface DashboardOptions {
  readonly host: string;
  readonly port: number;
  /** Name of the environment variable holding the telemetry credential. */
  readonly authEnv?: string | undefined;
  readonly workloadControllerUrl?: string | undefined;
  readonly workloadExpectedNode?: string | undefined;
  readonly workloadAuthorizationPolicy?: string | undefined;
  /** The fleet controller the Fleet view reads (`--workload-fleet-url`, a bare origin; decision 0078). */
  readonly workloadFleetUrl?: string | undefined;
  /** The router's `/metrics` URL, for router figures in the telemetry tab (set by `up`). */
  readonly routerMetricsUrl?: string | undefined;
  /** The router the Requests view reads (`--router-url`, a bare origin). */
  readonly routerUrl?: string | undefined;
  /** The environment variable holding the router credential (`--router-auth-env`). */
  readonly routerAuthEnv?: string | undefined;
  /** The router credential itself, in-process only (`up` hands its own data-plane key over). */
  readonly routerCredential?: string | undefined;
  /** GPU sampling period. */
  readonly sampleIntervalMs?: number | undefined;
  /** The sockets' heartbeat (decision 0037; default HEARTBEAT_MS, not an option of the command line). */
  readonly heartbeatMs?: number | undefined;
  /** `--tls-cert-file` and `--tls-key-file` (PEM; both or neither): the dashboard speaks HTTPS. */
  readonly tlsCertFile?: string | undefined;
  readonly tlsKeyFile?: string | undefined;
}

/**
 * The dashboard's certificate and key files, or undefined for plain HTTP.
 * Thrown when: only one of the two options is given (ConfigError naming the missing one).
 */
export function dashboardTls(o: DashboardOptions): TlsFiles | undefined {
  if (o.tlsCertFile === undefined && o.tlsKeyFile === undefined) return undefined;
  if (o.tlsCertFile === undefined || o.tlsKeyFile === undefined)
    throw new ConfigError(
      `${o.tlsCertFile === undefined ? '--tls-cert-file' : '--tls-key-file'} is missing (--tls-cert-file and --tls-key-file go together)`,
    );
  return { certFile: resolve(o.tlsCertFile), keyFile: resolve(o.tlsKeyFile) };
}

/** Why workload reads are disabled. Logged as this code only: never a URL, path or value. */
export type DisabledReason =
  | 'not-configured'
  | 'incomplete'
  | 'invalid-controller-url'
  | 'invalid-expected-node'
  | 'invalid-policy'
  | 'collision';

export type WorkloadService =
  | {
      readonly enabled: true;
      readonly origin: string;
      readonly expectedNode: string;
      readonly policy: AuthorizationPolicy;
    }
  | { readonly enabled: false; readonly reason: DisabledReason };

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
/** Printable ASCII without spaces, as for every bearer credential of this project. */
export const TOKEN_RE = /^[\x21-\x7e]{1,4096}$/;

/**
 * The telemetry gate. With `--auth-env`, the named variable must hold a credential (a typo
 * must not silently open telemetry). Without it, telemetry is open, which is only allowed on
 * loopback: anyone who can reach a non-loopback port would otherwise read it.
 * Thrown when: the variable name is invalid, unset or not a credential; or no --auth-env on a
 * non-loopback address (ConfigError naming the option or variable, never a value).
 */
export function telemetryGate(o: DashboardOptions, env: NodeJS.ProcessEnv): TelemetryGate {
  if (o.authEnv === undefined) {
    if (!isLoopbackHost(o.host))
      throw new ConfigError('--auth-env is required when the dashboard listens on a non-loopback address');
    return new TelemetryGate(undefined);
  }
  if (!ENV_NAME_RE.test(o.authEnv)) throw new ConfigError('--auth-env must be an environment variable name');
  const token = envVar(env, o.authEnv)?.trim() ?? '';
  if (token === '')
    throw new ConfigError(
      `--auth-env: environment variable ${o.authEnv} ${envVar(env, o.authEnv) === undefined ? 'is not set' : 'is empty'}`,
    );
  if (!TOKEN_RE.test(token))
    throw new ConfigError(`--auth-env: environment variable ${o.authEnv} is not a valid credential`);
  return new TelemetryGate(token);
}

const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();

/** Checks the telemetry credential in constant time; keeps only its digest. */
export class TelemetryGate {
  private readonly digest: Buffer | undefined;
  /** Kept only to detect a collision with a workload client, then dropped. */
  private token: string | undefined;

  constructor(token: string | undefined) {
    this.digest = token === undefined ? undefined : digest(token);
    this.token = token;
  }

  get required(): boolean {
    return this.digest !== undefined;
  }

  allows(credential: unknown): boolean {
    if (this.digest === undefined) return true;
    if (typeof credential !== 'string' || !TOKEN_RE.test(credential)) return false;
    return timingSafeEqual(this.digest, digest(credential));
  }

  /** True when some workload client authenticates with the telemetry credential. */
  collidesWith(policy: AuthorizationPolicy): boolean {
    return this.token !== undefined && policy.authenticate(this.token) !== undefined;
  }

  forgetToken(): void {
    this.token = undefined;
  }
}

/**
 * Workload reads are enabled only when all three `--workload-*` options are present and
 * valid, and no workload client shares the telemetry credential (SPEC.md: a collision with
 * other authentication material disables them). Anything else disables them; the dashboard
 * still starts and telemetry keeps working. Never throws.
 */
export function workloadService(o: DashboardOptions, env: NodeJS.ProcessEnv, gate: TelemetryGate): WorkloadService {
  const given = [o.workloadControllerUrl, o.workloadExpectedNode, o.workloadAuthorizationPolicy].filter(
    (v) => v !== undefined,
  ).length;
  if (given === 0) return { enabled: false, reason: 'not-configured' };
  if (given < 3) return { enabled: false, reason: 'incomplete' };
  let origin: string;
  try {
    // The CLI's rule: plain HTTP only to loopback or private IP literals, HTTPS otherwise.
    origin = checkOrigin(o.workloadControllerUrl!).origin;
  } catch {
    return { enabled: false, reason: 'invalid-controller-url' };
  }
  if (!isHostId(o.workloadExpectedNode)) return { enabled: false, reason: 'invalid-expected-node' };
  let policy: AuthorizationPolicy;
  try {
    policy = AuthorizationPolicy.load(o.workloadAuthorizationPolicy!, env);
  } catch {
    return { enabled: false, reason: 'invalid-policy' };
  }
  if (gate.collidesWith(policy)) return { enabled: false, reason: 'collision' };
  return { enabled: true, origin, expectedNode: o.workloadExpectedNode, policy };
}

/** Why the Fleet view is off. Logged as this code only: never a URL or a value. */
export type FleetDisabledReason = 'not-configured' | 'needs-workload-reads' | 'invalid-fleet-url';

/**
 * The fleet controller the Fleet view reads (decision 0078): `--workload-fleet-url`, on top
 * of valid workload reads (the same policy checks the credential before it is forwarded, and
 * the same expected node must be among the fleet's declared nodes). Never throws: like
 * workload reads, a bad value disables the view with a fixed code and the dashboard starts.
 */
export function fleetService(
  o: DashboardOptions,
  service: WorkloadService,
):
  | { readonly enabled: true; readonly origin: string }
  | { readonly enabled: false; readonly reason: FleetDisabledReason } {
  if (o.workloadFleetUrl === undefined) return { enabled: false, reason: 'not-configured' };
  if (!service.enabled) return { enabled: false, reason: 'needs-workload-reads' };
  try {
    return { enabled: true, origin: checkOrigin(o.workloadFleetUrl).origin };
  } catch {
    return { enabled: false, reason: 'invalid-fleet-url' };
  }
}

/**
 * The router the Requests view reads: `--router-url` with `--router-auth-env` (a data-plane
 * key or a `requests:read` client's token), or neither (decision 0076). undefined: no
 * Requests view. Thrown when: only one is given, the URL fails the origin rule, or the
 * variable is unset, empty or not a credential (ConfigError naming the option or variable,
 * never a value).
 */
export function routerSource(
  o: DashboardOptions,
  env: NodeJS.ProcessEnv,
): { readonly origin: string; readonly credential: string } | undefined {
  if (o.routerUrl === undefined && o.routerAuthEnv === undefined && o.routerCredential === undefined) return undefined;
  if (o.routerUrl === undefined) throw new ConfigError('--router-auth-env needs --router-url');
  let origin: string;
  try {
    origin = checkOrigin(o.routerUrl).origin;
  } catch {
    throw new ConfigError(
      '--router-url must be a bare origin (http only to loopback or private IP literals, https otherwise)',
    );
  }
  if (o.routerCredential !== undefined && TOKEN_RE.test(o.routerCredential))
    return { origin, credential: o.routerCredential };
  if (o.routerAuthEnv === undefined) throw new ConfigError('--router-url needs --router-auth-env');
  if (!ENV_NAME_RE.test(o.routerAuthEnv))
    throw new ConfigError('--router-auth-env must be an environment variable name');
  const token = envVar(env, o.routerAuthEnv)?.trim() ?? '';
  if (token === '')
    throw new ConfigError(
      `--router-auth-env: environment variable ${o.routerAuthEnv} ${envVar(env, o.routerAuthEnv) === undefined ? 'is not set' : 'is empty'}`,
    );
  if (!TOKEN_RE.test(token))
    throw new ConfigError(`--router-auth-env: environment variable ${o.routerAuthEnv} is not a valid credential`);
  return { origin, credential: token };
}
