import { constants, accessSync, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import type { DecisionLog } from './records/decision-log.js';
import type { RoutingTable } from './routing-table.js';

/**
 * The router's failing readiness checks (`/readyz`): `alias:<alias>` for each alias with no
 * ready replica (its replicas probed when their cached answers are older than
 * `readiness_ttl_ms`), and `decision-log` when the log's last write failed or its file or
 * folder cannot be written. Aliases are configured names: bounded, never a URL.
 * docs/decisions/0053.
 */
export async function routerFailing(table: RoutingTable, log: DecisionLog | undefined): Promise<string[]> {
  const ups = [...table.upstreams.values()];
  const ready = await Promise.all(ups.map((up) => up.replicas.ready()));
  const failing = ups.filter((_, i) => !ready[i]).map((up) => `alias:${up.route.alias}`);
  if (log && (log.writeFailing || !writable(log.path))) failing.push('decision-log');
  return failing;
}

/** The file (when it exists) and its folder can be written by this process. */
function writable(path: string): boolean {
  try {
    if (existsSync(path)) accessSync(path, constants.W_OK);
    accessSync(dirname(path), constants.W_OK);
    return true;
  } catch {
    return false;
  }
}
