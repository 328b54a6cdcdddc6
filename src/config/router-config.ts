import { createHash } from 'node:crypto';
import { resolve } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from '../errors.js';
import { HOST_ID_PATTERN } from '../schema/primitives.js';
import { loadTomlConfig, parseListen, reported, throwProblem, type ConfigReport } from './load-toml.js';
import { NatsSettings, natsConnection, type NatsConnection } from './node-config.js';
import { TlsSettings, tlsFiles, type TlsFiles } from './tls-settings.js';

const ENV_NAME = Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$' });
/** A model alias: also the `model` of every terminal record. */
export const ALIAS_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$';
const ALIAS = Type.String({ pattern: ALIAS_PATTERN });
const UPSTREAM_URL = Type.String({ pattern: '^https?://[^\\s@]+$', maxLength: 512 });
/** Replicas one alias may list in `upstreams`. */
export const MAX_REPLICAS = 16;
/** Upper bound of `max_attempts` (attempts in all, the first included). */
export const MAX_ATTEMPTS = 10;
/** `max_attempts` when the file does not set it (CONTRACT.md). */
export const DEFAULT_MAX_ATTEMPTS = 2;

export const ModelSchema = Type.Object(
  {
    alias: ALIAS,
    // Exactly one of `upstream` and `upstreams` (checked in routerConfigFrom).
    upstream: Type.Optional(UPSTREAM_URL),
    upstreams: Type.Optional(Type.Array(UPSTREAM_URL, { minItems: 1, maxItems: MAX_REPLICAS })),
    // Optional without a default: a file that does not name it hashes as it did before replicas.
    max_attempts: Type.Optional(Type.Integer({ minimum: 1, maximum: MAX_ATTEMPTS })),
    upstream_model: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    upstream_api_key_env: Type.Optional(ENV_NAME),
    max_output_tokens: Type.Integer({ minimum: 1, maximum: 10_000_000, default: 4096 }),
    max_concurrency: Type.Integer({ minimum: 1, maximum: 100_000, default: 8 }),
    max_queue: Type.Optional(Type.Integer({ minimum: 0, maximum: 1_000_000 })),
    queue_timeout_ms: Type.Integer({ minimum: 1, maximum: 3_600_000, default: 30_000 }),
    upstream_timeout_ms: Type.Integer({ minimum: 1, maximum: 86_400_000, default: 600_000 }),
    // A path sent as it is: printable ASCII, no space, no fragment (`#`).
    readiness_path: Type.String({ pattern: '^/[\\x21\\x22\\x24-\\x7e]*$', default: '/health', maxLength: 256 }),
  },
  { additionalProperties: false },
);
export type ModelEntry = Static<typeof ModelSchema>;

export const RouterConfigSchema = Type.Object(
  {
    server: Type.Object(
      {
        host_id: Type.String({ pattern: HOST_ID_PATTERN }),
        listen: Type.String({ default: '127.0.0.1:8000', maxLength: 300 }),
        api_keys_env: ENV_NAME,
        authorization_policy: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
        decision_log_path: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
        decision_log_max_bytes: Type.Integer({ minimum: 4096, maximum: 1 << 30, default: 16 * 1024 * 1024 }),
        decision_log_max_files: Type.Integer({ minimum: 1, maximum: 100, default: 5 }),
        buffer_size: Type.Integer({ minimum: 10, maximum: 1_000_000, default: 10_000 }),
        readiness_ttl_ms: Type.Integer({ minimum: 0, maximum: 600_000, default: 2_000 }),
        metrics_require_auth: Type.Boolean({ default: false }),
        stale_after_seconds: Type.Number({ default: 30, exclusiveMinimum: 0, maximum: 86_400 }),
        max_body_bytes: Type.Integer({ minimum: 1024, maximum: 256 * 1024 * 1024, default: 32 * 1024 * 1024 }),
        ...NatsSettings,
        ...TlsSettings,
      },
      { additionalProperties: false },
    ),
    models: Type.Array(ModelSchema, { minItems: 1, maxItems: 1000 }),
  },
  { additionalProperties: false },
);
export type RouterConfigFile = Static<typeof RouterConfigSchema>;

/** One replica of an alias: an OpenAI-compatible API at an origin and base path. */
export interface UpstreamTarget {
  /** Origin + base path, without trailing slash (e.g. http://h:8001/v1). */
  readonly base: string;
  readonly origin: string;
  /** The base path without trailing slash (`/v1`), put before each route's path. */
  readonly pathPrefix: string;
}

export interface ModelRoute {
  readonly alias: string;
  /** `upstream` as one replica, or `upstreams` in the file's order (a record's `upstream_replica` is the index). */
  readonly replicas: readonly UpstreamTarget[];
  /** Upstream attempts per request in all, the first included (failover only before any byte reached the client). */
  readonly maxAttempts: number;
  readonly upstreamModel: string;
  readonly upstreamApiKeyEnv: string | undefined;
  readonly maxOutputTokens: number;
  readonly maxConcurrency: number;
  readonly maxQueue: number;
  readonly queueTimeoutMs: number;
  readonly upstreamTimeoutMs: number;
  readonly readinessPath: string;
}

export interface RouterConfig {
  readonly hostId: string;
  readonly listen: { host: string; port: number };
  readonly apiKeysEnv: string;
  readonly policyPath: string | undefined;
  readonly decisionLog: { path: string; maxBytes: number; maxFiles: number } | undefined;
  readonly bufferSize: number;
  readonly readinessTtlMs: number;
  readonly metricsRequireAuth: boolean;
  readonly staleAfterMs: number;
  readonly maxBodyBytes: number;
  readonly nats: NatsConnection | undefined;
  /** The listener speaks HTTPS with these (re-read on SIGHUP); undefined: plain HTTP. */
  readonly tls?: TlsFiles | undefined;
  readonly models: readonly ModelRoute[];
  /** SHA-256 over the canonical JSON of `[[models]]` (CONTRACT.md). */
  readonly routingConfigHash: string;
}

/** JSON with object keys sorted at every level: the same models always hash the same. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    const keys = Object.keys(v).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * The replicas of `[[models]]` entry `i`: its one `upstream`, or its `upstreams` in order.
 * Errors name the entry's position, its alias and the key, never the URL.
 * Reported when: both or neither key is set, a URL is not a plain http(s) origin and path, or
 * one replica is listed twice (ConfigError to `report`: thrown, by default).
 */
function replicasOf(m: ModelEntry, i: number, report: ConfigReport): UpstreamTarget[] {
  const where = `/models/${i} (alias "${m.alias}")`;
  if ((m.upstream === undefined) === (m.upstreams === undefined)) {
    report(
      new ConfigError(
        `router configuration: ${where} must set exactly one of upstream and upstreams (it sets ${m.upstream === undefined ? 'neither' : 'both'})`,
        { member: m.upstream === undefined ? `/models/${i}` : `/models/${i}/upstreams` },
      ),
    );
    return [];
  }
  // The single key keeps its message of before replicas (`upstream of "alias"`).
  const urls = m.upstreams ?? [m.upstream!];
  const key = (j: number): string =>
    m.upstreams === undefined ? `upstream of "${m.alias}"` : `upstreams/${j} of ${where}`;
  const member = (j: number): string =>
    m.upstreams === undefined ? `/models/${i}/upstream` : `/models/${i}/upstreams/${j}`;
  const out: UpstreamTarget[] = [];
  urls.forEach((text, j) => {
    const fault = (why: string): void =>
      report(new ConfigError(`router configuration: ${key(j)} ${why}`, { member: member(j) }));
    const t = upstreamTarget(text);
    if (t === 'not-url') return fault('is not a URL');
    if (t === 'not-plain') return fault('must be a plain origin and path');
    if (out.some((o) => o.base === t.base)) return fault('repeats an earlier replica of the same alias');
    out.push(t);
  });
  return out;
}

/** An upstream URL as origin and base path, or why it cannot be one. */
function upstreamTarget(text: string): UpstreamTarget | 'not-url' | 'not-plain' {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'not-url';
  }
  if (url.search || url.hash || url.username || url.password) return 'not-plain';
  // A host that is really there (`http:///v1` parses with `v1` as its host) and a real port.
  if (!/^[A-Za-z][A-Za-z0-9+.-]*:\/\/[^/?#]/.test(text) || url.port === '0') return 'not-url';
  const prefix = url.pathname.replace(/\/+$/, '');
  return { base: url.origin + prefix, origin: url.origin, pathPrefix: prefix };
}

/**
 * Builds the runtime router configuration. Thrown when: invalid (ConfigError naming the
 * member). With a collecting `report` (config check), every rule across members it breaks is
 * reported and the result is not to be used.
 */
export function routerConfigFrom(
  value: RouterConfigFile,
  dir: string,
  report: ConfigReport = throwProblem,
): RouterConfig {
  const s = value.server;
  const aliases = new Set<string>();
  const models = value.models.map((m, i): ModelRoute => {
    if (aliases.has(m.alias))
      report(
        new ConfigError(`router configuration: model alias "${m.alias}" is declared twice`, {
          member: `/models/${i}/alias`,
        }),
      );
    aliases.add(m.alias);
    return {
      alias: m.alias,
      replicas: replicasOf(m, i, report),
      maxAttempts: m.max_attempts ?? DEFAULT_MAX_ATTEMPTS,
      upstreamModel: m.upstream_model ?? m.alias,
      upstreamApiKeyEnv: m.upstream_api_key_env,
      maxOutputTokens: m.max_output_tokens,
      maxConcurrency: m.max_concurrency,
      maxQueue: m.max_queue ?? m.max_concurrency * 16,
      queueTimeoutMs: m.queue_timeout_ms,
      upstreamTimeoutMs: m.upstream_timeout_ms,
      readinessPath: m.readiness_path,
    };
  });
  return {
    hostId: s.host_id,
    // Made, or (collecting) reported: the result is used only when nothing was.
    listen: reported(report, () => parseListen(s.listen, 'router'))!,
    apiKeysEnv: s.api_keys_env,
    policyPath: s.authorization_policy ? resolve(dir, s.authorization_policy) : undefined,
    decisionLog: s.decision_log_path
      ? {
          path: resolve(dir, s.decision_log_path),
          maxBytes: s.decision_log_max_bytes,
          maxFiles: s.decision_log_max_files,
        }
      : undefined,
    bufferSize: s.buffer_size,
    readinessTtlMs: s.readiness_ttl_ms,
    metricsRequireAuth: s.metrics_require_auth,
    staleAfterMs: Math.round(s.stale_after_seconds * 1000),
    maxBodyBytes: s.max_body_bytes,
    nats: reported(report, () => natsConnection(s)),
    tls: reported(report, () => tlsFiles(s, dir, 'router')),
    models,
    routingConfigHash: createHash('sha256').update(canonicalJson(value.models)).digest('hex'),
  };
}

/** Reads a router configuration file. Thrown when: invalid (ConfigError). */
export function loadRouterConfig(path: string): RouterConfig {
  const { value, dir } = loadTomlConfig(path, RouterConfigSchema, 'router');
  return routerConfigFrom(value, dir);
}
