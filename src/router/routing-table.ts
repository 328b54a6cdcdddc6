import type { ModelRoute } from '../config/router-config.js';
import { envVar } from '../config/env-var.js';
import { ConfigError } from '../errors.js';
import { Admission } from './admission.js';
import { digest, isCredentialText } from '../auth/api-keys.js';
import type { Upstream } from './relay-context.js';
import { ReplicaSet } from './replica-set.js';

/**
 * What `[[models]]` configures, as the relay uses it: one entry per alias. A reload builds a
 * new table and swaps it in whole; a request keeps the entry it began with.
 */
export interface RoutingTable {
  readonly models: readonly ModelRoute[];
  /** SHA-256 over the canonical JSON of `[[models]]` (CONTRACT.md). */
  readonly routingConfigHash: string;
  readonly upstreams: ReadonlyMap<string, Upstream>;
}

/**
 * Builds the routing table: each alias's replicas and its upstream key (read from the
 * environment now). An alias `previous` has too keeps its admission (requests in flight and
 * waiting, under the new limits). `credentials` gets the digest of every upstream key (a
 * caller id carrying one is dropped). docs/decisions/0052.
 * Thrown when: an upstream key variable is unset, empty or not a usable key (ConfigError
 * naming the variable and the alias, never the value).
 */
export function buildRoutingTable(
  models: readonly ModelRoute[],
  routingConfigHash: string,
  env: NodeJS.ProcessEnv,
  readinessTtlMs: number,
  credentials: Set<string>,
  previous?: RoutingTable,
): RoutingTable {
  const keys = models.map((m) => upstreamKey(m, env));
  const upstreams = new Map<string, Upstream>();
  models.forEach((m, i) => {
    const apiKey = keys[i];
    let admission = previous?.upstreams.get(m.alias)?.admission;
    if (admission) admission.reconfigure(m.maxConcurrency, m.maxQueue, m.queueTimeoutMs);
    else admission = new Admission(m.maxConcurrency, m.maxQueue, m.queueTimeoutMs);
    upstreams.set(m.alias, {
      route: m,
      replicas: new ReplicaSet(m, readinessTtlMs),
      admission,
      apiKey,
      routingConfigHash,
    });
    if (apiKey !== undefined) credentials.add(digest(apiKey));
  });
  return { models, routingConfigHash, upstreams };
}

/** Every replica of the table leaves service: its pools close once their requests are over. */
export function retireTable(table: RoutingTable): void {
  for (const up of table.upstreams.values()) up.replicas.retire();
}

/** Closes every pool of the table (at a stop). */
export async function closeTable(table: RoutingTable): Promise<void> {
  await Promise.all([...table.upstreams.values()].map((up) => up.replicas.close()));
}

/** The alias's upstream key from its `upstream_api_key_env`, or undefined. Thrown when: unusable (ConfigError). */
function upstreamKey(m: ModelRoute, env: NodeJS.ProcessEnv): string | undefined {
  if (!m.upstreamApiKeyEnv) return undefined;
  const raw = envVar(env, m.upstreamApiKeyEnv);
  if (!raw?.trim())
    throw new ConfigError(
      `router configuration: environment variable ${m.upstreamApiKeyEnv} (upstream key of "${m.alias}") ${raw === undefined ? 'is not set' : 'is empty'}`,
    );
  // Sent as `Authorization: Bearer <key>`: one a header cannot carry would fail every request.
  const apiKey = raw.trim();
  if (!isCredentialText(apiKey))
    throw new ConfigError(
      `router configuration: environment variable ${m.upstreamApiKeyEnv} (upstream key of "${m.alias}") is not 1-4096 printable ASCII characters without spaces`,
    );
  return apiKey;
}
