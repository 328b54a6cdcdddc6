import { resolve } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from '../errors.js';
import { HOST_ID_PATTERN } from '../schema/primitives.js';
import { loadTomlConfig, parseListen, reported, throwProblem, type ConfigReport } from './load-toml.js';
import { NATS_SERVERS_PATTERN, parseNatsServers } from './nats-url.js';
import { TlsSettings, tlsFiles, type TlsFiles } from './tls-settings.js';

const ENV_NAME = Type.String({ pattern: '^[A-Za-z_][A-Za-z0-9_]{0,127}$' });

/** NATS connection settings shared by every process; secrets only by environment variable name. */
export const NatsSettings = {
  // One server or a comma-separated seed list of a cluster's servers (docs/nats.md).
  nats_url: Type.Optional(Type.String({ pattern: NATS_SERVERS_PATTERN, maxLength: 4096 })),
  nats_user: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  nats_password_env: Type.Optional(ENV_NAME),
  nats_token_env: Type.Optional(ENV_NAME),
};

export const NodeConfigSchema = Type.Object(
  {
    node: Type.Object(
      {
        host_id: Type.String({ pattern: HOST_ID_PATTERN }),
        listen: Type.String({ default: '127.0.0.1:8100', maxLength: 300 }),
        ...NatsSettings,
        authorization_policy: Type.String({ minLength: 1, maxLength: 4096 }),
        stale_after_seconds: Type.Number({ default: 30, exclusiveMinimum: 0, maximum: 86_400 }),
        state_dir: Type.String({ default: 'state', minLength: 1, maxLength: 4096 }),
        /** Directory of recipe TOML files (owner `recipe`); unset: no recipe actor. */
        recipes_dir: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
        /** Directory of manifest TOML files (owner `manifest`); unset: no manifest actor. */
        manifests_dir: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
        /** The container runtime's Docker Engine API unix socket. */
        container_socket: Type.String({ default: '/var/run/docker.sock', minLength: 1, maxLength: 4096 }),
        /** The node's router, for benchmark and media jobs (lifecycle commands). */
        router_url: Type.Optional(Type.String({ pattern: '^https?://[^\\s@/]+$', maxLength: 512 })),
        router_key_env: Type.Optional(ENV_NAME),
        /** The only directory media jobs read audio files from; unset: media jobs are 503. */
        media_dir: Type.Optional(Type.String({ minLength: 1, maxLength: 4096 })),
        /** `/metrics` asks for a `workloads:read` or `requests:read` credential (as the router's option). */
        metrics_require_auth: Type.Boolean({ default: false }),
        ...TlsSettings,
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false },
);
export type NodeConfigFile = Static<typeof NodeConfigSchema>;

export interface NodeConfig {
  readonly hostId: string;
  readonly listen: { host: string; port: number };
  readonly nats: NatsConnection | undefined;
  readonly policyPath: string;
  readonly staleAfterMs: number;
  readonly stateDir: string;
  /** Recipes and manifests (docs/api.md, "Recipes and manifests"); absolute paths, never in records. */
  readonly recipesDir?: string | undefined;
  readonly manifestsDir?: string | undefined;
  readonly containerSocket?: string | undefined;
  /** Where benchmark and media jobs send their requests; the key's variable name, never its value. */
  readonly router?: { readonly url: string; readonly keyEnv: string } | undefined;
  /** Media jobs read files only under this directory (absolute). */
  readonly mediaDir?: string | undefined;
  /** `/metrics` asks for a credential (default: open, as the router's). */
  readonly metricsRequireAuth?: boolean;
  /** The listener speaks HTTPS with these (re-read on SIGHUP); undefined: plain HTTP. */
  readonly tls?: TlsFiles | undefined;
}

export interface NatsConnection {
  /** `nats_url` as written. */
  readonly url: string;
  /** Its servers, one URL each (a cluster's seed list, or one server). */
  readonly servers: readonly string[];
  readonly user?: string;
  readonly passwordEnv?: string;
  readonly tokenEnv?: string;
}

/** Reads `[node]` of a controller configuration. Thrown when: invalid (ConfigError). */
export function loadNodeConfig(path: string): NodeConfig {
  const { value, dir } = loadTomlConfig(path, NodeConfigSchema, 'node');
  return nodeConfigFrom(value, dir);
}

/**
 * Builds the runtime node configuration. Thrown when: a rule across members is broken
 * (ConfigError). With a collecting `report` (config check), each is reported and the result
 * is not to be used.
 */
export function nodeConfigFrom(value: NodeConfigFile, dir: string, report: ConfigReport = throwProblem): NodeConfig {
  const n = value.node;
  // One without the other would start a node whose jobs can never run, silently.
  if ((n.router_url === undefined) !== (n.router_key_env === undefined)) {
    report(
      new ConfigError(
        'node configuration: router_url and router_key_env go together (benchmark and media jobs need both)',
      ),
    );
  }
  return {
    hostId: n.host_id,
    // Made, or (collecting) reported: the result is used only when nothing was.
    listen: reported(report, () => parseListen(n.listen, 'node'))!,
    nats: reported(report, () => natsConnection(n)),
    policyPath: resolve(dir, n.authorization_policy),
    staleAfterMs: Math.round(n.stale_after_seconds * 1000),
    stateDir: resolve(dir, n.state_dir),
    recipesDir: n.recipes_dir === undefined ? undefined : resolve(dir, n.recipes_dir),
    manifestsDir: n.manifests_dir === undefined ? undefined : resolve(dir, n.manifests_dir),
    containerSocket: resolve(dir, n.container_socket),
    router: n.router_url && n.router_key_env ? { url: n.router_url, keyEnv: n.router_key_env } : undefined,
    mediaDir: n.media_dir === undefined ? undefined : resolve(dir, n.media_dir),
    metricsRequireAuth: n.metrics_require_auth,
    tls: reported(report, () => tlsFiles(n, dir, 'node')),
  };
}

/** The NATS part of a config section, or undefined when it runs on the in-process bus. Thrown when: nats_url names a server twice or mixes schemes (ConfigError). */
export function natsConnection(s: {
  nats_url?: string;
  nats_user?: string;
  nats_password_env?: string;
  nats_token_env?: string;
}): NatsConnection | undefined {
  if (!s.nats_url) return undefined;
  return {
    url: s.nats_url,
    servers: parseNatsServers(s.nats_url),
    ...(s.nats_user ? { user: s.nats_user } : {}),
    ...(s.nats_password_env ? { passwordEnv: s.nats_password_env } : {}),
    ...(s.nats_token_env ? { tokenEnv: s.nats_token_env } : {}),
  };
}
