import type { Logger } from 'pino';
import { canonicalJson, type RouterConfig } from '../config/router-config.js';
import { ConfigError } from '../errors.js';
import type { RouterMetrics } from './metrics.js';
import type { RelayContext } from './relay-context.js';
import { buildRoutingTable, retireTable, type RoutingTable } from './routing-table.js';

/** The routing table in service: replaced whole by a reload. */
export interface RoutingState {
  table: RoutingTable;
}

export interface ReloadDeps {
  readonly state: RoutingState;
  /** The relay's context: its `upstreams` is the table's. */
  readonly ctx: RelayContext;
  /** The configuration the router started with: `[server]` changes need a restart. */
  readonly started: RouterConfig;
  readonly env: NodeJS.ProcessEnv;
  readonly credentials: Set<string>;
  readonly metrics: RouterMetrics;
  /** The in-flight journal's identity: later lines carry the new hash. */
  readonly identity: { routing_config_hash: string };
  readonly log: Logger;
}

export type ReloadResult = 'applied' | 'rejected';

/**
 * SIGHUP: reads the configuration again and puts its `[[models]]` in service. Requests in
 * flight finish on the entry they began with; later ones (and their records'
 * `routing_config_hash`) use the new table. A file that fails validation leaves the running
 * configuration in place: one log line (the key at fault, never a value or URL) and
 * `svc_router_config_reloads_total{result="rejected"}`. `[server]` changes take effect only
 * at a restart (said in the applied line). docs/decisions/0052.
 */
export function reloadRouting(d: ReloadDeps, load: () => RouterConfig): ReloadResult {
  let next: RouterConfig;
  let table: RoutingTable;
  try {
    next = load();
    const old = d.state.table;
    table =
      next.routingConfigHash === old.routingConfigHash
        ? old
        : buildRoutingTable(next.models, next.routingConfigHash, d.env, d.started.readinessTtlMs, d.credentials, old);
  } catch (err) {
    d.metrics.reloaded('rejected');
    // A ConfigError names the key and the alias (configured names), never a value or a URL.
    d.log.warn(
      err instanceof ConfigError ? { reason: err.message } : { errName: (err as Error)?.name },
      'configuration reload rejected; the running configuration stays',
    );
    return 'rejected';
  }
  const server_changed = serverPart(next) !== serverPart(d.started);
  if (table !== d.state.table) {
    const old = d.state.table;
    d.state.table = table;
    d.ctx.upstreams = table.upstreams;
    d.identity.routing_config_hash = table.routingConfigHash;
    d.metrics.setAliases(table.models.map((m) => m.alias));
    retireTable(old);
  }
  d.metrics.reloaded('applied');
  d.log.info(
    { routing_config_hash: table.routingConfigHash, models: table.models.length, server_changed },
    server_changed
      ? 'configuration reloaded; [server] changes take effect at the next restart'
      : 'configuration reloaded',
  );
  return 'applied';
}

/** Everything but `[[models]]`, comparable. */
function serverPart(cfg: RouterConfig): string {
  const { models: _m, routingConfigHash: _h, ...server } = cfg;
  return canonicalJson(server);
}
