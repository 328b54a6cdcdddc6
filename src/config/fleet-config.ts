import { resolve } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { ConfigError } from '../errors.js';
import { HOST_ID_PATTERN } from '../schema/primitives.js';
import { loadTomlConfig, parseListen, reported, throwProblem, type ConfigReport } from './load-toml.js';
import { NatsSettings, natsConnection, type NatsConnection } from './node-config.js';
import { TlsSettings, tlsFiles, type TlsFiles } from './tls-settings.js';

export const FleetConfigSchema = Type.Object(
  {
    fleet: Type.Object(
      {
        listen: Type.String({ default: '127.0.0.1:8300', maxLength: 300 }),
        ...NatsSettings,
        authorization_policy: Type.String({ minLength: 1, maxLength: 4096 }),
        node_timeout_ms: Type.Integer({ minimum: 1, maximum: 60_000, default: 2_000 }),
        /** `/metrics` asks for a `workloads:read` or `requests:read` credential (as the router's option). */
        metrics_require_auth: Type.Boolean({ default: false }),
        ...TlsSettings,
      },
      { additionalProperties: false },
    ),
    nodes: Type.Array(
      Type.Object(
        { host_id: Type.String({ pattern: HOST_ID_PATTERN }), sleeping: Type.Boolean({ default: false }) },
        { additionalProperties: false },
      ),
      { maxItems: 10_000, default: [] },
    ),
  },
  { additionalProperties: false },
);
export type FleetConfigFile = Static<typeof FleetConfigSchema>;

export interface FleetConfig {
  readonly listen: { host: string; port: number };
  readonly nats: NatsConnection | undefined;
  readonly policyPath: string;
  readonly nodeTimeoutMs: number;
  readonly nodes: readonly { hostId: string; sleeping: boolean }[];
  /** `/metrics` asks for a credential (default: open, as the router's). */
  readonly metricsRequireAuth?: boolean;
  /** The listener speaks HTTPS with these (re-read on SIGHUP); undefined: plain HTTP. */
  readonly tls?: TlsFiles | undefined;
}

/** Reads a fleet controller configuration. Thrown when: invalid (ConfigError). */
export function loadFleetConfig(path: string): FleetConfig {
  const { value, dir } = loadTomlConfig(path, FleetConfigSchema, 'fleet');
  return fleetConfigFrom(value, dir);
}

/**
 * Builds the runtime fleet configuration. Thrown when: a rule across members is broken
 * (ConfigError). With a collecting `report` (config check), each is reported and the result
 * is not to be used.
 */
export function fleetConfigFrom(value: FleetConfigFile, dir: string, report: ConfigReport = throwProblem): FleetConfig {
  // A fleet of no nodes would answer "complete, nothing running": an idle fleet it cannot know.
  if (value.nodes.length === 0)
    report(new ConfigError('fleet configuration: no [[nodes]] declared (a fleet needs at least one node)'));
  const seen = new Set<string>();
  value.nodes.forEach((n, i) => {
    if (seen.has(n.host_id))
      report(
        new ConfigError(`fleet configuration: node "${n.host_id}" is declared twice`, {
          member: `/nodes/${i}/host_id`,
        }),
      );
    seen.add(n.host_id);
  });
  if (!value.fleet.nats_url)
    report(new ConfigError('fleet configuration: nats_url is required (nodes answer over NATS)'));
  return {
    // Made, or (collecting) reported: the result is used only when nothing was.
    listen: reported(report, () => parseListen(value.fleet.listen, 'fleet'))!,
    nats: reported(report, () => natsConnection(value.fleet)),
    policyPath: resolve(dir, value.fleet.authorization_policy),
    nodeTimeoutMs: value.fleet.node_timeout_ms,
    nodes: value.nodes.map((n) => ({ hostId: n.host_id, sleeping: n.sleeping })),
    metricsRequireAuth: value.fleet.metrics_require_auth,
    tls: reported(report, () => tlsFiles(value.fleet, dir, 'fleet')),
  };
}
